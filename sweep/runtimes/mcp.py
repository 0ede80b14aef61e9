"""MCP servers per role, from the plan: stdio servers started by the agent CLI inside the
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
A remote server is declared by its URL instead of a command:

    [defaults.runtime_options.solver.mcp_servers.docs]
    url = "https://mcp.example.com/mcp"    # http or https; its HOST:PORT joins the session's `api` endpoints
    type = "http"                          # streamable HTTP (default); "sse": the older transport, claude-code only
    tools = ["search"]

Its host and port become one more endpoint of the session's `api` network (the per-endpoint relay
every sandbox has, sweep/providers/local/network.py): the sandbox reaches that HOST:PORT and
nothing else besides the model relay. TLS to it is end to end (the relay copies bytes), so the
relay cannot add a header on the host side: `headers`, `oauth`, credentials in the URL's user part
and secret-looking query parameters are refused at init (a credential there would sit inside the
sandbox, readable by the agent's tools). The
workspace's `.mcp.json` (claude: `--strict-mcp-config`) and `.codex/config.toml` (codex: the
workspace is untrusted) are never read.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from roles.spec import KEY_FAMILY_ENV, RoleSpec
from runstate.errors import ConfigError
from runstate.files import write_atomic

SERVER_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")       # no "_": mcp__<server>__<tool> stays unambiguous
TOOL_RE = re.compile(r"^mcp__([a-z][a-z0-9-]{0,31})__([A-Za-z0-9_.-]{1,64})$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
SERVER_KEYS = ("command", "tools", "env", "read_paths", "type")
REMOTE_SERVER_KEYS = ("url", "type", "tools")
REMOTE_TYPES = ("http", "sse")
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
RESERVED_ENV = frozenset({"PATH", "HOME", "TMPDIR", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "NODE_OPTIONS"})
SECRET_NAME_RE = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)
SECRET_VALUE_RE = re.compile(r"^(sk-|ghp_|gho_|github_pat_|xox[abp]-|AKIA|glpat-)")
NO_HEADERS_WHY = ("the sandbox's relay to a remote MCP server is a TCP relay with TLS end to end, so it cannot add "
                  "a header on the host side; a header (or OAuth token) given to the CLI would sit inside the sandbox, "
                  "where the agent's tools can read it and send it anywhere its output goes")
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


def check_mcp_servers(servers: object, remote_types: tuple[str, ...] = REMOTE_TYPES) -> None:
    """ConfigError naming `runtime_options.mcp_servers.<name>.<key>` unless every server is a
    stdio server sweep can start (a safe name, a resolvable program, plain-string env) or a remote
    one by URL, of a transport the runtime's CLI speaks (`remote_types`), carrying no credential."""
    if not isinstance(servers, dict) or not servers:
        raise _bad(None, None, "mcp_servers must be a table of servers by name, e.g. "
                   "mcp_servers.notes = {command = [\"python3\", \"/opt/notes.py\"]}")
    for name, server in servers.items():
        if not isinstance(name, str) or not SERVER_RE.match(name):
            raise _bad(str(name), None, f"MCP server name {name!r} is not a safe name: expected [a-z][a-z0-9-]*, "
                       "at most 32 characters (its tools are called mcp__<name>__<tool>)")
        if not isinstance(server, dict):
            raise _bad(name, None, "an MCP server must be a table with a command")
        if "url" in server or server.get("type", "stdio") in REMOTE_TYPES:
            _check_remote(name, server, remote_types)
            continue
        if server.get("type", "stdio") != "stdio":
            raise _bad(name, "type", f"type must be \"stdio\" (with command) or one of {', '.join(REMOTE_TYPES)} "
                       "(with url)")
        unknown = sorted(set(server) - set(SERVER_KEYS))
        if unknown:
            raise _bad(name, unknown[0], f"unknown MCP server key {unknown[0]!r}; known: {', '.join(SERVER_KEYS)}"
                       + (" (put the arguments in command)" if "args" in unknown else ""))
        _check_command(name, server.get("command"))
        _check_tools(name, server.get("tools"))
        _check_env(name, server.get("env", {}))
        paths = server.get("read_paths", [])
        if not isinstance(paths, list) or not all(isinstance(p, str) and os.path.isabs(p) for p in paths):
            raise _bad(name, "read_paths", "read_paths must be a list of absolute paths")


def _check_tools(name: str, tools: object) -> None:
    if (not isinstance(tools, list) or not tools or len(set(map(str, tools))) != len(tools)
            or not all(isinstance(t, str) and TOOL_NAME_RE.match(t) for t in tools)):
        raise _bad(name, "tools", "tools must list the server's tools the session may call, each once "
                   "(names such as \"search\"; each becomes mcp__<server>__<tool>)")


