"""Resuming a session, and stopping one by an injected fault, with the REAL claude and codex CLIs
against the fake model servers: a SessionRequest naming an earlier session (`resume`, read from its
result with `resume_point`) goes on in that session's conversation (the fake sees the earlier
messages and the same session id), and `stop_after_tool_calls = N` stops a session when its stream
reports the N-th completed tool call, recorded as a fault with its time. A runtime that cannot
resume (command) refuses both."""
from __future__ import annotations

import json
import shutil
import threading

import pytest

from runstate.errors import ConfigError
from sweep.runtimes.base import ResumeFrom, resume_point
from sweep.runtimes.codex import native_binary
from sweep.runtimes.facts import facts_of
from tests.agent_sessions import needs_claude, run_agent
from tests.fakes.anthropic_api import FakeAnthropic, Script, text, tool_calls

needs_codex = pytest.mark.skipif(shutil.which("codex") is None or native_binary("codex") is None,
                                 reason="the codex CLI is not installed (.ci/run installs it)")


def claude_opts(url: str) -> dict:
    return {"base_url": url, "max_retries": 0, "stall_s": 30, "model": "claude-sonnet-4-5"}


def codex_opts(url: str) -> dict:
    from tests.test_agents_codex import opts
    return opts(url, stall_s=30)


@pytest.fixture
def claude_fake():
    server = FakeAnthropic()
    yield server
    server.close()


@pytest.fixture
def openai_fake():
    from tests.fakes.openai_api import FakeOpenAI
    server = FakeOpenAI()
    yield server
    server.close()


def _said(messages: list) -> str:
    return json.dumps(messages)


@needs_claude
def test_a_claude_session_resumes_the_earlier_conversation(tmp_path, claude_fake):
    """The second session names the first: claude runs `--resume <its id>` with the first's config
    dir, so the model sees the first conversation (its tool output) and the same session id."""
    def step(request: dict, n: int) -> dict:
        if "go on from here" not in _said(request["messages"]):
            return tool_calls([("Bash", {"command": "echo first-session-marker"})]) if n == 0 else text("stopped")
        return text("resumed and done")
    url = claude_fake.script("solver", Script(dynamic=step))
    first, req1 = run_agent(tmp_path, "solver", "claude-code", claude_opts(url))
    assert first.status == "ok", first.evidence
    point = resume_point(first, req1.session_dir)
    assert point == ResumeFrom(first.session_id, req1.session_dir / "claude-config", req1.session_dir)
    before = len(claude_fake.main_requests("solver"))
    # what the first session's agent could have left in its writable config dir: not read on resume
    (point.state_dir / "settings.json").write_text('{"permissions": {"allow": ["Bash(*)"]}}')
    second, req2 = run_agent(tmp_path, "solver", "claude-code", claude_opts(url), prompt="go on from here",
                             workspace=req1.workspace, session_name="0002", resume=point)
    assert not (point.state_dir / "settings.json").exists()
    assert second.status == "ok", second.evidence
    resumed = claude_fake.main_requests("solver")[before:]
    assert resumed and "first-session-marker" in _said(resumed[0]["messages"])      # the earlier conversation
    assert {r["session_id"] for r in claude_fake.main_requests("solver")} == {first.session_id}
    assert second.session_id == first.session_id
    argv = json.loads((req2.session_dir / "argv.json").read_text())["argv"]
    assert argv[argv.index("--resume") + 1] == first.session_id and "--session-id" not in argv
    record = json.loads((req2.session_dir / "result.json").read_text())
    assert record["resumed_from"] == {"session_id": first.session_id, "session_dir": str(req1.session_dir),
                                      "state_dir": str(req1.session_dir / "claude-config")}
    assert not (req2.session_dir / "claude-config").exists()     # the first session's config dir went on
    assert resume_point(second, req2.session_dir).state_dir == req1.session_dir / "claude-config"


@needs_codex
def test_a_codex_session_resumes_the_earlier_thread(tmp_path, openai_fake):
    from tests.fakes.openai_api import Script as OpenAIScript
    from tests.fakes.openai_api import call, say
    from tests.test_agents_codex import codex_role

    def step(request: dict, n: int) -> dict:
        if "go on from here" not in json.dumps(request["input"]):
            return call("exec_command", {"cmd": "echo first-session-marker"}) if n == 0 else say("stopped")
        return say("resumed and done")
    url = openai_fake.script("solver", OpenAIScript(dynamic=step))
    first, req1 = run_agent(tmp_path, codex_role(), "codex", codex_opts(url))
    assert first.status == "ok", first.evidence
    point = resume_point(first, req1.session_dir)
    assert point is not None and point.session_id == first.session_id
    before = len(openai_fake.requests)
    second, req2 = run_agent(tmp_path, codex_role(), "codex", codex_opts(url), prompt="go on from here",
                             workspace=req1.workspace, session_name="0002", resume=point)
    assert second.status == "ok", second.evidence
    resumed = openai_fake.requests[before:]
    assert resumed and "first-session-marker" in json.dumps(resumed[0]["input"])
    assert {r["session_id"] for r in openai_fake.requests} == {first.session_id}
    argv = json.loads((req2.session_dir / "argv.json").read_text())["argv"]
    assert argv[argv.index("exec") + 1] == "resume" and argv[-2:] == [first.session_id, "-"]
    assert json.loads((req2.session_dir / "result.json").read_text())["resumed_from"]["session_id"] == first.session_id


