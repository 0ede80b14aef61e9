"""A runtime's facts are declared once, by its class (sweep/runtimes/facts.py), and every name set
sweep used to spell out is derived from the registry; a third CLI-shaped runtime registered with
one line (tests/runtime_extension.py, driving tests/fakes/fake_cli.py) is preflighted and runs a
session like claude-code and codex, with nothing in sweep naming it."""
from __future__ import annotations

import json
import re
import shutil
import socketserver
import tempfile
import threading
from pathlib import Path

import pytest

from sweep.runtimes import RUNTIMES
from sweep.runtimes import facts as runtime_facts
from sweep.runtimes.facts import facts_of

REPO = Path(__file__).resolve().parents[1]
FAKE_CLI = REPO / "tests" / "fakes" / "fake_cli.py"
VERDICT = {"verdict": "accept", "findings": [], "rationale": "the fake endpoint says so"}


def test_the_name_sets_are_what_they_were_and_come_from_the_registry():
    assert runtime_facts.unpaid_runtimes() == {"oracle", "nop"}
    assert runtime_facts.host_only_runtimes() == {"oracle", "nop"}
    assert runtime_facts.protocol_classified() == {"claude-code", "codex"}
    assert runtime_facts.agent_runtimes() == {"claude-code", "codex"}
    assert runtime_facts.agent_clis() == {"claude-code": ("@anthropic-ai/claude-code", "2.1.197"),
                                          "codex": ("@openai/codex", "0.171.0")}
    assert runtime_facts.family_of() == {"claude-code": ("anthropic",), "codex": ("openai",)}
    assert runtime_facts.default_endpoints() == {"claude-code": "https://api.anthropic.com",
                                                 "codex": "https://api.openai.com/v1"}
    assert {n: facts_of(n).cost for n in RUNTIMES} == {"oracle": "free", "nop": "free", "command": "reported",
                                                      "claude-code": "metered", "codex": "metered"}
    assert [n for n in RUNTIMES if facts_of(n).reference_solution] == ["oracle"]


