"""What an agent CLI keeps of its session outside the workspace (claude's config dir: its session
transcript with every tool's output, kept in the run directory for --resume) is scrubbed of the
session's secrets like every other stored text. Real claude CLI, fake Anthropic API."""
from __future__ import annotations

import pytest

from tests.agent_sessions import FAKE_KEY, needs_claude, run_agent
from tests.fakes.anthropic_api import FakeAnthropic, Script, text, tool_calls

pytestmark = needs_claude


@pytest.fixture
def fake():
    server = FakeAnthropic()
    yield server
    server.close()


def test_a_key_printed_by_a_tool_is_not_kept_in_the_clis_state(tmp_path, fake):
    url = fake.script("solver", Script(steps=[
        tool_calls([("Bash", {"command": "echo \"key=$ANTHROPIC_API_KEY\"; echo \"$ANTHROPIC_API_KEY\" | base64",
                              "description": "print the key"})]),
        text("done")]))
    result, req = run_agent(tmp_path, "solver", "claude-code",
                            {"base_url": url, "max_retries": 0, "stall_s": 20, "model": "claude-sonnet-4-5"})
    assert result.status == "ok", result.evidence
    # the tool really printed it: the model was sent the tool's output
    sent = str(fake.main_requests("solver")[-1]["messages"])
    assert "key=" + FAKE_KEY in sent
    config = req.session_dir / "claude-config"
    kept = list(config.glob("projects/*/*.jsonl"))
    assert kept, "claude's session transcript was not kept"
    assert any(b"[REDACTED" in p.read_bytes() or b"REDACTED" in p.read_bytes() for p in kept)
    for path in req.session_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert FAKE_KEY.encode() not in path.read_bytes(), path
