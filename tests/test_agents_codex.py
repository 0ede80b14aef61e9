"""The codex runtime with the REAL codex CLI (native binary) against a fake OpenAI Responses API:
the ending, the class read from codex's own error events, turns and cost enforced by sweep."""
from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from sweep.runtimes.codex import native_binary, package_root, strict_schema
from tests.agent_sessions import record_stream, resume_in_view, run_agent, shipped
from tests.fakes.openai_api import FakeOpenAI, Script, call, say

pytestmark = pytest.mark.skipif(shutil.which("codex") is None or native_binary("codex") is None,
                                reason="the codex CLI is not installed (.ci/run installs it)")
CLI = "codex-0.171.0"
PRICES = {"input_per_mtok": 1.25, "cached_input_per_mtok": 0.125, "output_per_mtok": 10.0}


@pytest.fixture
def fake():
    server = FakeOpenAI()
    yield server
    server.close()


def codex_role(**budget):
    spec, _ = shipped("solver")
    data = spec.model_dump()
    data["key_family"] = "openai"
    data["budget"] = {**data["budget"], **budget}
    from roles import RoleSpec
    return RoleSpec.model_validate(data)


def opts(url: str, **extra) -> dict:
    return {"base_url": url, "max_retries": 0, "stall_s": 20, "model": "gpt-5", "prices": PRICES, **extra}


def test_solver_edits_the_repo_with_cost_priced_from_tokens(tmp_path, fake):
    url = fake.script("solver", Script(steps=[
        call("exec_command", {"cmd": "printf 'def add(a, b):\\n    return a + b\\n' > repo/code.py"}), say("fixed")]))
    result, req = run_agent(tmp_path, codex_role(), "codex", opts(url), prompt="y" * 200_000)
    record_stream(tmp_path, req, CLI, "solver_ok")
    assert result.status == "ok", result.evidence
    assert (req.workspace / "repo" / "code.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert result.session_id and result.turns == 2
    # 2 responses x (2000 in, 300 out) at 1.25 / 10 USD per million tokens
    assert result.cost_usd == pytest.approx((4000 * 1.25 + 600 * 10.0) / 1e6)
    sent = json.dumps(fake.requests[0]["input"])
    assert "y" * 200_000 in sent and "Solve the task described" in sent     # prompt + role instructions
    argv = json.loads((req.session_dir / "argv.json").read_text())["argv"]
    assert not argv[0].endswith(".js")
    if result.isolation == "bwrap":
        assert argv[argv.index("-s") + 1] == "danger-full-access"
    else:
        assert argv[argv.index("-s") + 1] == "workspace-write"


@pytest.mark.parametrize("status,code,message,cls", [
    (429, "rate_limit_exceeded", "slow down", "throttle"),
    (503, "server_error", "unavailable", "outage"),
    (500, "server_error", "internal", "outage"),
    (401, "invalid_api_key", "bad key", "config"),
    (429, "insufficient_quota", "You exceeded your current quota", "config"),
])
def test_api_errors_are_classified_from_codex_events(tmp_path, fake, status, code, message, cls):
    url = fake.script("solver", Script(error=(status, code, message)))
    result, req = run_agent(tmp_path, codex_role(), "codex", opts(url))
    record_stream(tmp_path, req, CLI, f"api_{status}_{code}")
    assert result.status == "failed" and result.failure_class == cls, result.evidence


def test_connection_refused_is_stopped_as_an_outage(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result, req = run_agent(tmp_path, codex_role(), "codex", opts(f"http://127.0.0.1:{port}/v1", stall_s=15))
    record_stream(tmp_path, req, CLI, "connection_refused")
    assert result.status == "failed" and result.failure_class == "outage", result.evidence
    assert result.duration_s < 90


def test_turns_are_capped_by_sweep(tmp_path, fake):
    loop = [call("exec_command", {"cmd": "echo 'HTTP 503 Service Unavailable'"})] * 20
    url = fake.script("solver", Script(steps=loop))
    result, req = run_agent(tmp_path, codex_role(max_turns=3), "codex", opts(url))
    assert result.status == "failed" and result.reason == "max_turns" and result.failure_class == "failure"


def test_strict_schema_closes_objects_and_requires_everything():
    spec, _ = shipped("reviewer")
    strict = strict_schema(spec.output_schema)
    assert strict["additionalProperties"] is False
    assert sorted(strict["required"]) == sorted(spec.output_schema["properties"])
    assert "maxItems" not in strict["properties"]["findings"]


def test_codex_cannot_play_a_read_only_judge():
    from runstate.errors import ConfigError
    from sweep.runtimes import check_runtime_supports
    spec, _ = shipped("reviewer")
    with pytest.raises(ConfigError, match="cannot restrict"):
        check_runtime_supports(spec, "codex", {})
    check_runtime_supports(shipped("solver")[0], "codex", {})


def test_a_stalled_endpoint_is_stopped_as_an_outage(tmp_path, fake):
    url = fake.script("solver", Script(stall=True))
    result, req = run_agent(tmp_path, codex_role(), "codex", opts(url, stall_s=4))
    assert result.status == "failed" and result.failure_class == "outage", result.evidence
    assert result.reason == "stalled"
    assert result.duration_s < 60


def test_an_interrupted_session_is_resumed_from_its_kept_codex_home(tmp_path, fake):
    """The endpoint stalls after the first command: sweep stops the session (an outage). Run again
    as provenance says (`codex exec resume` with the kept CODEX_HOME), the thread comes back whole:
    the model sees the first session's command output, and the resumed turn finishes."""
    import threading
    released = threading.Event()

    def step(request: dict, n: int) -> dict:
        if n == 0:
            return call("exec_command", {"cmd": "echo first-session-marker"})
        if not released.is_set():
            released.wait(60)          # the stall that interrupts the first session
        return say("resumed and done")
    url = fake.script("solver", Script(dynamic=step))
    result, req = run_agent(tmp_path, codex_role(), "codex", opts(url, stall_s=4))
    assert result.status == "failed" and result.reason == "stalled", result.evidence
    resume = result.report["resume"]
    assert resume["thread_id"] == result.session_id
    assert (tmp_path / "run" / "sessions").resolve() in Path(resume["codex_home"]).resolve().parents
    assert list(Path(resume["codex_home"]).rglob("rollout-*.jsonl")), "codex's thread was not kept"
    released.set()
    before = len(fake.requests)
    # the thread names the session's fixed view: it resumes there, in sweep's sandbox
    assert (resume["cwd"], resume["sandbox_codex_home"]) == ("/app", "/session/codex-home"), resume
    env = {"OPENAI_API_KEY": "sk-openai-fake-resume", "CODEX_HOME": resume["codex_home"]}
    done, stdout = resume_in_view(req, resume["argv"], env, url=url, stdin=b"go on",
                                  state=Path(resume["codex_home"]), reads=(package_root(resume["argv"][0]),))
    assert done.rc == 0, done.stderr_tail[-2000:]
    resumed = json.dumps(fake.requests[before]["input"])
    assert "first-session-marker" in resumed and "go on" in resumed     # the earlier thread came back
    events = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    assert {"type": "thread.started", "thread_id": result.session_id} in events
    assert any(e.get("type") == "turn.completed" for e in events)
