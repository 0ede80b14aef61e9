"""claude-code: Anthropic's `claude` CLI in print mode, one role session per process.

    [defaults.runtimes]
    author = "claude-code"
    [defaults.runtime_options.author]
    model = "claude-sonnet-4-5"         # --model (optional: the CLI's default otherwise)
    effort = "medium"                   # --effort low|medium|high|xhigh|max (optional)
    base_url = "https://api.anthropic.com"   # ANTHROPIC_BASE_URL (optional; the model endpoint)
    max_retries = 2                     # CLAUDE_CODE_MAX_RETRIES (0-10; the CLI's default, 10, is ~3 min)
    request_timeout_s = 300             # API_TIMEOUT_MS
    stall_s = 900                       # no stream event for this long -> stopped, an outage
    binary = "claude"                   # a name on PATH or an absolute path
    [defaults.runtime_options.solver.mcp_servers.notes]   # stdio MCP servers (sweep/runtimes/mcp.py)
    command = ["python3", "/opt/mcp/notes.py"]
    tools = ["search"]                  # admitted as mcp__notes__search; the server's others denied

How a RoleSpec becomes the command line (the prompt goes on stdin: one argv element is capped at
128 KiB, which a large PR's diff exceeds):

    claude -p --output-format stream-json --verbose --session-id UUID
           --append-system-prompt-file <session>/instructions.md
           --tools Read,Grep,Glob            (tool NAMES: a pattern here silently drops the tool)
           --allowedTools Read,Grep,Glob     (names and patterns such as Bash(pytest:*))
           --permission-mode dontAsk         (anything not pre-approved is denied, never asked)
           --setting-sources user --strict-mcp-config   (no settings, hooks or MCP servers from the
                                                         untrusted workspace)
           [--mcp-config <session>/mcp.json]  (the plan's stdio servers; their declared tools
                                               join --allowedTools, never --tools)
           --max-turns N --max-budget-usd X  (from the role's budget)
           --json-schema '{...}'             (judges; the structured output is validated by sweep)
           [--model M] [--effort E]

The CLI's state (its config dir, with the session transcript) lives in the session directory
(`claude-config/`), outside the workspace so the audit never counts it as a change, and is kept,
so an interrupted session can be resumed (`claude --resume SESSION_ID` with that CLAUDE_CONFIG_DIR).

What happened is read from the stream-json events only (`system/init`, `system/api_retry`,
`assistant`, `result`), never from what the agent or a tool printed: see `classify_stream`.
"""
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from runstate.errors import ConfigError
from roles.spec import tool_base
from sweep.runtimes.base import (Invocation, Parsed, RuntimeCapabilities, SessionFiles, SessionRequest,
                                 JsonLines, TranscriptToolCalls, check_cli_options, check_wire_options, class_of_status, endpoint_of,
                                 feed_stdout, find_binary, session_cost_limit, stall_limit)
from sweep.runtimes.facts import AgentCli, RuntimeFacts
from sweep.runtimes.mcp import (allowed_mcp_tools, check_mcp_servers, servers_down, with_mcp_endpoints,
                                write_mcp_config)

# The CLI versions sweep's flag mapping and stream parser were tested with (tests/fixtures/streams).
PACKAGE = "@anthropic-ai/claude-code"
PINNED_VERSION = "2.1.197"
DEFAULT_ENDPOINT = "https://api.anthropic.com"
SUPPORTED_RANGE = ((2, 1, 0), (2, 2, 0))       # [min, max): outside it `sweep doctor` warns
EFFORTS = ("low", "medium", "high", "xhigh", "max")
CONFIG_DIR_NAME = "claude-config"
MCP_CONFIG_NAME = "mcp.json"
DEFAULTS = {"max_retries": 2, "request_timeout_s": 300.0, "stall_s": 900.0, "binary": "claude"}
_OPTION_TYPES: dict[str, type | tuple[type, ...]] = {"model": str, "effort": str, "base_url": str, "max_retries": int,
                 "request_timeout_s": (int, float), "stall_s": (int, float), "binary": str,
                 "prices": dict, "ca_file": str, "mcp_servers": dict}
