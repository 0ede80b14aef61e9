"""Resource attacks driven by the REAL agent CLIs (claude-code and codex), each against its local fake
model server: the model asks the CLI's own shell tool to run one attack of tests/security/test_bounds.py
(memory hog, fork bomb, disk fill, a file past the file-size bound, a FIFO and a 10 GiB sparse file
left in the workspace, 200 MB of stdout), then says it is done. Each attack is its own session and its
own test, its directories outside /tmp (under the `targets` root in /var/tmp).

Each test asserts the attack was bounded AND the session reached its right ending: failed with the
bound's reason (limit_memory, limit_processes, limit_workspace_bytes; a FIFO refused as
unsafe_workspace with the path named; the 10 GiB sparse file refused by the workspace bound and left
sparse), or ok where the bound acts inside the tool and the CLI carries on: a write past the file-size
bound gets EFBIG, which reaches the model; 200 MB of stdout is cut by the CLI's tool and the stored
transcript stays within its bound. Bounds are small so attacks hit
them fast, but not below what the CLI itself needs (node and codex run inside the same cgroup).
"""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from sweep.providers.base import Limits
from tests.agent_sessions import needs_claude, run_agent
from tests.fakes.anthropic_api import FakeAnthropic, text, tool_calls
from tests.fakes.anthropic_api import Script as ClaudeScript
from tests.fakes.openai_api import FakeOpenAI, call, say
from tests.fakes.openai_api import Script as CodexScript
from tests.security.test_agent_clis import OPENAI_KEY, needs_codex
from tests.security.test_bounds import ATTACKS, EXPECTED, MB

pytestmark = [needs_claude, needs_codex]

# The CLIs share the session's cgroup: node (claude) or codex needs a few hundred MB and some dozens
# of threads (threads count against the process bound), so these are larger than test_bounds' SMALL.
AGENT_LIMITS = Limits(memory_bytes=1024 * MB, processes=160, file_bytes=64 * MB, workspace_bytes=100 * MB,
                      transcript_bytes=1 * MB, tmp_bytes=64 * MB)
LIMITS = {"sparse": Limits(memory_bytes=1024 * MB, processes=160, file_bytes=None, workspace_bytes=100 * MB,
                           transcript_bytes=1 * MB, tmp_bytes=64 * MB)}
RUNTIMES = ["claude-code", "codex"]
CASES = [(runtime, attack) for runtime in RUNTIMES for attack in sorted(ATTACKS)]


def attack_command(attack: str) -> str:
    """The shell command the model asks for: the attack's Python, run from the workspace (its paths are
    under repo/)."""
    return f"python3 -c {shlex.quote(ATTACKS[attack])}"


def play(root: Path, runtime: str, attack: str):
    """One session of `runtime` whose model runs `attack` through the shell tool, then says done."""
    base = root / f"cli-bounds-{runtime}-{attack}"
    base.mkdir(parents=True)
    limits = LIMITS.get(attack, AGENT_LIMITS)
    if runtime == "claude-code":
        server: FakeAnthropic | FakeOpenAI = FakeAnthropic()
        url = server.script("solver", ClaudeScript(steps=[
            tool_calls([("Bash", {"command": attack_command(attack), "description": attack, "timeout": 120_000})]),
            text("done")]))
        role = "solver"
        options = {"base_url": url, "max_retries": 0, "stall_s": 60, "model": "claude-sonnet-4-5"}
    else:
        from tests.test_agents_codex import PRICES, codex_role
        server = FakeOpenAI()
        url = server.script("solver", CodexScript(steps=[
            call("exec_command", {"cmd": attack_command(attack), "yield_time_ms": 60_000}), say("done")]))
        role = codex_role()
        options = {"base_url": url, "max_retries": 0, "stall_s": 60, "model": "gpt-5", "prices": PRICES}
    try:
        secrets = None
        if runtime == "codex":
            key = base / "openai.key"
            key.write_text(OPENAI_KEY + "\n")
            key.chmod(0o600)
            secrets = {"OPENAI_API_KEY": key}
        result, req = run_agent(base, role, runtime, options, prompt="solve it", secrets=secrets, limits=limits)
        return result, req, server.requests
    finally:
        server.close()


@pytest.mark.parametrize("runtime,attack", CASES, ids=[f"{r}-{a}" for r, a in CASES])
def test_resource_attack_from_an_agent_cli_is_bounded_and_the_session_ends_with_its_reason(targets, runtime, attack):
    result, req, requests = play(targets.root, runtime, attack)
    record = json.loads((req.session_dir / "result.json").read_text())
    assert result.isolation == "bwrap"
    assert requests, "the CLI never reached the fake model"
    stdout = (req.session_dir / "stdout.txt").read_bytes()
    if attack == "stdout":
        # 200 MB through the shell tool: the session ends ok, its stored transcript within the bound
        # (head + tail with the cut marked when the CLI passed more than the bound on)
        assert result.status == "ok", (result.reason, result.evidence)
        assert len(stdout) <= 1 * MB + 4096, len(stdout)
        assert len(requests) >= 2, "the model never got the tool's result back"
        return
    if attack == "big_file":
        # the write past the file-size bound gets EFBIG inside the tool; the CLI hands that back to the
        # model and the session ends as the model ends it (ok): the bound held, nothing past it exists
        assert result.status == "ok", (result.reason, result.evidence)
        assert "File too large" in json.dumps(requests[-1]), "the tool's EFBIG never reached the model"
        assert all(p.stat().st_size <= 64 * MB for p in (req.workspace / "repo").rglob("*") if p.is_file())
        return
    # the sparse file is refused by the workspace watcher (its apparent size is past the bound) or, if
    # the session ends first, by the end-of-session check; either way the session fails with the reason
    reasons = {"sparse": ("unsafe_workspace", "limit_workspace_bytes")}.get(attack, (EXPECTED[attack],))
    assert result.status == "failed" and result.reason in reasons, (result.reason, result.evidence)
    assert record["reason"] == result.reason
    if result.reason == "unsafe_workspace":
        name = {"fifo": "repo/pipe", "sparse": "'sparse'"}[attack]
        assert name in result.evidence, result.evidence          # the refusal names the file
    if attack == "sparse":
        st = os.stat(req.workspace / "repo" / "sparse")
        assert st.st_size > 10 << 30 and st.st_blocks * 512 < MB     # nothing densified it
