"""MCP servers per role, from the plan: stdio servers only, started by the agent CLI inside the
session's sandbox, their tools admitted one by one, within what the role's manifest allows.

    [defaults.runtime_options.solver.mcp_servers.notes]
    command = ["python3", "/opt/mcp/notes.py", "--db", "/opt/mcp/notes.db"]   # program + arguments
    tools = ["search"]                     # the server's tools the session may call (required)
    env = {NOTES_MODE = "read"}            # plain strings; never a secret by value
    read_paths = ["/opt/mcp/lib"]          # more host paths the server must read (absolute)

A server is the CLI's child, so it runs inside the same sandbox (network, mounts, uid) as the
CLI: its program, every absolute path among its arguments and its `read_paths` are mounted
read-only, nothing else of the host is. Tools are admitted one by one: for claude-code each listed
tool becomes `mcp__<server>__<tool>` in `--allowedTools` and any other tool the server offers is
denied (`--permission-mode dontAsk`; measured with 2.1.197: `--tools` does not filter MCP tools,
the permission check does); for codex the list is the server's `enabled_tools` in the session's
CODEX_HOME/config.toml, so the model is offered no other (measured with 0.171.0). The manifest bounds it: a role that may not execute
(`execution.can_execute = false`) gets no server (a server's tool is code the role runs), and an
`mcp__` tool the manifest lists must be one the plan declares (else it would silently not exist).
A remote (http/sse) server is refused: the session's network reaches only its model endpoint,
through the relay; a remote server would need its own entry in the relay's allow list. The
workspace's `.mcp.json` (claude: `--strict-mcp-config`) and `.codex/config.toml` (codex: the
workspace is untrusted) are never read.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from roles.spec import KEY_FAMILY_ENV, RoleSpec
from runstate.errors import ConfigError
from runstate.files import write_atomic

SERVER_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")       # no "_": mcp__<server>__<tool> stays unambiguous
TOOL_RE = re.compile(r"^mcp__([a-z][a-z0-9-]{0,31})__([A-Za-z0-9_.-]{1,64})$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
SERVER_KEYS = ("command", "tools", "env", "read_paths", "type")
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
REMOTE_KEYS = ("url", "headers", "oauth")
RESERVED_ENV = frozenset({"PATH", "HOME", "TMPDIR", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "NODE_OPTIONS"})
SECRET_NAME_RE = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)
SECRET_VALUE_RE = re.compile(r"^(sk-|ghp_|gho_|github_pat_|xox[abp]-|AKIA|glpat-)")
REMOTE_WHY = ("remote (http/sse) MCP servers are not supported: a session's network reaches only its model "
              "endpoint, through the relay, and a remote server would need its own entry in the relay's allow list")
FIELD = "runtime_options.mcp_servers"


def _bad(name: str | None, key: str | None, message: str, hint: str | None = None) -> ConfigError:
    where = FIELD + (f".{name}" if name else "") + (f".{key}" if key else "")
    return ConfigError(message, field=where, hint=hint)


def resolve_program(program: str) -> str | None:
    """The absolute, symlink-resolved path of a server's program, or None."""
    path = program if os.path.isabs(program) else shutil.which(program)
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        return None
    return os.path.realpath(path)


def check_mcp_servers(servers: object) -> None:
    """ConfigError naming `runtime_options.mcp_servers.<name>.<key>` unless every server is a
    stdio server sweep can start: a safe name, a resolvable program, plain-string env, no remote."""
    if not isinstance(servers, dict) or not servers:
        raise _bad(None, None, "mcp_servers must be a table of servers by name, e.g. "
                   "mcp_servers.notes = {command = [\"python3\", \"/opt/notes.py\"]}")
    for name, server in servers.items():
        if not isinstance(name, str) or not SERVER_RE.match(name):
            raise _bad(str(name), None, f"MCP server name {name!r} is not a safe name: expected [a-z][a-z0-9-]*, "
                       "at most 32 characters (its tools are called mcp__<name>__<tool>)")
        if not isinstance(server, dict):
            raise _bad(name, None, "an MCP server must be a table with a command")
        remote = [k for k in REMOTE_KEYS if k in server]
        if remote or server.get("type", "stdio") != "stdio":
            raise _bad(name, remote[0] if remote else "type", REMOTE_WHY, hint="run the server over stdio: command = [...]")
        unknown = sorted(set(server) - set(SERVER_KEYS))
        if unknown:
            raise _bad(name, unknown[0], f"unknown MCP server key {unknown[0]!r}; known: {', '.join(SERVER_KEYS)}"
                       + (" (put the arguments in command)" if "args" in unknown else ""))
        _check_command(name, server.get("command"))
        tools = server.get("tools")
        if (not isinstance(tools, list) or not tools or len(set(map(str, tools))) != len(tools)
                or not all(isinstance(t, str) and TOOL_NAME_RE.match(t) for t in tools)):
            raise _bad(name, "tools", "tools must list the server's tools the session may call, each once "
                       "(names such as \"search\"; each becomes mcp__<server>__<tool>)")
        _check_env(name, server.get("env", {}))
        paths = server.get("read_paths", [])
        if not isinstance(paths, list) or not all(isinstance(p, str) and os.path.isabs(p) for p in paths):
            raise _bad(name, "read_paths", "read_paths must be a list of absolute paths")