# The assistant-message `error` values the CLI sets on an API failure.
ERROR_CLASSES = {"rate_limit": "throttle", "overloaded": "throttle", "server_error": "outage",
                 "authentication_failed": "config", "billing_error": "config", "invalid_request": "failure",
                 "max_output_tokens": "failure"}
MAX_DENIALS_KEPT = 20


def check_claude_options(options: dict) -> None:
    check_cli_options("claude-code", {k: v for k, v in options.items() if k != "mcp_servers"},
                      _OPTION_TYPES, EFFORTS)
    check_wire_options(options)
    if "mcp_servers" in options:
        check_mcp_servers(options["mcp_servers"])


def install_root(exe: str) -> Path:
    """The npm package directory holding the binary (everything the CLI may load from), or its folder."""
    path = Path(exe).parent
    for candidate in (path, *path.parents):
        if (candidate / "package.json").is_file():
            return candidate
        if candidate.name == "node_modules":
            break
    return path


def parse_version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text or "")
    return tuple(int(x) for x in m.groups()) if m else None


def tools_flags(tools: list[str], mcp: Sequence[str] = ()) -> tuple[str, str]:
    """(--tools, --allowedTools): names restrict the tool set, patterns only pre-approve.

    `Bash(pytest:*)` in --tools silently removes Bash, so --tools gets the base names; the
    pattern goes to --allowedTools, where (with --permission-mode dontAsk) it is the only Bash
    use approved. A bare name in the role's list approves every use of that tool. MCP tools
    (`mcp__<server>__<tool>`, the plan's declared ones) go to --allowedTools only: --tools lists
    built-in tools and does not filter a server's (measured, 2.1.197).
    """
    names: list[str] = []
    for tool in tools:
        base = tool_base(tool)
        if base not in names and not base.startswith("mcp__"):
            names.append(base)
    allowed = [*tools, *(t for t in mcp if t not in tools)]
    return ",".join(names), ",".join(allowed)


def api_endpoint(base_url: str | None) -> str:
    """The one HOST:PORT a session in network "api" may reach: the model API's (docs/security.md)."""
    return endpoint_of(base_url or DEFAULT_ENDPOINT)