def _held(release: threading.Event, answer):
    """A script step that waits (until the test releases it) before answering: the session's next
    request after its tool call is in flight when the fault stops it."""
    release.wait(60)
    return answer


@needs_claude
def test_a_fault_stops_a_claude_session_at_its_nth_tool_call_and_it_resumes(tmp_path, claude_fake):
    release = threading.Event()

    def step(request: dict, n: int) -> dict:
        said = _said(request["messages"])
        if "resume after the fault" in said:
            return text("resumed")
        if n < 2:
            return tool_calls([("Bash", {"command": f"echo call-{n}-marker"})])
        return _held(release, text("never reached"))
    url = claude_fake.script("solver", Script(dynamic=step))
    try:
        first, req1 = run_agent(tmp_path, "solver", "claude-code", claude_opts(url), stop_after_tool_calls=2)
    finally:
        release.set()
    assert (first.status, first.reason) == ("failed", "fault"), first.evidence
    assert first.fault["after_tool_calls"] == first.fault["tool_calls"] == 2
    record = json.loads((req1.session_dir / "result.json").read_text())
    assert record["fault"]["at"] == first.fault["at"] and record["started_at"] < first.fault["at"] < record["ended_at"]
    before = len(claude_fake.main_requests("solver"))
    second, _ = run_agent(tmp_path, "solver", "claude-code", claude_opts(url), prompt="resume after the fault",
                          workspace=req1.workspace, session_name="0002", resume=resume_point(first, req1.session_dir))
    assert second.status == "ok" and second.fault is None, second.evidence
    said = _said(claude_fake.main_requests("solver")[before]["messages"])
    assert "call-0-marker" in said and "call-1-marker" in said


@needs_codex
def test_a_fault_stops_a_codex_session_at_its_nth_tool_call_and_it_resumes(tmp_path, openai_fake):
    from tests.fakes.openai_api import Script as OpenAIScript
    from tests.fakes.openai_api import call, say
    from tests.test_agents_codex import codex_role
    release = threading.Event()

    def step(request: dict, n: int) -> dict:
        if "resume after the fault" in json.dumps(request["input"]):
            return say("resumed")
        if n < 2:
            return call("exec_command", {"cmd": f"echo call-{n}-marker"})
        return _held(release, say("never reached"))
    url = openai_fake.script("solver", OpenAIScript(dynamic=step))
    try:
        first, req1 = run_agent(tmp_path, codex_role(), "codex", codex_opts(url), stop_after_tool_calls=2)
    finally:
        release.set()
    assert (first.status, first.reason) == ("failed", "fault"), first.evidence
    assert first.fault["tool_calls"] == 2
    before = len(openai_fake.requests)
    second, _ = run_agent(tmp_path, codex_role(), "codex", codex_opts(url), prompt="resume after the fault",
                          workspace=req1.workspace, session_name="0002", resume=resume_point(first, req1.session_dir))
    assert second.status == "ok", second.evidence
    said = json.dumps(openai_fake.requests[before]["input"])
    assert "call-0-marker" in said and "call-1-marker" in said


def test_a_runtime_that_cannot_resume_or_count_tool_calls_refuses_both(tmp_path):
    """The command runtime keeps no conversation sweep could name: its facts say so, and a request to
    resume or to stop after N tool calls is refused before anything runs."""
    assert not facts_of("command").resumable and not facts_of("command").counts_tool_calls
    assert facts_of("claude-code").resumable and facts_of("codex").counts_tool_calls
    state = tmp_path / "state"
    state.mkdir()
    options = {"argv": ["true", "{max_turns}", "{cost_cap_usd}"], "network": "none"}
    with pytest.raises(ConfigError, match="cannot resume") as err:
        run_agent(tmp_path, "solver", "command", options, resume=ResumeFrom("abc", state, tmp_path / "s1"))
    assert err.value.field == "resume"
    with pytest.raises(ConfigError, match="stop_after_tool_calls"):
        run_agent(tmp_path, "solver", "command", options, stop_after_tool_calls=1)
    assert not (tmp_path / "run").exists()