def _check_command(name: str, command: object) -> None:
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command) or not command[0]:
        raise _bad(name, "command", "command must be a non-empty list of strings: the program, then its arguments")
    program = command[0]
    if "/" in program and not os.path.isabs(program):
        raise _bad(name, "command", f"the program {program!r} must be a name on PATH or an absolute path")
    if resolve_program(program) is None:
        raise _bad(name, "command", f"the program {program!r} is not found or not executable")


def _check_env(name: str, env: object) -> None:
    if not isinstance(env, dict):
        raise _bad(name, "env", "env must map variable names to strings")
    family_vars = {v for names in KEY_FAMILY_ENV.values() for v in names}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key) or key in RESERVED_ENV or key in family_vars:
            raise _bad(name, "env", f"env may not set {key!r}")
        if not isinstance(value, str) or len(value) > 4096:
            raise _bad(name, "env", f"env {key} must be a string (at most 4096 characters)")
        if SECRET_NAME_RE.search(key) or SECRET_VALUE_RE.match(value):
            raise _bad(name, "env", f"env {key} looks like a secret: a plan never holds one by value, and "
                       "an MCP server gets none (the session's sandbox holds no key)",
                       hint="give the server a non-secret setting, or leave the credential to the relay")


def allowed_mcp_tools(options: dict) -> list[str]:
    """The full names of the tools the plan admits: `mcp__<server>__<tool>`, in plan order."""
    servers = options.get("mcp_servers") or {}
    return [f"mcp__{name}__{tool}" for name, server in servers.items() for tool in server.get("tools", [])]


def check_role_mcp(spec: RoleSpec, runtime: str, options: dict | None, supported: bool) -> None:
    """The manifest bounds the plan's servers: none for a role that may not execute; an `mcp__`
    tool in the manifest must be one a plan server declares (`options` None: the plan is not known,
    only the names are checked)."""
    where = {"path": spec.source_path}
    listed = [t for t in spec.tools if t.startswith("mcp__")]
    for tool in listed:
        if not TOOL_RE.match(tool):
            raise ConfigError(f"MCP tool {tool!r} must be named mcp__<server>__<tool>, one tool per entry "
                              "(a whole server is never admitted)", field="tools", **where)
    if listed and not supported:
        raise ConfigError(f"runtime {runtime!r} does not start MCP servers, so tools {listed} would not exist",
                          field="tools", hint="use claude-code for this role, or remove them", **where)
    if options is None:
        return
    servers = options.get("mcp_servers") or {}
    if servers and not spec.execution.can_execute:
        raise _bad(next(iter(servers)), None, f"role {spec.name!r} may not execute (execution.can_execute = false), "
                   "and an MCP server's tools are code the session runs", hint="give MCP servers to a role that executes")
    declared = set(allowed_mcp_tools(options))
    for tool in listed:
        if tool not in declared:
            raise ConfigError(f"tool {tool} is not declared by any MCP server the plan gives role {spec.name!r}",
                              field="tools", hint="list it in runtime_options.<role>.mcp_servers.<server>.tools, "
                              "or remove it from the manifest", **where)


@dataclass(frozen=True)
class StdioServer:
    """One plan server as a session starts it: the program resolved now, on the session's host."""
    name: str
    program: str
    args: list[str]
    env: dict[str, str]
    tools: list[str]
    reads: list[Path]                     # what the sandbox must show it (read-only)


def stdio_servers(servers: dict) -> list[StdioServer]:
    out = []
    for name, server in servers.items():
        command = list(server["command"])
        program = resolve_program(command[0])
        if program is None:
            raise _bad(name, "command", f"the program {command[0]!r} is not found or not executable")
        reads = [Path(program), *(Path(a) for a in command[1:] if os.path.isabs(a) and os.path.exists(a)),
                 *(Path(p) for p in server.get("read_paths", []))]
        out.append(StdioServer(name, program, command[1:], dict(server.get("env", {})), list(server["tools"]), reads))
    return out


def write_mcp_config(servers: dict, path: Path) -> list[Path]:
    """Write claude's `--mcp-config` file (0600) and return the host paths the servers must read."""
    started = stdio_servers(servers)
    config = {s.name: {"type": "stdio", "command": s.program, "args": s.args, "env": s.env} for s in started}
    write_atomic(path, (json.dumps({"mcpServers": config}, indent=2, sort_keys=True) + "\n").encode())
    return [p for s in started for p in s.reads]


def codex_mcp_tables(servers: dict) -> tuple[str, list[Path]]:
    """codex's `[mcp_servers.<name>]` tables for CODEX_HOME/config.toml, and the host paths the
    servers must read. `enabled_tools` offers the model only the declared tools (measured, 0.171.0:
    an undeclared one is not in the request's tools and a call of it is "unsupported"); `required`
    makes codex exit before its first event when a server does not start, instead of going on
    without it."""
    def q(text: str) -> str:
        return json.dumps(text)             # a JSON string is a TOML basic string
    started = stdio_servers(servers)
    tables = []
    for s in started:
        env = ", ".join(f"{q(k)} = {q(v)}" for k, v in s.env.items())
        tables.append(f"[mcp_servers.{q(s.name)}]\ncommand = {q(s.program)}\n"
                      f"args = [{', '.join(map(q, s.args))}]\nenv = {{ {env} }}\n"
                      f"enabled_tools = [{', '.join(map(q, s.tools))}]\nrequired = true\n")
    return "\n".join(tables), [p for s in started for p in s.reads]