def test_no_module_outside_a_runtime_asks_which_runtime_it_is():
    """`runtime == "claude-code"` and its kin live only in the runtime's own module."""
    names = "|".join(re.escape(n) for n in RUNTIMES)
    pattern = re.compile(rf"""(runtime\w*|solver|author|reviewer)\s*(==|!=|in|not in)\s*[("'{{\[]*({names})["']""")
    own = {f"sweep/runtimes/{m}.py" for m in ("oracle", "oracle_agent", "nop", "command", "claude_code", "codex")}
    found = []
    for path in sorted((REPO / "sweep").rglob("*.py")) + sorted((REPO / "runstate").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel in own:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{rel}:{i}: {line.strip()}")
    assert not found, "\n".join(found)


def test_a_runtime_that_drives_a_cli_must_name_its_key_family_and_endpoint():
    from sweep.runtimes.facts import AgentCli, RuntimeFacts
    cli = AgentCli("x", "1.0.0", ((1, 0, 0), (2, 0, 0)), "x", find=lambda b: None, install_root=Path)
    with pytest.raises(ValueError, match="key families"):
        RuntimeFacts(paid=True, host_only=False, protocol_classified=True, cli=cli)
    with pytest.raises(ValueError, match="cost must be"):
        RuntimeFacts(paid=True, host_only=False, protocol_classified=False, cost="guessed")


# ---- a third CLI-shaped runtime --------------------------------------------------------------------

@pytest.fixture
def fake_cli():
    """The fake CLI installed under /var/tmp (the sandbox has its own /tmp) and the runtime registered."""
    root = Path(tempfile.mkdtemp(prefix="sweep-fake-cli-", dir="/var/tmp"))
    exe = root / "bin" / "fake-cli"
    exe.parent.mkdir()
    shutil.copy(FAKE_CLI, exe)
    exe.chmod(0o755)
    RUNTIMES.register("fake-cli", "tests.runtime_extension:FakeCliRuntime")
    try:
        yield exe
    finally:
        RUNTIMES.unregister("fake-cli")
        shutil.rmtree(root, ignore_errors=True)


class _Judge(socketserver.StreamRequestHandler):
    def handle(self):
        self.rfile.readline()
        self.wfile.write(json.dumps(VERDICT).encode() + b"\n")


@pytest.fixture
def endpoint():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _plan(options: dict):
    from sweep.models.plan import PlanSettings
    return PlanSettings.model_validate({"name": "t", "target_verified": 1, "defaults": {
        "runtimes": {"reviewer": "fake-cli"}, "runtime_options": {"reviewer": options}}})


def test_preflight_checks_a_registered_third_cli_like_the_shipped_ones(fake_cli, endpoint, monkeypatch):
    from sweep.runtimes.preflight import check_agent_runtimes
    assert "fake-cli" in runtime_facts.agent_runtimes() and runtime_facts.agent_clis()["fake-cli"][0] == \
        "@example/fake-cli"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-0123456789")
    findings = check_agent_runtimes(_plan({"binary": str(fake_cli), "base_url": endpoint}), reach=True)
    said = [(f.level, f.message) for f in findings]
    assert all(level == "ok" for level, _ in said), said
    text = "\n".join(m for _, m in said)
    assert f"fake-cli 1.4.2 runs in the sandbox ({fake_cli})" in text
    assert "the fake-cli command line for role reviewer is accepted (a dead endpoint gave outage" in text, text
    assert "secret for anthropic: $ANTHROPIC_API_KEY set" in text
    assert "accepts connections" in text
    # a missing binary is an error naming the package the runtime's facts give
    missing = check_agent_runtimes(_plan({"binary": "/nonexistent/fake-cli"}), sandbox=False)
    assert [(f.level, f.message) for f in missing] == [
        ("error", "the fake-cli CLI ('/nonexistent/fake-cli') is not installed; "
                  "npm install -g @example/fake-cli@1.4.2")]


def test_a_registered_third_cli_runs_a_session_in_the_sandbox(fake_cli, endpoint, tmp_path):
    from tests.agent_sessions import run_agent
    result, req = run_agent(tmp_path, "reviewer", "fake-cli", {"binary": str(fake_cli), "base_url": endpoint})
    assert result.ok, (result.status, result.reason, result.evidence)
    assert result.structured_output == VERDICT and result.cost_usd == 0.02 and result.turns == 1
    assert result.isolation == "bwrap" and result.network == "api"
    record = json.loads((req.session_dir / "result.json").read_text())
    assert record["runtime"] == "fake-cli" and record["status"] == "ok"


def test_the_protocol_classified_fact_not_the_name_decides_how_a_timeout_is_read(fake_cli, tmp_path):
    """Timed out after printing "503 Service Unavailable" as a tool's output: a runtime whose facts
    say it is protocol-classified is not parked as an outage for that text; the same CLI under a
    runtime read from its text is."""
    from tests.agent_sessions import custom_role, run_agent
    import socket
    RUNTIMES.register("fake-cli-text", "tests.runtime_extension:TextClassifiedFakeCli")
    classes = {}
    try:
        with socket.socket() as silent:            # accepts and never answers: the session hits its walltime
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            role = custom_role("reviewer", walltime_s=4)
            url = f"http://127.0.0.1:{silent.getsockname()[1]}"
            for runtime in ("fake-cli", "fake-cli-text"):
                result, _ = run_agent(tmp_path / runtime, role, runtime, {"binary": str(fake_cli), "base_url": url})
                classes[runtime] = (result.status, result.failure_class)
    finally:
        RUNTIMES.unregister("fake-cli-text")
    assert classes == {"fake-cli": ("timeout", "failure"), "fake-cli-text": ("timeout", "outage")}, classes
