"""Agent-runtime settings that would otherwise be silently ignored or misplaced: skills are
refused, a silent endpoint parks before the walltime by default, claude's resume hint names its
working directory, codex's records its CLI version and model (see also test_agents_wire.py)."""
from __future__ import annotations

import pytest

from roles import RoleSpec
from runstate.errors import ConfigError
from sweep.runtimes import SessionRequest, check_runtime_supports
from sweep.runtimes.base import SessionFiles
from tests.agent_sessions import needs_claude, shipped


@pytest.mark.parametrize("runtime", ["claude-code", "codex", "command", "oracle"])
def test_a_role_listing_skills_is_refused_naming_the_field(runtime):
    spec = RoleSpec.model_validate({**shipped("solver")[0].model_dump(), "skills": ["pdf"]})
    with pytest.raises(ConfigError) as err:
        check_runtime_supports(spec, runtime, {"argv": ["x"]} if runtime == "command" else {})
    assert err.value.field == "skills" and "ignored" in str(err.value)


@needs_claude
def test_the_default_stall_limit_is_below_the_reviewers_walltime(tmp_path):
    from sweep.runtimes.claude_code import ClaudeCodeRuntime
    spec, sha = shipped("reviewer")                     # walltime 900 s, as claude's default stall
    files = SessionFiles(tmp_path / "s")
    (tmp_path / "s").mkdir()
    (tmp_path / "ws").mkdir()
    req = SessionRequest(role=spec, manifest_sha256=sha, runtime="claude-code", runtime_options={},
                         workspace=tmp_path / "ws", session_dir=tmp_path / "s", prompt="p", inputs={})
    default = ClaudeCodeRuntime().build_invocation(req, files, "/dev/fd/3").idle_timeout_s
    assert default is not None and default < spec.budget.walltime_s
    req.runtime_options = {"stall_s": 120}
    assert ClaudeCodeRuntime().build_invocation(req, files, "/dev/fd/3").idle_timeout_s == 120


@pytest.mark.parametrize("runtime,key", [(r, k) for r in ("claude-code", "codex")
                                          for k in ("mcp", "mcp_config", "hooks", "settings", "permissions")])
# (mcp_servers, the stdio servers sweep starts: tests/test_agents_mcp.py)
def test_mcp_servers_hooks_and_settings_in_the_plan_are_refused_with_the_reason(runtime, key):
    from sweep.runtimes import get_runtime
    with pytest.raises(ConfigError) as err:
        get_runtime(runtime).check_options({key: {"x": {"command": "sh"}}})
    assert err.value.field == f"runtime_options.{key}"
    assert "not supported" in str(err.value) and "MCP servers" in str(err.value), str(err.value)
