"""codex: OpenAI's `codex exec --json`, one role session per process, run as the NATIVE binary.

    [defaults.runtimes]
    solver = "codex"
    [defaults.runtime_options.solver]
    model = "gpt-5"
    effort = "medium"                    # model_reasoning_effort
    base_url = "https://api.openai.com/v1"   # a Responses API endpoint (optional)
    max_retries = 1                      # request_max_retries and stream_max_retries
    stall_s = 600                        # no event for this long -> stopped, an outage
    binary = "codex"                     # the npm launcher is resolved to its native binary
    [defaults.runtime_options.solver.mcp_servers.notes]   # stdio MCP servers (sweep/runtimes/mcp.py)
    command = ["python3", "/opt/mcp/notes.py"]
    tools = ["search"]                   # codex's enabled_tools: the server's others are not offered
    prices = { input_per_mtok = 1.25, cached_input_per_mtok = 0.125, output_per_mtok = 10.0 }

What codex cannot do itself, sweep does, and the capability check says so:
- turns: codex has no turn cap. sweep counts the agent's steps (each completed command, file
  change, tool call or message item) on the live event stream and stops the session at the
  role's `max_turns` (reason `max_turns`).
- cost: codex reports tokens, not money. sweep prices `turn.completed` usage with the plan's
  `prices` (USD per million tokens) and stops the session when it passes `cost_cap_usd`. Usage
  arrives per turn, so the cap binds at turn ends; without `prices` the cost is unknown and
  the session is charged its whole reservation.
- tools: codex has a shell and cannot be limited to a tool list, so it only plays roles holding
  an unrestricted shell (`Bash`); a read-only judge needs claude-code.
- sandbox: codex's own sandbox is bubblewrap and cannot start inside ours, so it is turned off
  (`-s danger-full-access`) ONLY when sweep's sandbox really encloses the session; otherwise
  codex keeps its own (`workspace-write`).
The prompt goes on stdin (`codex exec -`: a file, so it ends; one argv element is capped at
128 KiB). CODEX_HOME is per session, in the session directory (kept: `codex exec resume ID`); its
config.toml names the workspace untrusted, so a PR's `.codex/config.toml` is never loaded.
Classification reads `turn.failed` / `error` events only (their HTTP status), never agent text.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from runstate.errors import ConfigError
from sweep.runtimes.base import (Invocation, Parsed, RuntimeCapabilities, SessionFiles, SessionRequest,
                                 JsonLines, TranscriptToolCalls, check_cli_options, check_wire_options, class_of_status, endpoint_of,
                                 feed_stdout, find_binary, session_cost_limit, stall_limit)
from sweep.runtimes.facts import AgentCli, RuntimeFacts
from sweep.runtimes.mcp import check_mcp_servers, codex_mcp_tables, with_mcp_endpoints

PACKAGE = "@openai/codex"
PINNED_VERSION = "0.171.0"
DEFAULT_ENDPOINT = "https://api.openai.com/v1"
SUPPORTED_RANGE = ((0, 171, 0), (0, 172, 0))
EFFORTS = ("minimal", "low", "medium", "high", "xhigh")
HOME_NAME = "codex-home"
DEFAULTS = {"max_retries": 1, "stall_s": 600.0, "binary": "codex"}
_OPTION_TYPES: dict[str, type | tuple[type, ...]] = {"model": str, "effort": str, "base_url": str, "max_retries": int, "stall_s": (int, float),
                 "binary": str, "prices": dict, "ca_file": str, "mcp_servers": dict}
STEP_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search", "agent_message"}
TOOL_ITEMS = STEP_ITEMS - {"agent_message"}
_STATUS_RE = re.compile(r"\b(?:status:?|status code:?)\s*(\d{3})\b|\b(\d{3}) (?:Too Many Requests|Unauthorized|"
                        r"Forbidden|Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout)\b")
RECONNECTS_BEFORE_OUTAGE = 3


def native_binary(binary: str) -> str | None:
    """The native codex executable: the npm launcher (codex.js) is resolved to the musl binary it
    wraps (`-o /dev/fd/N` fails through the launcher: it does not pass descriptors on)."""
    exe = find_binary(binary)
    if exe is None:
        return None
    if exe.endswith(".js"):
        pkg = Path(exe).resolve().parent.parent
        hits = sorted(pkg.glob("node_modules/@openai/codex-linux-*/vendor/*/bin/codex"))
        hits += sorted(pkg.glob("vendor/*/codex/codex"))
        for hit in hits:
            if os.access(hit, os.X_OK):
                return str(hit.resolve())
        return None
    return exe


def package_root(exe: str) -> Path:
    path = Path(exe)
    for parent in path.parents:
        if parent.name == "codex" and parent.parent.name == "@openai":
            return parent
    return path.parent


def cli_version(exe: str) -> str | None:
    """The version of the npm package the native binary belongs to (codex's events carry none)."""
    try:
        data = json.loads((package_root(exe) / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return version[:40] if isinstance(version, str) else None


def strict_schema(schema: dict) -> dict:
    """The Responses API's strict mode needs every object closed and every property required:
    optional properties become nullable. sweep still validates the result against the original."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("minItems", "maxItems", "minLength", "maxLength",
                                                        "minimum", "maximum")}
    if schema.get("type") == "object":
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        new_props = {}
        for name, sub in props.items():
            sub = strict_schema(sub)
            if name not in required and isinstance(sub.get("type"), str):
                sub = {**sub, "type": [sub["type"], "null"]}
            new_props[name] = sub
        out["properties"] = new_props
        out["required"] = list(props)
        out["additionalProperties"] = False
    if "items" in schema:
        out["items"] = strict_schema(schema["items"])
    return out


def cost_of(usage: dict, prices: dict | None, model: str | None = None) -> float | None:
    """codex's own usage events priced (its self-report; a relayed session is charged what the
    relay metered). None without a price for the model."""
    from sweep.runtimes.wire.prices import cost_usd, price_for
    price = price_for(model, prices) if prices or model else None
    if price is None:
        return None
    cached = usage.get("cached_input_tokens", 0) or 0
    fresh = max(0, (usage.get("input_tokens", 0) or 0) - cached)
    return cost_usd(price, fresh_input=fresh, cached_input=cached, cache_write=0, output=usage.get("output_tokens", 0) or 0)


def model_flags(opts: dict) -> list[str]:
    """The endpoint, model and effort flags, the same for a session and for its resumption."""
    flags: list[str] = []
    if opts.get("base_url"):
        retries = int(opts["max_retries"])
        flags += ["-c", f'model_providers.sweep={{name="sweep",base_url="{opts["base_url"]}",wire_api="responses",'
                        f'env_key="OPENAI_API_KEY",request_max_retries={retries},stream_max_retries={retries}}}',
                  "-c", "model_provider=sweep"]
    if opts.get("model"):
        flags += ["-m", opts["model"]]
    if opts.get("effort"):
        flags += ["-c", f'model_reasoning_effort="{opts["effort"]}"']
    return flags


def distrust_workspace(home: Path, workspace: Path, extra: str = "") -> None:
    """The session's CODEX_HOME/config.toml names the workspace and every directory above it
    explicitly untrusted: codex then loads no project `.codex/config.toml` from the PR (its MCP
    servers, `notify` command, instructions, provider), and `--trust` could not change that.
    codex's default for a directory it has never seen is the same; this makes it hold whatever
    the default becomes, and for whichever ancestor codex takes as the project's root."""
    from runstate.files import make_private_dir, write_atomic
    make_private_dir(home)
    lines = [f"[projects.{json.dumps(str(p))}]\ntrust_level = \"untrusted\"\n" for p in (workspace, *workspace.parents)]
    write_atomic(home / "config.toml", ("\n".join(lines) + ("\n" + extra if extra else "")).encode())


def resume_argv(exe: str, opts: dict, thread_id: str, sandboxed: bool = False) -> list[str]:
    """`codex exec resume`: the kept thread continued with the same endpoint and model, the next
    prompt on stdin. It takes no -C (run it in the workspace) and no -s: outside sweep's sandbox
    codex's own stays on (workspace-write). A sandboxed session's thread names the paths of its
    fixed view (its rollout under /session/codex-home): it resumes in the same view, in sweep's
    sandbox, where codex's own is off as in the session."""
    mode = "danger-full-access" if sandboxed else "workspace-write"
    return [exe, "exec", "resume", "--json", "--skip-git-repo-check", *model_flags(opts),
            "-c", f'sandbox_mode="{mode}"', thread_id, "-"]


def rollout_tool_calls(home: Path) -> TranscriptToolCalls:
    """The tool outputs codex has written to its thread's rollout (<CODEX_HOME>/sessions/**/
    rollout-*.jsonl: `response_item` entries whose payload is a function or custom tool call's output)."""
    def count(entry: dict) -> int:
        payload = entry.get("payload")
        return int(entry.get("type") == "response_item" and isinstance(payload, dict)
                   and payload.get("type") in ("function_call_output", "custom_tool_call_output"))
    counter = TranscriptToolCalls(lambda: sorted((home / "sessions").rglob("rollout-*.jsonl")), count)
    counter.baseline()
    return counter


def home_of(req: SessionRequest, files: SessionFiles) -> Path:
    """The session's CODEX_HOME: its own, or the resumed session's (which holds the thread)."""
    return req.resume.state_dir if req.resume is not None else files.session_dir / HOME_NAME


class CodexRuntime:
    name = "codex"
    # the Responses API: relayed, and its cost metered at the wire (sweep/runtimes/wire)
    facts = RuntimeFacts(paid=True, host_only=False, protocol_classified=True, key_families=("openai",),
                         default_endpoint=DEFAULT_ENDPOINT, cost="metered", wire_protocol="openai",
                         cli=AgentCli(PACKAGE, PINNED_VERSION, SUPPORTED_RANGE, str(DEFAULTS["binary"]),
                                      find=native_binary, install_root=package_root),
                         resumable=True, counts_tool_calls=True)

    def capabilities(self, options: dict) -> RuntimeCapabilities:
        # no tool list; turns and cost are enforced by sweep (see the module docstring)
        return RuntimeCapabilities(restricts_tools=False, structured_output=True, max_turns=True,
                                   cost_cap=True, needs_network=True, mcp_servers=True)

    def check_options(self, options: dict) -> None:
        check_cli_options("codex", {k: v for k, v in options.items() if k != "mcp_servers"}, _OPTION_TYPES, EFFORTS)
        check_wire_options(options)
        if "mcp_servers" in options:
            check_mcp_servers(options["mcp_servers"], remote_types=("http",))   # codex: streamable HTTP only

    def build_invocation(self, req: SessionRequest, files: SessionFiles, output_path: str) -> Invocation:
        opts = {**DEFAULTS, **(req.runtime_options or {})}
        role = req.role
        exe = native_binary(opts["binary"])
        if exe is None:
            raise ConfigError(f"the codex CLI ({opts['binary']!r}) or its native binary is not installed",
                              field="runtime_options.binary", hint=f"npm install -g {PACKAGE}@{PINNED_VERSION}")
        home = home_of(req, files)
        # the workspace and CODEX_HOME as the session sees them (the fixed view when sandboxed)
        workspace = req.shown(req.workspace)
        env = {"CODEX_HOME": req.shown(home)}
        # the plan's stdio MCP servers (sweep/runtimes/mcp.py): codex's children, in its sandbox
        mcp_tables, mcp_reads = codex_mcp_tables(opts["mcp_servers"], req.shown_text) if opts.get("mcp_servers") else ("", [])
        distrust_workspace(home, Path(workspace), mcp_tables)
        if req.wire is not None:
            # the relay holds the key and meters the wire; the custom provider's env_key must be set
            wire_opts = {**opts, "base_url": req.wire.base_url}
            env["OPENAI_API_KEY"] = req.wire.placeholder
            endpoints = [req.wire.endpoint] if req.wire.endpoint else []
        else:
            wire_opts = opts
            endpoints = [endpoint_of(opts.get("base_url") or DEFAULT_ENDPOINT)]
        # `exec resume` takes no -C (it runs in the workspace, as the thread did) and no -s
        where = [] if req.resume is not None else ["-C", workspace]
        flags = ["--json", "--skip-git-repo-check", *where, "-o", output_path, *model_flags(wire_opts)]
        read_paths = [package_root(exe), *mcp_reads]
        if role.output_schema is not None:
            strict = files.session_dir / "output_schema.strict.json"
            strict.write_text(json.dumps(strict_schema(role.output_schema), indent=2))
            os.chmod(strict, 0o600)
            flags += ["--output-schema", req.shown(strict)]
            read_paths.append(strict)
        own_sandbox = "read-only" if role.read_only else "workspace-write"
        if req.resume is not None:
            # `exec resume` goes on in the kept thread (its CODEX_HOME, the same workspace), the
            # sandbox mode a config value; the role's instructions are already in the thread: the
            # prompt is the next message
            stdin_file = files.prompt
            argv = [exe, "exec", "resume", *flags, "-c", 'sandbox_mode="danger-full-access"', req.resume.session_id, "-"]
            unsandboxed = [exe, "exec", "resume", *flags, "-c", f'sandbox_mode="{own_sandbox}"', req.resume.session_id, "-"]
        else:
            # codex has no flag for standing instructions (and AGENTS.md would live in the untrusted
            # workspace): the role's instructions head the prompt it reads on stdin
            stdin_file = files.session_dir / "codex-prompt.md"
            stdin_file.write_bytes(b"# Your role\n\n" + role.instructions.encode() + b"\n\n# Your task\n\n"
                                   + files.prompt.read_bytes())
            os.chmod(stdin_file, 0o600)
            argv = [exe, "exec", *flags, "-s", "danger-full-access", "-"]
            unsandboxed = [exe, "exec", *flags, "-s", own_sandbox, "-"]
        # a relayed session's cost is bound at the wire (the relay refuses past the limit); codex's
        # own events only price it when it is not relayed
        cap = None if req.wire is not None else session_cost_limit(role.budget.cost_cap_usd, req.cost_limit_usd)
        watch = CodexWatch(role.budget.max_turns, cap, opts.get("prices"), opts.get("model"))
        return Invocation(argv=argv, env=env, unsandboxed_argv=unsandboxed, read_paths=read_paths,
                          network="api", endpoints=with_mcp_endpoints(endpoints, opts),
                          stdin_path=stdin_file, state_paths=[home],
                          idle_timeout_s=stall_limit(req.runtime_options or {}, DEFAULTS, role.budget.walltime_s),
                          stdout_watch=watch.feed,
                          tool_calls=rollout_tool_calls(home) if req.stop_after_tool_calls is not None else None)

    def parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed:
        options = req.runtime_options or {}
        stream = CodexStream(prices=options.get("prices"), model=options.get("model"))
        feed_stdout(files, stream.feed_line)
        output = None
        if req.role.output_schema is not None:
            try:
                output = json.loads(files.output.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                output = None
        parsed = classify_codex(stream, outcome, output)
        opts = {**DEFAULTS, **(req.runtime_options or {})}
        exe = native_binary(opts["binary"]) or opts["binary"]
        parsed.report = {**stream.provenance(), "codex_home": str(home_of(req, files)),
                         "cli_version": cli_version(exe), "model": opts.get("model")}
        if req.resume is not None:
            parsed.report["resumed_from"] = {"session_id": req.resume.session_id,
                                             "session_dir": str(req.resume.session_dir)}
        if stream.thread_id:
            parsed.report["resume"] = {"thread_id": stream.thread_id, "session_id": stream.thread_id,
                                       "codex_home": parsed.report["codex_home"],
                                       "state_dir": parsed.report["codex_home"],
                                       "cwd": req.shown(req.workspace), "workspace": str(Path(req.workspace).resolve()),
                                       "sandbox_codex_home": req.shown(home_of(req, files)),
                                       "argv": resume_argv(exe, opts, stream.thread_id, sandboxed=bool(req.view)),
                                       "how": "CODEX_HOME=<codex_home> <argv> in <cwd>, the next prompt on stdin; "
                                              "in a sandbox that shows <workspace> at <cwd> and <codex_home> at "
                                              "<sandbox_codex_home> when they differ"}
        return parsed


@dataclass
class CodexStream(JsonLines):
    prices: dict | None = None
    model: str | None = None              # the model asked for (codex's events do not name it)
    thread_id: str | None = None
    steps: int = 0
    tool_calls: int = 0                   # completed tool items (a command, a file change, an MCP call)
    turns_completed: int = 0
    usage: dict = field(default_factory=lambda: {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0})
    failures: list[str] = field(default_factory=list)   # turn.failed / error messages (the CLI's own)
    reconnects: int = 0
    final_text: str | None = None

    def feed_line(self, raw: bytes | str) -> None:
        event = self.event_of(raw)
        if event is None:
            return
        kind = event.get("type")
        if kind == "thread.started":
            thread_id = event.get("thread_id")
            if isinstance(thread_id, str):
                self.thread_id = thread_id[:100]
        elif kind == "item.completed":
            item = _obj(event.get("item"))
            item_type, item_text = item.get("type"), item.get("text")
            if isinstance(item_type, str) and item_type in STEP_ITEMS:
                self.steps += 1
                self.tool_calls += item_type in TOOL_ITEMS
            if item_type == "agent_message" and isinstance(item_text, str):
                self.final_text = item_text[:2000]
        elif kind == "turn.completed":
            self.turns_completed += 1
            usage = _obj(event.get("usage"))
            for key in self.usage:
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    self.usage[key] += value
        elif kind in ("turn.failed", "error"):
            message = _obj(event.get("error") if kind == "turn.failed" else event).get("message")
            if isinstance(message, str):
                if message.startswith("Reconnecting"):
                    self.reconnects += 1
                else:
                    self.failures.append(message[:500])

    @property
    def cost_usd(self) -> float | None:
        return cost_of(self.usage, self.prices, self.model)

    def provenance(self) -> dict:
        return {"runtime": "codex", "thread_id": self.thread_id, "steps": self.steps, "tool_calls": self.tool_calls,
                "turns_completed": self.turns_completed, "usage": dict(self.usage), "cost_usd": self.cost_usd,
                "priced": self.prices is not None, "failures": self.failures[-5:], "reconnects": self.reconnects,
                "final_text": self.final_text, "events": self.events, "bad_lines": self.bad_lines}


def _obj(value: object) -> dict[str, object]:
    """A JSON object read from the stream, or {} for anything else (a forged line is possible)."""
    return value if isinstance(value, dict) else {}


class CodexWatch:
    """Live enforcement on the event stream: stop at the turn cap, the cost cap, or when codex keeps
    reconnecting to an endpoint it cannot reach (it never gives up by itself)."""

    def __init__(self, max_turns: int | None, cost_cap: float | None, prices: dict | None,
                 model: str | None = None) -> None:
        self.stream = CodexStream(prices=prices, model=model)
        self.max_turns = max_turns
        self.cost_cap = cost_cap
        self._buffer = b""

    def feed(self, chunk: bytes) -> str | None:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self.stream.feed_line(line)
        s = self.stream
        if self.max_turns is not None and s.steps > self.max_turns:
            return f"max_turns: {s.steps} agent steps, cap {self.max_turns}"
        if self.cost_cap is not None and s.cost_usd is not None and s.cost_usd > self.cost_cap:
            return f"max_budget: {s.cost_usd:.4f} USD priced from tokens, cap {self.cost_cap:g}"
        if s.reconnects >= RECONNECTS_BEFORE_OUTAGE:
            return f"unreachable: codex reconnected {s.reconnects} times"
        return None


def status_in(message: str) -> int | None:
    m = _STATUS_RE.search(message)
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def classify_codex(stream: CodexStream, outcome, output) -> Parsed:
    failed = Parsed(ok=False, turns=stream.steps, cost_usd=stream.cost_usd, session_id=stream.thread_id)

    def fail(cls: str, reason: str, evidence: str) -> Parsed:
        return replace(failed, failure_class=cls, reason=reason, evidence=evidence)

    stopped: str = getattr(outcome, "stopped", None) or ""
    if stopped == "stalled" or stopped.startswith("unreachable"):
        return fail("outage", "stalled" if stopped == "stalled" else "unreachable", f"codex: {stopped}")
    if stopped.startswith("max_turns") or stopped.startswith("max_budget"):
        return fail("failure", stopped.split(":")[0], f"codex {stopped}")
    if stopped:
        return fail("failure", "stopped", stopped)
    if getattr(outcome, "timed_out", False):
        return fail("failure", "walltime", "killed at the walltime")
    rc, sig = getattr(outcome, "rc", None), getattr(outcome, "signal", None)
    if sig or (rc is not None and rc >= 128):
        # killed by something other than sweep (its own tools share its uid): the events it
        # printed, or that were written into its stdout, are not read for a class
        return fail("failure", "cli_killed", f"codex was killed ({f'signal {sig}' if sig else f'status {rc}'}) "
                                             "by something other than sweep")
    if stream.failures:
        message = stream.failures[-1]
        status = status_in(message)
        lowered = message.lower()
        if "quota" in lowered or "billing" in lowered:
            cls = "config"
        elif status is not None:
            cls = class_of_status(status) or "failure"
        elif "high demand" in lowered or "stream disconnected" in lowered:
            cls = "outage"
        else:
            cls = "failure"
        return fail(cls, "api_error" if cls != "failure" else "codex_error",
                    f"codex turn failed (status {status}): {message[:300]}")
    if stream.events == 0:
        err = (getattr(outcome, "stderr_tail", "") or "").strip().splitlines()
        return fail("config", "cli_failed",
                    f"codex exited {outcome.rc} before its first event: {err[-1][:300] if err else ''}")
    if outcome.rc != 0 or stream.turns_completed == 0:
        return fail("failure", "no_result", f"codex exited {outcome.rc} after {stream.turns_completed} completed turn(s)")
    return replace(failed, ok=True, evidence=f"codex: {stream.steps} steps", output=output)
