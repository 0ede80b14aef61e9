"""MCP servers per role from the plan: the REAL claude CLI starts the plan's stdio server inside the
session's sandbox (tests/fakes/mcp_server.py, JSON-RPC over stdio), the fake model calls its tools,
only the ones the plan declares run; the PR's `.mcp.json` is still ignored; and `sweep init`
refuses what sweep cannot start or bound (a bad command, a secret in env, an
MCP tool nobody declares; remote servers: test_agents_mcp_remote.py), naming the field."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from roles import RoleSpec
from runstate.errors import ConfigError
from sweep.harbor.samples import make_pr_repo
from sweep.providers.local.bwrap import SANDBOX_HOME
from sweep.runtimes import check_runtime_supports, get_runtime
from sweep.runtimes.codex import native_binary
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, needs_claude, run_agent, shipped, workspace_for
from tests.campaigns import sweep, write_plan
from tests.fakes.mcp_server import CANARY
from tests.fakes.runs import candidate, local_plan

SERVER = Path(__file__).resolve().parent / "fakes" / "mcp_server.py"
# sweep's own interpreter: the sandbox shows it (a pyenv shim on PATH would not run there)
PYTHON = sys.executable


def notes_server(marker_dir: Path, **extra) -> dict:
    return {"notes": {"command": [PYTHON, str(SERVER), str(marker_dir)], "tools": ["write_marker"], **extra}}


def with_tools(role: str, tools: list[str]) -> RoleSpec:
    spec, _ = shipped(role)
    return RoleSpec.model_validate({**spec.model_dump(), "tools": tools})


@needs_claude
def test_a_plans_stdio_mcp_server_runs_in_the_sandbox_and_only_its_declared_tools_run(tmp_path):
    from tests.fakes.anthropic_api import FakeAnthropic, Script, text, tool_calls
    fake = FakeAnthropic()
    try:
        url = fake.script("solver", Script(steps=[
            tool_calls([("mcp__notes__write_marker", {"note": "from the model"})]),
            tool_calls([("mcp__notes__forbidden", {})]), text("done")]))
        ws = workspace_for(tmp_path, "solver")
        repo = ws / "repo"
        # the PR's own server would leave its marker if the CLI read the workspace's .mcp.json
        pr = {"mcpServers": {"pr-server": {"command": "sh", "args": ["-c", f"touch {repo / 'pr-mcp-started'}; cat"]}}}
        for root in (ws, repo):
            (root / ".mcp.json").write_text(json.dumps(pr))
        host_only = tmp_path / "host-only"
        host_only.write_text("the sandbox never shows this\n")
        servers = notes_server(repo, env={"MCP_GREETING": "hello", "MCP_HOST_ONLY": str(host_only)})
        result, req = run_agent(tmp_path, "solver", "claude-code",
                                {"base_url": url, "max_retries": 0, "stall_s": 30, "model": "claude-sonnet-4-5",
                                 "mcp_servers": servers}, workspace=ws)
        assert result.status == "ok", result.evidence
        seen = json.loads((repo / "mcp-marker.json").read_text())       # the tool ran, as the server saw it
        assert seen["greeting"] == "hello" and seen["note"] == "from the model"
        assert seen["home"] == SANDBOX_HOME and not seen["host_only_visible"], seen
        assert FAKE_KEY not in json.dumps(seen["api_keys"]), "the server saw the real key"
        assert not (repo / "mcp-forbidden").exists(), "a tool the plan does not declare ran"
        denied = [d["tool_name"] for d in result.report["permission_denials"]]
        assert denied == ["mcp__notes__forbidden"], result.report
        assert not (repo / "pr-mcp-started").exists(), "the PR's .mcp.json was read"
        init = next(json.loads(line) for line in (req.session_dir / "stdout.txt").read_text().splitlines()
                    if '"subtype":"init"' in line.replace(" ", ""))
        assert init["mcp_servers"] == [{"name": "notes", "status": "connected"}], init
        assert CANARY in json.dumps([r["messages"] for r in fake.main_requests("solver")])
        config = req.session_dir / "mcp.json"
        assert config.stat().st_mode & 0o777 == 0o600
        # the server's arguments as the sandbox shows them: the workspace at /app
        assert json.loads(config.read_text())["mcpServers"]["notes"]["args"] == [str(SERVER), "/app/repo"]
        argv = json.loads((req.session_dir / "argv.json").read_text())
        assert "--strict-mcp-config" in json.dumps(argv) and "mcp__notes__write_marker" in json.dumps(argv)
    finally:
        fake.close()


@pytest.mark.parametrize("server,field,says", [
    ({"command": ["no-such-program-4f1e"], "tools": ["t"]}, "notes.command", "not found"),
    ({"command": "python3 server.py", "tools": ["t"]}, "notes.command", "non-empty list"),
    ({"command": [], "tools": ["t"]}, "notes.command", "non-empty list"),
    ({"command": ["python3"]}, "notes.tools", "tools must list"),
    ({"command": ["python3"], "tools": ["t"], "env": {"NOTES_API_TOKEN": "abc"}}, "notes.env", "secret"),
    ({"command": ["python3"], "tools": ["t"], "env": {"MODE": "sk-ant-0123"}}, "notes.env", "secret"),
    ({"command": ["python3"], "tools": ["t"], "env": {"LD_PRELOAD": "/x.so"}}, "notes.env", "may not set"),
    ({"command": ["python3"], "tools": ["t"], "args": ["x"]}, "notes.args", "put the arguments in command"),
    ({"command": ["python3"], "tools": ["t"], "type": "ws"}, "notes.type", "must be \"stdio\""),
])
def test_a_server_sweep_cannot_start_or_bound_is_refused_naming_the_field(server, field, says):
    with pytest.raises(ConfigError) as err:
        get_runtime("claude-code").check_options({"mcp_servers": {"notes": server}})
    assert err.value.field == f"runtime_options.mcp_servers.{field}" and says in str(err.value), str(err.value)


def test_a_server_name_that_is_not_a_safe_identifier_is_refused():
    with pytest.raises(ConfigError) as err:
        get_runtime("claude-code").check_options({"mcp_servers": {"my__srv": {"command": ["python3"], "tools": ["t"]}}})
    assert err.value.field == "runtime_options.mcp_servers.my__srv" and "safe name" in str(err.value)


def test_the_manifest_bounds_the_plans_servers(tmp_path):
    options = {"mcp_servers": notes_server(tmp_path)}
    # an MCP tool in the manifest that no plan server declares would silently not exist
    with pytest.raises(ConfigError) as err:
        check_runtime_supports(with_tools("solver", ["Read", "mcp__notes__search"]), "claude-code", options)
    assert err.value.field == "tools" and "not declared" in str(err.value)
    with pytest.raises(ConfigError) as err:
        check_runtime_supports(with_tools("solver", ["Read", "mcp__notes"]), "claude-code", options)
    assert err.value.field == "tools" and "one tool per entry" in str(err.value)
    # a role that may not execute gets no server: a server's tool is code the session runs
    with pytest.raises(ConfigError) as err:
        check_runtime_supports(shipped("reviewer")[0], "claude-code", options)
    assert err.value.field == "runtime_options.mcp_servers.notes" and "may not execute" in str(err.value)
    # a runtime that starts no MCP server cannot honour a manifest's MCP tool
    with pytest.raises(ConfigError) as err:
        check_runtime_supports(with_tools("solver", ["Bash", "mcp__notes__write_marker"]), "command", {"argv": ["x"]})
    assert err.value.field == "tools" and "does not start MCP servers" in str(err.value)
    check_runtime_supports(with_tools("solver", ["Read", "mcp__notes__write_marker"]), "claude-code", options)


needs_codex = pytest.mark.skipif(shutil.which("codex") is None or native_binary("codex") is None,
                                 reason="the codex CLI is not installed (.ci/run installs it)")


@needs_codex
def test_codex_starts_the_plans_server_in_the_sandbox_and_offers_only_its_declared_tools(tmp_path):
    from tests.fakes.openai_api import FakeOpenAI, Script, call, say
    from tests.test_agents_codex import codex_role
    fake = FakeOpenAI()
    try:
        # codex offers a server's tools as the namespace mcp__<server>
        url = fake.script("solver", Script(steps=[call("write_marker", {"note": "from the model"}, "mcp__notes"),
                                                  call("forbidden", {}, "mcp__notes"), say("done")]))
        ws = workspace_for(tmp_path, "solver")
        repo = ws / "repo"
        (repo / ".codex").mkdir()
        (repo / ".codex" / "config.toml").write_text(
            f'[mcp_servers.pr-server]\ncommand = "sh"\nargs = ["-c", "touch {repo / "pr-mcp-started"}; cat"]\n')
        host_only = tmp_path / "host-only"
        host_only.write_text("the sandbox never shows this\n")
        servers = notes_server(repo, env={"MCP_GREETING": "hello", "MCP_HOST_ONLY": str(host_only)})
        result, req = run_agent(tmp_path, codex_role(), "codex", {"base_url": url, "max_retries": 0, "stall_s": 30,
                                                                   "model": "gpt-5", "mcp_servers": servers}, workspace=ws)
        assert result.status == "ok", result.evidence
        seen = json.loads((repo / "mcp-marker.json").read_text())
        assert seen["greeting"] == "hello" and seen["note"] == "from the model"
        assert seen["home"] == SANDBOX_HOME and not seen["host_only_visible"], seen
        assert FAKE_KEY not in json.dumps(seen["api_keys"]), "the server saw the real key"
        assert not (repo / "mcp-forbidden").exists(), "a tool the plan does not declare ran"
        offered = [t for r in fake.requests for t in (r.get("raw_tools") or []) if t.get("name") == "mcp__notes"]
        assert offered and all([f["name"] for f in t["tools"]] == ["write_marker"] for t in offered), offered
        assert not (repo / "pr-mcp-started").exists(), "the PR's .codex/config.toml server started"
        outputs = json.dumps([r["input"] for r in fake.requests])
        assert CANARY in outputs and "unsupported call" in outputs
    finally:
        fake.close()


@needs_codex
def test_a_codex_server_that_does_not_start_fails_the_session_before_its_first_event(tmp_path):
    from tests.fakes.openai_api import FakeOpenAI, Script, say
    from tests.test_agents_codex import codex_role
    fake = FakeOpenAI()
    try:
        url = fake.script("solver", Script(steps=[say("done")]))
        dead = {"notes": {"command": [PYTHON, "-c", "raise SystemExit(3)"], "tools": ["write_marker"]}}
        result, _ = run_agent(tmp_path, codex_role(), "codex", {"base_url": url, "max_retries": 0, "stall_s": 30,
                                                                 "model": "gpt-5", "mcp_servers": dead})
        assert (result.status, result.failure_class, result.reason) == ("failed", "config", "cli_failed")
        assert "required MCP servers failed to initialize" in result.evidence, result.evidence
        assert not fake.requests
    finally:
        fake.close()


def _init(tmp_path: Path, role: str, options: dict):
    src = make_pr_repo(tmp_path / "repos", "verified")
    plan = local_plan([candidate("pr-0", src, runtime_options={role: options})],
                      defaults={"runtimes": {role: "claude-code"}}, secrets=ENV_SECRETS)
    return sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "c"), check=False,
                 env={"ANTHROPIC_API_KEY": FAKE_KEY})


def test_init_refuses_a_read_only_roles_server_naming_the_field(tmp_path):
    r = _init(tmp_path / "b", "reviewer", {"mcp_servers": notes_server(tmp_path)})
    assert r.returncode == 2 and "runtime_options.mcp_servers.notes" in r.stderr and "may not execute" in r.stderr
    assert "candidates.0.runtimes.reviewer" in r.stderr
    assert not (tmp_path / "b" / "c" / "campaign.toml").exists()


@needs_claude
def test_a_server_that_does_not_start_in_the_sandbox_fails_the_session_as_config(tmp_path):
    # measured: claude reports the server "failed" in its init event and goes on without its tools
    from tests.fakes.anthropic_api import FakeAnthropic, Script, text
    fake = FakeAnthropic()
    try:
        url = fake.script("solver", Script(steps=[text("done")]))
        dead = {"notes": {"command": [PYTHON, "-c", "raise SystemExit(3)"], "tools": ["write_marker"]}}
        result, _ = run_agent(tmp_path, "solver", "claude-code", {"base_url": url, "max_retries": 0, "stall_s": 30,
                                                                   "mcp_servers": dead})
        assert (result.status, result.failure_class, result.reason) == ("failed", "config", "mcp_server_failed")
        assert "notes: failed" in result.evidence, result.evidence
    finally:
        fake.close()


@needs_claude
def test_init_runs_the_servers_command_line_in_the_sandbox_and_refuses_one_that_does_not_start(tmp_path):
    r = _init(tmp_path, "author", {"base_url": "http://127.0.0.1:9",
                                   "mcp_servers": {"notes": {"command": [PYTHON, "-c", "raise SystemExit(3)"],
                                                             "tools": ["write_marker"]}}})
    assert r.returncode == 2 and "did not start in the sandbox" in r.stderr, r.stderr
    assert "candidates.0.runtimes.author" in r.stderr
    (tmp_path / "markers").mkdir()
    ok = _init(tmp_path / "good", "author", {"base_url": "http://127.0.0.1:9",
                                             "mcp_servers": notes_server(tmp_path / "markers")})
    assert ok.returncode == 0, ok.stderr


def test_mcp_tools_are_pre_approved_never_put_in_the_built_in_tool_list():
    from sweep.runtimes.claude_code import tools_flags
    tools, allowed = tools_flags(["Read", "mcp__notes__write_marker"], ["mcp__notes__write_marker", "mcp__notes__x"])
    assert tools == "Read"
    assert allowed == "Read,mcp__notes__write_marker,mcp__notes__x"
