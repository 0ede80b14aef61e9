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
    """The key never enters the sandbox (the relay holds it: the tool sees a placeholder), but a
    copy of it that does (here: in a file of the workspace) is scrubbed from what the CLI keeps."""
    url = fake.script("solver", Script(steps=[
        tool_calls([("Bash", {"command": "echo \"env=$ANTHROPIC_API_KEY\"; echo \"key=$(cat repo/leak.txt)\"; "
                                         "base64 repo/leak.txt", "description": "print the key"})]),
        text("done")]))
    from tests.agent_sessions import workspace_for
    ws = workspace_for(tmp_path, "solver")
    (ws / "repo" / "leak.txt").write_text(FAKE_KEY)
    result, req = run_agent(tmp_path, "solver", "claude-code",
                            {"base_url": url, "max_retries": 0, "stall_s": 20, "model": "claude-sonnet-4-5"},
                            workspace=ws)
    assert result.status == "ok", result.evidence
    # the tool really printed it: the model was sent the tool's output
    sent = str(fake.main_requests("solver")[-1]["messages"])
    assert "key=" + FAKE_KEY in sent and "env=sweep-relay-holds-the-key" in sent
    config = req.session_dir / "claude-config"
    kept = list(config.glob("projects/*/*.jsonl"))
    assert kept, "claude's session transcript was not kept"
    assert any(b"[REDACTED" in p.read_bytes() or b"REDACTED" in p.read_bytes() for p in kept)
    for path in req.session_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert FAKE_KEY.encode() not in path.read_bytes(), path
