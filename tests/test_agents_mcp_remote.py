"""Remote MCP servers from the plan, only through the sandbox's relay: the REAL claude and codex
CLIs reach a FAKE remote MCP server on loopback (tests/fakes/mcp_http.py) by the URL the plan
declares, the fake model calls its tools, only the declared ones run; from the same sandbox a
second server the plan does not declare is unreachable; and `sweep init` refuses a declaration
sweep cannot bound (a header, a credential in the URL, a transport the CLI does not speak),
naming the field."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runstate.errors import ConfigError
from sweep.harbor.samples import make_pr_repo
from sweep.runtimes import get_runtime
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, needs_claude, run_agent
from tests.campaigns import sweep, write_plan
from tests.fakes.mcp_http import FakeRemoteMCP
from tests.fakes.mcp_server import CANARY
from tests.fakes.runs import candidate, local_plan
from tests.test_agents_mcp import needs_codex

PYTHON = sys.executable


def probe(declared: int, undeclared: int, out: Path) -> str:
    """A shell command the agent runs in its sandbox: which of two loopback ports it can connect to."""
    code = ("import json,socket,sys\nseen={}\nfor p in sys.argv[1:3]:\n"
            "    try:\n        socket.create_connection(('127.0.0.1',int(p)),timeout=5).close(); seen[p]='open'\n"
            "    except OSError as e:\n        seen[p]=type(e).__name__\n"
            "open(sys.argv[3],'w').write(json.dumps(seen))\n")
    script = out.parent / "probe.py"
    script.write_text(code)
    # the session sees its workspace (tmp_path/ws, holding repo/) at /app
    inside = Path("/app/repo")
    return f"{PYTHON} {inside / script.name} {declared} {undeclared} {inside / out.name}"


def servers(fake: FakeRemoteMCP, kind: str = "http") -> dict:
    return {"docs": {"url": fake.url if kind == "http" else fake.sse_url, "type": kind, "tools": ["write_marker"]}}


@needs_claude
@pytest.mark.parametrize("kind", ["http", "sse"])
def test_claude_reaches_a_declared_remote_server_through_the_relay_and_nothing_else(tmp_path, kind):
    from tests.fakes.anthropic_api import FakeAnthropic, Script, text, tool_calls
    (tmp_path / "markers").mkdir()
    (tmp_path / "other").mkdir()
    declared, other, fake = FakeRemoteMCP(tmp_path / "markers"), FakeRemoteMCP(tmp_path / "other"), FakeAnthropic()
    try:
        reach = tmp_path / "ws" / "repo" / "reach.json"
        (tmp_path / "ws" / "repo").mkdir(parents=True)
        url = fake.script("solver", Script(steps=[
            tool_calls([("mcp__docs__write_marker", {"note": "over http"})]),
            tool_calls([("mcp__docs__forbidden", {})]),
            tool_calls([("Bash", {"command": probe(declared.port, other.port, reach)})]), text("done")]))
        result, req = run_agent(tmp_path, "solver", "claude-code",
                                {"base_url": url, "max_retries": 0, "stall_s": 30, "model": "claude-sonnet-4-5",
                                 "mcp_servers": servers(declared, kind)}, workspace=tmp_path / "ws")
        assert result.status == "ok", result.evidence
        seen = json.loads((tmp_path / "markers" / "mcp-marker.json").read_text())
        assert seen["note"] == "over http"
        assert CANARY in json.dumps([r["messages"] for r in fake.main_requests("solver")])
        assert not (tmp_path / "markers" / "mcp-forbidden").exists(), "a tool the plan does not declare ran"
        assert [d["tool_name"] for d in result.report["permission_denials"]] == ["mcp__docs__forbidden"]
        assert json.loads(reach.read_text()) == {str(declared.port): "open",
                                                 str(other.port): "ConnectionRefusedError"}
        assert other.requests == [], "the undeclared server was reached"
        config = json.loads((req.session_dir / "mcp.json").read_text())["mcpServers"]["docs"]
        assert config == {"type": kind, "url": servers(declared, kind)["docs"]["url"]}
        argv = json.loads((req.session_dir / "argv.json").read_text())
        assert f"127.0.0.1:{declared.port}" in json.dumps(argv), "the server's HOST:PORT is not a session endpoint"
        assert not any(FAKE_KEY in json.dumps(r["headers"]) for r in declared.requests)
    finally:
        for f in (declared, other, fake):
            f.close()


@needs_codex
def test_codex_reaches_a_declared_remote_server_through_the_relay_and_nothing_else(tmp_path):
    from tests.fakes.openai_api import FakeOpenAI, Script, call, say
    from tests.test_agents_codex import codex_role
    (tmp_path / "markers").mkdir()
    (tmp_path / "other").mkdir()
    declared, other, fake = FakeRemoteMCP(tmp_path / "markers"), FakeRemoteMCP(tmp_path / "other"), FakeOpenAI()
    try:
        (tmp_path / "ws" / "repo").mkdir(parents=True)
        reach = tmp_path / "ws" / "repo" / "reach.json"
        url = fake.script("solver", Script(steps=[call("write_marker", {"note": "over http"}, "mcp__docs"),
                                                  call("forbidden", {}, "mcp__docs"),
                                                  call("exec_command", {"cmd": probe(declared.port, other.port, reach)}),
                                                  say("done")]))
        result, req = run_agent(tmp_path, codex_role(), "codex",
                                {"base_url": url, "max_retries": 0, "stall_s": 30, "model": "gpt-5",
                                 "mcp_servers": servers(declared)}, workspace=tmp_path / "ws")
        assert result.status == "ok", result.evidence
        assert json.loads((tmp_path / "markers" / "mcp-marker.json").read_text())["note"] == "over http"
        assert not (tmp_path / "markers" / "mcp-forbidden").exists(), "a tool the plan does not declare ran"
        offered = [t for r in fake.requests for t in (r.get("raw_tools") or []) if t.get("name") == "mcp__docs"]
        assert offered and all([f["name"] for f in t["tools"]] == ["write_marker"] for t in offered), offered
        outputs = json.dumps([r["input"] for r in fake.requests])
        assert CANARY in outputs and "unsupported call" in outputs
        assert json.loads(reach.read_text()) == {str(declared.port): "open",
                                                 str(other.port): "ConnectionRefusedError"}
        assert other.requests == [], "the undeclared server was reached"
        home = (req.session_dir / "codex-home" / "config.toml").read_text()
        assert f'url = "{declared.url}"' in home and 'enabled_tools = ["write_marker"]' in home
    finally:
        for f in (declared, other, fake):
            f.close()


@pytest.mark.parametrize("runtime,server,field,says", [
    ("claude-code", {"url": "https://mcp.example.com/mcp", "tools": ["t"], "headers": {"Authorization": "x"}},
     "docs.headers", "cannot add a header on the host side"),
    ("claude-code", {"url": "https://mcp.example.com/mcp", "tools": ["t"], "oauth": {"clientId": "x"}},
     "docs.oauth", "inside the sandbox"),
    ("claude-code", {"url": "https://user:pw@mcp.example.com/mcp", "tools": ["t"]}, "docs.url", "user part"),
    ("claude-code", {"url": "https://mcp.example.com/mcp?api_key=abc", "tools": ["t"]}, "docs.url", "secret"),
    ("claude-code", {"url": "ftp://mcp.example.com/", "tools": ["t"]}, "docs.url", "http:// or https://"),
    ("claude-code", {"url": "https://10.0.0.5/mcp", "tools": ["t"]}, "docs.url", "host name"),
    ("claude-code", {"type": "http", "tools": ["t"]}, "docs.url", "http:// or https://"),
    ("claude-code", {"url": "https://mcp.example.com/mcp"}, "docs.tools", "tools must list"),
    ("claude-code", {"url": "https://mcp.example.com/mcp", "tools": ["t"], "type": "ws"}, "docs.type", "over http or sse"),
    ("claude-code", {"url": "https://mcp.example.com/mcp", "tools": ["t"], "command": ["python3"]}, "docs.command",
     "either command"),
    ("codex", {"url": "https://mcp.example.com/sse", "type": "sse", "tools": ["t"]}, "docs.type", "over http only"),
])
def test_a_remote_declaration_sweep_cannot_bound_is_refused_naming_the_field(runtime, server, field, says):
    with pytest.raises(ConfigError) as err:
        get_runtime(runtime).check_options({"mcp_servers": {"docs": server}})
    assert err.value.field == f"runtime_options.mcp_servers.{field}" and says in str(err.value), str(err.value)


def test_init_refuses_a_remote_server_with_a_header_naming_the_candidate_and_field(tmp_path):
    r = _init(tmp_path, {"mcp_servers": {"docs": {"url": "https://mcp.example.com/mcp", "tools": ["t"],
                                                  "headers": {"Authorization": "Bearer x"}}}})
    assert r.returncode == 2 and "runtime_options.mcp_servers.docs.headers" in r.stderr, r.stderr
    assert "candidates.0.runtimes.author" in r.stderr and "TLS end to end" in r.stderr
    assert not (tmp_path / "c" / "campaign.toml").exists()


def _init(tmp_path: Path, options: dict):
    src = make_pr_repo(tmp_path / "repos", "verified")
    plan = local_plan([candidate("pr-0", src, runtime_options={"author": options})],
                      defaults={"runtimes": {"author": "claude-code"}}, secrets=ENV_SECRETS)
    return sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "c"), check=False,
                 env={"ANTHROPIC_API_KEY": FAKE_KEY})


@needs_claude
def test_init_runs_the_command_line_against_the_remote_server_and_refuses_one_it_cannot_reach(tmp_path):
    import socket
    with socket.socket() as sock:          # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    gone = {"docs": {"url": f"http://127.0.0.1:{dead}/mcp", "tools": ["write_marker"]}}
    r = _init(tmp_path / "a", {"base_url": "http://127.0.0.1:9", "mcp_servers": gone})
    assert r.returncode == 2 and "could not be reached from the sandbox (docs: failed)" in r.stderr, r.stderr
    assert "candidates.0.runtimes.author" in r.stderr
    (tmp_path / "markers").mkdir()
    fake = FakeRemoteMCP(tmp_path / "markers")
    try:
        ok = _init(tmp_path / "b", {"base_url": "http://127.0.0.1:9", "mcp_servers": servers(fake)})
        assert ok.returncode == 0, ok.stderr
        assert any(r.get("rpc") == "initialize" for r in fake.requests), fake.requests
    finally:
        fake.close()