class ClaudeCodeRuntime:
    name = "claude-code"
    # the Messages API: relayed, and its cost metered at the wire (sweep/runtimes/wire)
    facts = RuntimeFacts(paid=True, host_only=False, protocol_classified=True, key_families=("anthropic",),
                         default_endpoint=DEFAULT_ENDPOINT, cost="metered", wire_protocol="anthropic",
                         cli=AgentCli(PACKAGE, PINNED_VERSION, SUPPORTED_RANGE, str(DEFAULTS["binary"]),
                                      find=find_binary, install_root=install_root),
                         resumable=True, counts_tool_calls=True)

    def capabilities(self, options: dict) -> RuntimeCapabilities:
        # --tools restricts the built-in set, --max-turns and --max-budget-usd are the CLI's own
        # caps (it checks after a turn, so a turn can overshoot), --json-schema gives a verdict.
        return RuntimeCapabilities(restricts_tools=True, structured_output=True, max_turns=True,
                                   cost_cap=True, needs_network=True, mcp_servers=True)

    def check_options(self, options: dict) -> None:
        check_claude_options(options)

    def build_invocation(self, req: SessionRequest, files: SessionFiles, output_path: str) -> Invocation:
        opts = {**DEFAULTS, **(req.runtime_options or {})}
        role = req.role
        exe = find_binary(opts["binary"])
        if exe is None:
            raise ConfigError(f"the claude CLI ({opts['binary']!r}) is not installed or not executable",
                              field="runtime_options.binary",
                              hint=f"npm install -g {PACKAGE}@{PINNED_VERSION}")
        tools, allowed = tools_flags(role.tools, allowed_mcp_tools(opts))
        # a resumed session goes on in the earlier one's transcript (same id, same config dir, and
        # the same working directory: claude keys its transcripts by it); the flags are given
        # again, since claude keeps none of them with the transcript
        session_flag = ["--resume", req.resume.session_id] if req.resume else ["--session-id", str(uuid.uuid4())]
        argv = [exe, "-p", "--output-format", "stream-json", "--verbose", *session_flag,
                "--append-system-prompt-file", req.shown(files.instructions),
                "--tools", tools, "--allowedTools", allowed, "--permission-mode", "dontAsk",
                "--setting-sources", "user", "--strict-mcp-config"]
        read_paths = [files.instructions, install_root(exe)]
        if opts.get("mcp_servers"):
            # the plan's stdio servers: the CLI's children, in its sandbox, reading only what they name
            config = files.session_dir / MCP_CONFIG_NAME
            read_paths += [config, *write_mcp_config(opts["mcp_servers"], config, req.shown_text)]
            argv += ["--mcp-config", req.shown(config)]
        if role.budget.max_turns is not None:
            argv += ["--max-turns", str(role.budget.max_turns)]
        cap = session_cost_limit(role.budget.cost_cap_usd, req.cost_limit_usd)
        if cap is not None:
            argv += ["--max-budget-usd", f"{cap:g}"]
        if role.output_schema is not None:
            argv += ["--json-schema", json.dumps(role.output_schema, separators=(",", ":"), sort_keys=True)]
        if opts.get("model"):
            argv += ["--model", opts["model"]]
        if opts.get("effort"):
            argv += ["--effort", opts["effort"]]
        config_dir = config_dir_of(req, files)
        if req.resume is not None:
            drop_user_settings(config_dir)
        env = {
            "CLAUDE_CONFIG_DIR": req.shown(config_dir),
            "CLAUDE_CODE_MAX_RETRIES": str(opts["max_retries"]),
            "API_TIMEOUT_MS": str(int(opts["request_timeout_s"] * 1000)),
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        if req.wire is not None:
            # the relay holds the key and meters the wire; the CLI insists on a key: a placeholder
            env["ANTHROPIC_BASE_URL"] = req.wire.base_url
            env["ANTHROPIC_API_KEY"] = req.wire.placeholder
            endpoints = [req.wire.endpoint] if req.wire.endpoint else []
        else:
            if opts.get("base_url"):
                env["ANTHROPIC_BASE_URL"] = opts["base_url"]
            endpoints = [api_endpoint(opts.get("base_url"))]
        return Invocation(argv=argv, env=env, read_paths=read_paths,
                          network="api", endpoints=with_mcp_endpoints(endpoints, opts), stdin_path=files.prompt,
                          state_paths=[config_dir], sandbox_env={"IS_SANDBOX": "1"},
                          idle_timeout_s=stall_limit(req.runtime_options or {}, DEFAULTS, role.budget.walltime_s),
                          tool_calls=transcript_tool_calls(config_dir, session_flag[1])
                          if req.stop_after_tool_calls is not None else None)

    def parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed:
        stream = ClaudeStream()
        feed_stdout(files, stream.feed_line)
        parsed = classify_stream(stream, outcome)
        down = [f"{name}: {status}" for name, status in stream.mcp_status.items()
                if name in ((req.runtime_options or {}).get("mcp_servers") or {}) and status != "connected"]
        if down:
            # the CLI goes on without a server that did not start (measured, 2.1.197): the session
            # would have run without the tools the plan gave it
            parsed = replace(parsed, ok=False, failure_class="config", reason="mcp_server_failed",
                             evidence=servers_down(down, (req.runtime_options or {}).get("mcp_servers") or {}))
        report = stream.provenance()
        report["config_dir"] = str(config_dir_of(req, files))
        if req.resume is not None:
            report["resumed_from"] = {"session_id": req.resume.session_id,
                                      "session_dir": str(req.resume.session_dir)}
        if stream.session_id:
            # claude keys its transcripts by the working directory: resumed elsewhere, it finds none.
            # Sandboxed, that is the fixed view's /app (argv.json `view`), not the host workspace
            report["resume"] = {"session_id": stream.session_id, "config_dir": report["config_dir"],
                                "state_dir": report["config_dir"], "cwd": req.shown(req.workspace),
                                "workspace": str(Path(req.workspace).resolve()),
                                "how": "cd <cwd> && CLAUDE_CONFIG_DIR=<config_dir> claude --resume <session_id>, "
                                       "in a sandbox that shows <workspace> at <cwd> when they differ"}
        parsed.report = report
        return parsed


def transcript_tool_calls(config_dir: Path, session_id: str) -> TranscriptToolCalls:
    """The tool results claude has written to the session's transcript
    (<config dir>/projects/<the cwd's slug>/<session id>.jsonl: `user` entries' tool_result blocks)."""
    def count(entry: dict) -> int:
        message = entry.get("message") if entry.get("type") == "user" else None
        content = message.get("content") if isinstance(message, dict) else None
        return sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result") \
            if isinstance(content, list) else 0
    counter = TranscriptToolCalls(lambda: sorted((config_dir / "projects").glob(f"*/{session_id}.jsonl")), count)
    counter.baseline()
    return counter


USER_SETTINGS = ("settings.json", "settings.local.json")


def drop_user_settings(config_dir: Path) -> None:
    """A resumed session's config dir was writable by the earlier session's agent: settings it left
    there (`--setting-sources user` reads them: hooks, permissions, env) are removed, so a resume
    gets no more than a fresh session would (links removed, never followed)."""
    for name in USER_SETTINGS:
        try:
            (config_dir / name).unlink()
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            import shutil
            shutil.rmtree(config_dir / name, ignore_errors=True)


def config_dir_of(req: SessionRequest, files: SessionFiles) -> Path:
    """The session's CLAUDE_CONFIG_DIR: its own, or the resumed session's (which holds the transcript)."""
    return req.resume.state_dir if req.resume is not None else files.session_dir / CONFIG_DIR_NAME


@dataclass
class ClaudeStream(JsonLines):
    """The state of one session, built from its stream-json lines as they come (one line at a time)."""
    session_id: str | None = None
    model: str | None = None
    cli_version: str | None = None
    tools: list[str] | None = None
    permission_mode: str | None = None
    mcp_status: dict[str, str] = field(default_factory=dict)     # server name -> status, from init
    assistant_messages: int = 0
    assistant_errors: list[str] = field(default_factory=list)
    retries: list[dict] = field(default_factory=list)
    result: ResultEvent | None = None
    last_type: str | None = None
    tool_results: int = 0                 # completed tool calls: tool_result blocks the CLI sent back

    def feed_line(self, raw: bytes | str) -> None:
        event = self.event_of(raw)
        if event is None:
            return
        kind, subtype = event.get("type"), event.get("subtype")
        self.last_type = f"{kind}/{subtype}" if subtype else str(kind)
        if kind == "system" and subtype == "init":
            self.session_id = _str(event.get("session_id")) or self.session_id
            self.model = _str(event.get("model"))
            self.cli_version = _str(event.get("claude_code_version"))
            tools = event.get("tools")
            self.tools = [t for t in tools if isinstance(t, str)][:100] if isinstance(tools, list) else None
            self.permission_mode = _str(event.get("permissionMode"))
            servers = event.get("mcp_servers")
            self.mcp_status = {str(_str(m.get("name"), 64)): str(_str(m.get("status"), 32)) for m in
                               (servers if isinstance(servers, list) else [])[:50] if isinstance(m, dict)}
        elif kind == "system" and subtype == "api_retry":
            self.retries.append({k: event.get(k) for k in ("attempt", "max_retries", "retry_delay_ms",
                                                           "error_status", "error") if k in event})
        elif kind == "assistant":
            self.assistant_messages += 1
            err = event.get("error")
            if isinstance(err, str):
                self.assistant_errors.append(err[:64])
        elif kind == "user":
            message = event.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            self.tool_results += sum(1 for block in content if isinstance(block, dict)
                                     and block.get("type") == "tool_result") if isinstance(content, list) else 0
        elif kind == "result":
            self.result = ResultEvent.read(event)
            self.session_id = self.result.session_id or self.session_id

    def provenance(self) -> dict:
        r = self.result or ResultEvent.read({})
        return {
            "runtime": "claude-code", "cli_version": self.cli_version, "model": self.model,
            "session_id": self.session_id, "permission_mode": self.permission_mode, "tools": self.tools,
            "tool_calls": self.tool_results,
            "mcp_servers": self.mcp_status,
            "num_turns": r.num_turns, "total_cost_usd": r.total_cost_usd,
            "usage": {k: r.usage[k] for k in USAGE_KEPT if k in r.usage},
            "subtype": r.subtype, "is_error": r.is_error,
            "api_error_status": r.api_error_status, "terminal_reason": r.terminal_reason,
            "stop_reason": r.stop_reason,
            "permission_denials": r.denials, "permission_denials_total": r.denials_total,
            "api_retries": self.retries[-20:], "api_retries_total": len(self.retries),
            "assistant_errors": self.assistant_errors[-10:], "events": self.events, "bad_lines": self.bad_lines,
            "final_text": _str(r.text, 2000),
        }


USAGE_KEPT = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


@dataclass(frozen=True)
class ResultEvent:
    """claude's `result` event, read field by field: a field of the wrong type reads as absent, so
    nothing downstream handles untyped JSON (the stream is the CLI's, but a forged line is possible)."""
    subtype: str | None
    is_error: bool
    num_turns: int | None
    total_cost_usd: float | None
    usage: dict[str, int]                 # the integer counters only
    api_error_status: int | None
    terminal_reason: str | None
    stop_reason: str | None
    denials: list[dict[str, str | None]]  # the first MAX_DENIALS_KEPT, shortened
    denials_total: int
    text: str | None                      # the final text: quoted as evidence, never matched
    structured_output: object
    session_id: str | None

    @classmethod
    def read(cls, event: dict) -> ResultEvent:
        usage = event.get("usage")
        denials = event.get("permission_denials")
        denials = denials if isinstance(denials, list) else []
        turns = event.get("num_turns")
        return cls(subtype=_str(event.get("subtype"), 64), is_error=bool(event.get("is_error")),
                   num_turns=turns if isinstance(turns, int) and not isinstance(turns, bool) else None,
                   total_cost_usd=_number(event.get("total_cost_usd")),
                   usage={k: v for k, v in usage.items() if isinstance(k, str) and isinstance(v, int)
                          and not isinstance(v, bool)} if isinstance(usage, dict) else {},
                   api_error_status=_status(event.get("api_error_status")),
                   terminal_reason=_str(event.get("terminal_reason")), stop_reason=_str(event.get("stop_reason")),
                   denials=[_denial(d) for d in denials[:MAX_DENIALS_KEPT]], denials_total=len(denials),
                   text=_str(event.get("result"), 100_000), structured_output=event.get("structured_output"),
                   session_id=_str(event.get("session_id")))


def _str(value: object, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _denial(d: object) -> dict[str, str | None]:
    if not isinstance(d, dict):
        return {}
    tool_input = d.get("tool_input")
    return {"tool_name": _str(d.get("tool_name")),
            "tool_input": json.dumps(tool_input)[:300] if tool_input is not None else None}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _status(value: object) -> int | None:
    """api_error_status / error_status as an int (the CLI writes 529, "529" or "None")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def classify_stream(stream: ClaudeStream, outcome) -> Parsed:
    """Ending and failure class from the CLI's own protocol; never from agent or tool text.

    Evidence, in order: our own stop (stall: no event for stall_s -> outage); the `result` event
    (`is_error`, `api_error_status`, `subtype`); the assistant `error` markers and `api_retry`
    events the CLI emits for API failures; a process that ended without any event is a CLI that
    could not run (config). The `result` text is only quoted as evidence, never matched.
    """
    r = stream.result
    cost = r.total_cost_usd if r else None
    if cost == 0 and r and sum(r.usage.values()) > 0:
        cost = None     # tokens were spent, so $0 is not a price: charge the reservation instead
    turns = r.num_turns if r else None
    failed = Parsed(ok=False, turns=turns, cost_usd=cost, session_id=stream.session_id)

    def fail(cls: str, reason: str, evidence: str) -> Parsed:
        return replace(failed, failure_class=cls, reason=reason, evidence=evidence)

    stopped = getattr(outcome, "stopped", None)
    if stopped == "stalled":
        return fail("outage", "stalled", f"no stream event for the stall limit; stopped ({_last_signs(stream)})")
    if stopped:
        return fail("failure", "stopped", str(stopped))
    if r is None:
        if getattr(outcome, "timed_out", False):
            # killed while the CLI was retrying the API (its last event an api_retry): the API is
            # the cause; killed anywhere else: the session simply ran out of time
            cls = _class_from_signs(stream) if stream.last_type == "system/api_retry" else None
            return fail(cls or "failure", "walltime", f"killed at the walltime ({_last_signs(stream)})")
        if stream.events == 0:
            err = (getattr(outcome, "stderr_tail", "") or "").strip().splitlines()
            return fail("config", "cli_failed", f"claude exited {outcome.rc} before its first event: "
                                                f"{err[-1][:300] if err else 'no message'}")
        return fail(_class_from_signs(stream) or "failure", "no_result",
                    f"claude exited {outcome.rc} without a result event ({_last_signs(stream)})")
    said = (r.text or "")[:300]
    # What sweep saw decides, not what was printed: the CLI's tools share its pid namespace and uid,
    # so a result line can be forged into its stdout (/proc/<pid>/fd/1) before the CLI is killed.
    # A CLI ended by a signal sweep did not send says nothing trustworthy; a success line from a
    # CLI that exited non-zero is not a finished session.
    rc, sig = getattr(outcome, "rc", None), getattr(outcome, "signal", None)
    if sig or (rc is not None and rc >= 128):
        return fail("failure", "cli_killed", f"claude was killed ({f'signal {sig}' if sig else f'status {rc}'}) "
                                             "by something other than sweep; its result line is not read")
    if rc != 0 and not r.is_error and r.subtype == "success":
        return fail("failure", "cli_exit", f"claude printed a success result but exited with status {rc}")
    if not r.is_error and r.subtype == "success":
        return replace(failed, ok=True, evidence=f"claude: {turns} turns, {cost} USD", output=r.structured_output)
    if r.subtype == "error_max_turns":
        return fail("failure", "max_turns", f"reached the turn cap ({turns} turns)")
    if r.subtype == "error_max_budget_usd":
        return fail("failure", "max_budget", f"reached the cost cap ({cost} USD)")
    if r.subtype == "error_max_structured_output_retries":
        return fail("failure", "no_structured_output", "the model never produced a valid structured output")
    status = r.api_error_status
    # A billing or key problem is config whatever the status (billing comes as a 400); otherwise
    # the HTTP status decides (the CLI marks a 529 `server_error`, yet it is capacity: throttle);
    # without a status, the CLI's own error markers and retry events.
    marker = _class_from_signs(stream)
    cls = "config" if marker == "config" else (class_of_status(status) if status is not None else marker)
    if cls is not None:
        where = f"api_error_status {status}" if status is not None else _last_signs(stream)
        return fail(cls, "api_error", f"claude API error ({where}): {said}")
    return fail("failure", (r.subtype or "error")[:64], f"claude ended with an error ({r.subtype}): {said}")


def _class_from_signs(stream: ClaudeStream) -> str | None:
    """A class from the CLI's own API-failure markers: the last assistant `error`, else the last
    `api_retry` event (status, else its `error` code; "unknown" with no status = no connection)."""
    for err in reversed(stream.assistant_errors):
        if err in ERROR_CLASSES and ERROR_CLASSES[err] != "failure":
            return ERROR_CLASSES[err]
    if stream.retries:
        last = stream.retries[-1]
        cls = class_of_status(_status(last.get("error_status")))
        if cls:
            return cls
        code = last.get("error")
        if code in ERROR_CLASSES:
            return ERROR_CLASSES[code]
        return "outage"     # retried with no HTTP status at all: the endpoint could not be reached
    return None


def _last_signs(stream: ClaudeStream) -> str:
    bits = []
    if stream.retries:
        last = stream.retries[-1]
        bits.append(f"{len(stream.retries)} api_retry event(s), last {last.get('error_status')}/{last.get('error')}")
    if stream.assistant_errors:
        bits.append(f"assistant error {stream.assistant_errors[-1]}")
    return "; ".join(bits) or f"{stream.events} event(s)"