def _check_remote(name: str, server: dict, remote_types: tuple[str, ...]) -> None:
    """A remote server: a URL the session's relay can reach, a transport the CLI speaks, no credential."""
    for key in ("headers", "oauth"):
        if key in server:
            raise _bad(name, key, f"{key} are not supported for a remote MCP server: {NO_HEADERS_WHY}",
                       hint="use a server that needs no credential, or run it over stdio with a non-secret setting")
    unknown = sorted(set(server) - set(REMOTE_SERVER_KEYS))
    if unknown:
        raise _bad(name, unknown[0], f"a remote MCP server takes only {', '.join(REMOTE_SERVER_KEYS)}, not "
                   f"{unknown[0]!r} (a server is either command = [...] or url = \"...\")")
    kind = server.get("type", "http")
    if kind not in remote_types:
        raise _bad(name, "type", f"type {kind!r}: this runtime's CLI connects to remote MCP servers over "
                   f"{' or '.join(remote_types)} only" + (" (streamable HTTP: type = \"http\")" if kind == "sse" else ""))
    url = server.get("url")
    parts = urlsplit(url) if isinstance(url, str) and len(url) <= 2048 else None
    try:
        _ = parts.port if parts is not None else None      # a bad port raises here
    except ValueError:
        parts = None
    if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment
            or any(c.isspace() for c in str(url))):
        raise _bad(name, "url", "url must be an http:// or https:// URL of the server, such as https://mcp.example.com/mcp")
    if parts.username is not None or parts.password is not None:
        raise _bad(name, "url", f"url carries credentials in its user part: {NO_HEADERS_WHY}")
    if any(SECRET_NAME_RE.search(k) or SECRET_VALUE_RE.match(v) for k, v in parse_qsl(parts.query)):
        raise _bad(name, "url", f"url carries what looks like a secret in its query: {NO_HEADERS_WHY}")
    try:
        address = ipaddress.ip_address(parts.hostname)
    except ValueError:
        address = None
    if address is not None and not (address.version == 4 and address.is_loopback):
        raise _bad(name, "url", f"url names the address {parts.hostname}: the sandbox reaches a remote server by "
                   "its host name (only a name or a 127.x.y.z address can be listened on inside)")
    _check_tools(name, server.get("tools"))


def is_remote(server: dict) -> bool:
    return "url" in server


def with_mcp_endpoints(endpoints: list[str], options: dict) -> list[str]:
    """A session's `api` endpoints plus the HOST:PORT of each of the plan's remote servers, once
    each: the sandbox's relay then reaches those and nothing else."""
    out = list(endpoints)
    for server in (options.get("mcp_servers") or {}).values():
        if is_remote(server):
            parts = urlsplit(server["url"])
            entry = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
            if entry not in out:
                out.append(entry)
    return out


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


def servers_down(down: list[str], servers: dict) -> str:
    """The evidence of a session whose plan servers did not connect (`down`: "name: status")."""
    remote = [d for d in down if is_remote(servers.get(d.partition(":")[0], {}))]
    local = [d for d in down if d not in remote]
    parts = []
    if local:
        parts.append(f"the plan's MCP server(s) did not start in the sandbox ({', '.join(local)}): "
                     "its program and files must be readable there (command, read_paths)")
    if remote:
        parts.append(f"the plan's remote MCP server(s) could not be reached from the sandbox ({', '.join(remote)}): "
                     "the relay connects to the url's HOST:PORT from this host; it must answer there (url, type)")
    return "; ".join(parts)


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
        if is_remote(server):
            continue
        command = list(server["command"])
        program = resolve_program(command[0])
        if program is None:
            raise _bad(name, "command", f"the program {command[0]!r} is not found or not executable")
        reads = [Path(program), *(Path(a) for a in command[1:] if os.path.isabs(a) and os.path.exists(a)),
                 *(Path(p) for p in server.get("read_paths", []))]
        out.append(StdioServer(name, program, command[1:], dict(server.get("env", {})), list(server["tools"]), reads))
    return out


def _as_shown(started: list[StdioServer], shown: Callable[[str], str] | None) -> list[StdioServer]:
    """The servers' arguments and variables as the sandbox shows the host paths they name
    (`shown`: the session's fixed view; the reads stay host paths, bound where the view puts them)."""
    if shown is None:
        return started
    return [StdioServer(s.name, s.program, [shown(a) for a in s.args], {k: shown(v) for k, v in s.env.items()},
                        s.tools, s.reads) for s in started]


def write_mcp_config(servers: dict, path: Path, shown: Callable[[str], str] | None = None) -> list[Path]:
    """Write claude's `--mcp-config` file (0600) and return the host paths the servers must read."""
    started = _as_shown(stdio_servers(servers), shown)
    config: dict[str, dict] = {s.name: {"type": "stdio", "command": s.program, "args": s.args, "env": s.env}
                               for s in started}
    for name, server in servers.items():
        if is_remote(server):     # reached through the sandbox's relay to its HOST:PORT (mcp_endpoints)
            config[name] = {"type": server.get("type", "http"), "url": server["url"]}
    write_atomic(path, (json.dumps({"mcpServers": config}, indent=2, sort_keys=True) + "\n").encode())
    return [p for s in started for p in s.reads]


def codex_mcp_tables(servers: dict, shown: Callable[[str], str] | None = None) -> tuple[str, list[Path]]:
    """codex's `[mcp_servers.<name>]` tables for CODEX_HOME/config.toml, and the host paths the
    servers must read. `enabled_tools` offers the model only the declared tools (measured, 0.171.0:
    an undeclared one is not in the request's tools and a call of it is "unsupported"); `required`
    makes codex exit before its first event when a server does not start, instead of going on
    without it."""
    def q(text: str) -> str:
        return json.dumps(text)             # a JSON string is a TOML basic string
    started = _as_shown(stdio_servers(servers), shown)
    tables = []
    for s in started:
        env = ", ".join(f"{q(k)} = {q(v)}" for k, v in s.env.items())
        tables.append(f"[mcp_servers.{q(s.name)}]\ncommand = {q(s.program)}\n"
                      f"args = [{', '.join(map(q, s.args))}]\nenv = {{ {env} }}\n"
                      f"enabled_tools = [{', '.join(map(q, s.tools))}]\nrequired = true\n")
    for name, server in servers.items():
        if is_remote(server):     # streamable HTTP, through the sandbox's relay to its HOST:PORT
            tables.append(f"[mcp_servers.{q(name)}]\nurl = {q(server['url'])}\n"
                          f"enabled_tools = [{', '.join(map(q, server['tools']))}]\nrequired = true\n")
    return "\n".join(tables), [p for s in started for p in s.reads]
