"""The claude-code runtime with the REAL claude CLI against a fake Anthropic Messages API.

Each test runs the pinned CLI (installed by .ci/run) through run_session, inside the sandbox where
bubblewrap works, against tests/fakes/anthropic_api.py scripted for that case, and asserts what
sweep recorded: the ending, the failure class read from the CLI's protocol, turns, cost and session
id, and what the audit saw. Streams are recorded as fixtures for test_agents_parsers.py.
"""
from __future__ import annotations

import json

import pytest

from tests.agent_sessions import custom_role, needs_claude, record_stream, resume_in_view, run_agent, shipped
from tests.fakes.anthropic_api import FakeAnthropic, Script, error, structured, text, tool_calls

pytestmark = needs_claude
CLI = "claude-2.1.197"
VERDICT = {"verdict": "accept", "findings": [], "rationale": "the tests check the PR's behaviour"}


@pytest.fixture
def fake():
    server = FakeAnthropic()
    yield server
    server.close()


def opts(url: str, **extra) -> dict:
    return {"base_url": url, "max_retries": 0, "stall_s": 20, "model": "claude-sonnet-4-5", **extra}


def test_solver_edits_the_repo_and_cost_turns_session_are_recorded(tmp_path, fake):
    url = fake.script("solver", Script(steps=[
        tool_calls([("Bash", {"command": "printf 'def add(a, b):\\n    return a + b\\n' > repo/code.py",
                              "description": "fix add"})]),
        text("fixed add")]))
    result, req = run_agent(tmp_path, "solver", "claude-code", opts(url), prompt="x" * 200_000)
    record_stream(tmp_path, req, CLI, "solver_ok")
    assert result.status == "ok", result.evidence
    assert (req.workspace / "repo" / "code.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert result.changed_paths == ["repo/code.py"]
    assert result.turns == 2 and result.cost_usd is not None and result.cost_usd > 0
    assert result.session_id and result.report["cli_version"] == "2.1.197"
    # the 200,000-byte prompt went on stdin: it reached the model whole
    first = fake.main_requests("solver")[0]
    assert "x" * 200_000 in json.dumps(first["messages"])
    # the session's transcript is kept for --resume, outside the workspace
    config = req.session_dir / "claude-config"
    assert list(config.glob("projects/*/*.jsonl")), "claude's session transcript was not kept"
    assert result.report["resume"]["session_id"] == result.session_id
    argv = json.loads((req.session_dir / "argv.json").read_text())["argv"]
    assert "--tools" in argv and argv[argv.index("--tools") + 1] == "Read,Grep,Glob,Write,Edit,Bash"
    assert FAKE_KEY_NOT_IN(req)


def FAKE_KEY_NOT_IN(req) -> bool:
    from tests.agent_sessions import FAKE_KEY
    for path in req.session_dir.rglob("*"):
        if path.is_file() and FAKE_KEY.encode() in path.read_bytes():
            return False
    return True


def test_reviewer_returns_a_validated_verdict_and_cannot_write(tmp_path, fake):
    url = fake.script("reviewer", Script(steps=[
        tool_calls([("Write", {"file_path": str(tmp_path / "ws" / "task" / "instruction.md"), "content": "pwned"}),
                    ("Bash", {"command": "echo pwned > task/instruction.md"})]),
        structured(VERDICT), text("verdict given")]))
    result, req = run_agent(tmp_path, "reviewer", "claude-code", opts(url))
    record_stream(tmp_path, req, CLI, "reviewer_ok")
    assert result.status == "ok", result.evidence
    assert result.structured_output == VERDICT
    assert (req.workspace / "task" / "instruction.md").read_text() == "make add add\n"
    # the CLI offered the reviewer read tools only: the write requests were refused by the CLI itself
    offered = fake.main_requests("reviewer")[0]["tools"]
    assert set(offered) == {"Read", "Grep", "Glob", "StructuredOutput"}
    second = json.dumps(fake.main_requests("reviewer")[1]["messages"])
    assert "No such tool available" in second


def test_reviewer_without_structured_output_fails_schema(tmp_path, fake):
    url = fake.script("reviewer", Script(steps=[text('{"verdict": "accept"}')]))
    result, req = run_agent(tmp_path, "reviewer", "claude-code", opts(url))
    assert result.status == "failed" and result.reason == "no_structured_output", result.evidence
    assert result.failure_class == "failure"


@pytest.mark.parametrize("status,kind,message,cls", [
    (429, "rate_limit_error", "slow down", "throttle"),
    (529, "overloaded_error", "Overloaded", "throttle"),
    (500, "api_error", "internal", "outage"),
    (401, "authentication_error", "invalid x-api-key", "config"),
    (400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API.", "config"),
])
def test_api_errors_are_classified_from_the_protocol(tmp_path, fake, status, kind, message, cls):
    url = fake.script("solver", Script(error=error(status, kind, message)))
    result, req = run_agent(tmp_path, "solver", "claude-code", opts(url))
    record_stream(tmp_path, req, CLI, f"api_{status}" + ("_billing" if "credit" in message else ""))
    assert result.status == "failed" and result.failure_class == cls, result.evidence
    assert result.reason == "api_error"
    assert result.report["is_error"] is True


def test_connection_refused_is_an_outage(tmp_path):
    import socket
    with socket.socket() as s:        # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result, req = run_agent(tmp_path, "solver", "claude-code", opts(f"http://127.0.0.1:{port}/x"))
    record_stream(tmp_path, req, CLI, "connection_refused")
    assert result.status == "failed" and result.failure_class == "outage", result.evidence


def test_a_stalled_endpoint_is_stopped_as_an_outage(tmp_path, fake):
    url = fake.script("solver", Script(stall=True))
    result, req = run_agent(tmp_path, "solver", "claude-code", opts(url, stall_s=3, request_timeout_s=600))
    assert result.status == "failed" and result.failure_class == "outage" and result.reason == "stalled"
    assert result.duration_s < 60


def test_max_turns_is_a_failure_not_an_outage(tmp_path, fake):
    # the tool's output says "503 Service Unavailable": text must never classify a session
    loop = [tool_calls([("Bash", {"command": "echo 'API Error: 503 Service Unavailable'"})])] * 10
    url = fake.script("solver", Script(steps=loop))
    role = custom_role("solver", max_turns=2)
    result, req = run_agent(tmp_path, role, "claude-code", opts(url))
    record_stream(tmp_path, req, CLI, "max_turns")
    assert result.status == "failed" and result.failure_class == "failure" and result.reason == "max_turns"
    assert result.cost_usd is not None and result.turns is not None


def test_max_budget_is_a_failure_with_its_cost(tmp_path, fake):
    loop = [tool_calls([("Bash", {"command": "true"})])] * 10
    url = fake.script("solver", Script(steps=loop, usage={"input_tokens": 200_000, "output_tokens": 1000}))
    role = custom_role("solver", cost_cap_usd=0.5)
    result, req = run_agent(tmp_path, role, "claude-code", opts(url))
    record_stream(tmp_path, req, CLI, "max_budget")
    assert result.status == "failed" and result.reason == "max_budget", result.evidence
    assert result.cost_usd is not None and result.cost_usd >= 0.5


def test_a_missing_binary_is_a_config_error_up_front(tmp_path, fake):
    from runstate.errors import ConfigError
    url = fake.script("solver", Script(steps=[text("hi")]))
    with pytest.raises(ConfigError, match="not installed"):
        run_agent(tmp_path, "solver", "claude-code", opts(url, binary="/nonexistent/claude"))
    assert not fake.requests


def test_tool_patterns_go_to_allowed_tools_only():
    from sweep.runtimes.claude_code import tools_flags
    tools, allowed = tools_flags(["Read", "Bash(pytest:*)", "Bash(git diff:*)"])
    assert tools == "Read,Bash"
    assert allowed == "Read,Bash(pytest:*),Bash(git diff:*)"


def test_reviewer_manifest_is_honoured_by_claude():
    from sweep.runtimes import check_runtime_supports
    for role in ("author", "reviewer", "solver"):
        spec, _ = shipped(role)
        check_runtime_supports(spec, "claude-code", {})


def test_a_walltime_kill_after_a_tool_printed_503_is_a_failure(tmp_path, fake):
    url = fake.script("solver", Script(steps=[
        tool_calls([("Bash", {"command": "echo 'API Error: 503 Service Unavailable'; echo 'Connection refused'"})]),
        tool_calls([("Bash", {"command": "sleep 60", "description": "wait", "timeout": 120000})])]))
    role = custom_role("solver", walltime_s=8)
    result, req = run_agent(tmp_path, role, "claude-code", opts(url))
    assert "503 Service Unavailable" in (req.session_dir / "stdout.txt").read_text()    # in the stream
    assert result.status == "timeout" and result.failure_class == "failure", result.evidence


def test_is_sandbox_is_set_only_inside_the_sandbox(tmp_path, fake):
    from sweep.providers.local.bwrap import probe_bwrap
    url = fake.script("reviewer", Script(steps=[structured(VERDICT), text("ok")]))
    result, req = run_agent(tmp_path / "none", "reviewer", "claude-code", opts(url), isolation="none")
    assert result.status == "ok" and result.isolation == "none"
    assert "IS_SANDBOX" not in json.loads((req.session_dir / "argv.json").read_text())["env_set"]
    if probe_bwrap()[0] is None:
        pytest.skip("bubblewrap is not usable here")
    result, req = run_agent(tmp_path / "bwrap", "reviewer", "claude-code", opts(url), isolation="bwrap")
    assert result.status == "ok" and result.isolation == "bwrap"
    assert "IS_SANDBOX" in json.loads((req.session_dir / "argv.json").read_text())["env_set"]


def test_a_kept_session_can_be_resumed(tmp_path, fake):
    import shutil
    from pathlib import Path

    from sweep.runtimes.claude_code import install_root
    url = fake.script("solver", Script(steps=[tool_calls([("Bash", {"command": "echo first-session-marker"})]),
                                              text("stopped here")]))
    result, req = run_agent(tmp_path, "solver", "claude-code", opts(url))
    assert result.status == "ok"
    resume = result.report["resume"]
    # claude keys its transcripts by the working directory: the session's, in its fixed view
    assert resume["cwd"] == "/app" and resume["workspace"] == str(req.workspace.resolve())
    before = len(fake.main_requests("solver"))
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake-resume", "ANTHROPIC_BASE_URL": url,
           "CLAUDE_CONFIG_DIR": resume["config_dir"], "CLAUDE_CODE_MAX_RETRIES": "0"}
    exe = shutil.which("claude")
    assert exe is not None
    done, _ = resume_in_view(req, [exe, "-p", "--resume", resume["session_id"], "--output-format", "json",
                                   "--tools", "Read"], env, url=url, stdin=b"go on",
                             state=Path(resume["config_dir"]), reads=(install_root(exe),))
    assert done.rc == 0, done.stderr_tail
    resumed = fake.main_requests("solver")[before]
    assert "first-session-marker" in json.dumps(resumed["messages"])     # the earlier conversation came back
