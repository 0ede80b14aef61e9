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
128 KiB). CODEX_HOME is per session, in the session directory (kept: `codex exec resume ID`).
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
                                 JsonLines, check_cli_options, class_of_status, endpoint_of, feed_stdout, find_binary)

PINNED_VERSION = "0.171.0"
SUPPORTED_RANGE = ((0, 171, 0), (0, 172, 0))
EFFORTS = ("minimal", "low", "medium", "high", "xhigh")
HOME_NAME = "codex-home"
DEFAULTS = {"max_retries": 1, "stall_s": 600.0, "binary": "codex"}
_OPTION_TYPES: dict[str, type | tuple[type, ...]] = {"model": str, "effort": str, "base_url": str, "max_retries": int, "stall_s": (int, float),
                 "binary": str, "prices": dict}
PRICE_KEYS = ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok")
STEP_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search", "agent_message"}
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


def cost_of(usage: dict, prices: dict | None) -> float | None:
    if not prices:
        return None
    cached = usage.get("cached_input_tokens", 0) or 0
    fresh = max(0, (usage.get("input_tokens", 0) or 0) - cached)
    out = (usage.get("output_tokens", 0) or 0)
    return (fresh * prices.get("input_per_mtok", 0) + cached * prices.get("cached_input_per_mtok",
            prices.get("input_per_mtok", 0)) + out * prices.get("output_per_mtok", 0)) / 1e6


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


def resume_argv(exe: str, opts: dict, thread_id: str) -> list[str]:
    """`codex exec resume`: the kept thread continued with the same endpoint and model, the next
    prompt on stdin. It takes no -C (run it in the workspace) and no -s: outside sweep's sandbox
    codex's own stays on (workspace-write)."""
    return [exe, "exec", "resume", "--json", "--skip-git-repo-check", *model_flags(opts),
            "-c", 'sandbox_mode="workspace-write"', thread_id, "-"]


class CodexRuntime:
    name = "codex"

    def capabilities(self, options: dict) -> RuntimeCapabilities:
        # no tool list; turns and cost are enforced by sweep (see the module docstring)
        return RuntimeCapabilities(restricts_tools=False, structured_output=True, max_turns=True,
                                   cost_cap=True, needs_network=True)

    def check_options(self, options: dict) -> None:
        check_cli_options("codex", options, _OPTION_TYPES, EFFORTS)
        prices = options.get("prices")
        if prices is not None:
            bad = [k for k, v in prices.items() if k not in PRICE_KEYS or isinstance(v, bool)
                   or not isinstance(v, (int, float)) or not 0 <= v < 10_000]
            if bad or "input_per_mtok" not in prices or "output_per_mtok" not in prices:
                raise ConfigError("prices needs input_per_mtok and output_per_mtok (and optionally "
                                  "cached_input_per_mtok), USD per million tokens, each 0-10000",
                                  field="runtime_options.prices")

    def build_invocation(self, req: SessionRequest, files: SessionFiles, output_path: str) -> Invocation:
        opts = {**DEFAULTS, **(req.runtime_options or {})}
        role = req.role
        exe = native_binary(opts["binary"])
        if exe is None:
            raise ConfigError(f"the codex CLI ({opts['binary']!r}) or its native binary is not installed",
                              field="runtime_options.binary", hint="npm install -g @openai/codex@" + PINNED_VERSION)
        home = files.session_dir / HOME_NAME
        workspace = str(Path(req.workspace).resolve())
        common = ["exec", "--json", "--skip-git-repo-check", "-C", workspace, "-o", output_path,
                  *model_flags(opts)]
        read_paths = [package_root(exe)]
        if role.output_schema is not None:
            strict = files.session_dir / "output_schema.strict.json"
            strict.write_text(json.dumps(strict_schema(role.output_schema), indent=2))
            os.chmod(strict, 0o600)
            common += ["--output-schema", str(strict)]
            read_paths.append(strict)
        # codex has no flag for standing instructions (and AGENTS.md would live in the untrusted
        # workspace): the role's instructions head the prompt it reads on stdin
        stdin_file = files.session_dir / "codex-prompt.md"
        stdin_file.write_bytes(b"# Your role\n\n" + role.instructions.encode() + b"\n\n# Your task\n\n"
                               + files.prompt.read_bytes())
        os.chmod(stdin_file, 0o600)
        own_sandbox = "read-only" if role.read_only else "workspace-write"
        watch = CodexWatch(role.budget.max_turns, role.budget.cost_cap_usd, opts.get("prices"))
        return Invocation(argv=[exe, *common, "-s", "danger-full-access", "-"], env={"CODEX_HOME": str(home)},
                          unsandboxed_argv=[exe, *common, "-s", own_sandbox, "-"], read_paths=read_paths,
                          network="api", endpoints=[endpoint_of(opts.get("base_url") or "https://api.openai.com")],
                          stdin_path=stdin_file, state_paths=[home],
                          idle_timeout_s=float(opts["stall_s"]), stdout_watch=watch.feed)

    def parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed:
        stream = CodexStream(prices=(req.runtime_options or {}).get("prices"))
        feed_stdout(files, stream.feed_line)
        output = None
        if req.role.output_schema is not None:
            try:
                output = json.loads(files.output.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                output = None
        parsed = classify_codex(stream, outcome, output)
        parsed.report = {**stream.provenance(), "codex_home": str(files.session_dir / HOME_NAME)}
        if stream.thread_id:
            opts = {**DEFAULTS, **(req.runtime_options or {})}
            exe = native_binary(opts["binary"]) or opts["binary"]
            parsed.report["resume"] = {"thread_id": stream.thread_id, "codex_home": parsed.report["codex_home"],
                                       "cwd": str(Path(req.workspace).resolve()),
                                       "argv": resume_argv(exe, opts, stream.thread_id),
                                       "how": "CODEX_HOME=<codex_home> <argv> in <cwd>, the next prompt on stdin"}
        return parsed


@dataclass
class CodexStream(JsonLines):
    prices: dict | None = None
    thread_id: str | None = None
    steps: int = 0
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
        return cost_of(self.usage, self.prices)

    def provenance(self) -> dict:
        return {"runtime": "codex", "thread_id": self.thread_id, "steps": self.steps,
                "turns_completed": self.turns_completed, "usage": dict(self.usage), "cost_usd": self.cost_usd,
                "priced": self.prices is not None, "failures": self.failures[-5:], "reconnects": self.reconnects,
                "final_text": self.final_text, "events": self.events, "bad_lines": self.bad_lines}


def _obj(value: object) -> dict[str, object]:
    """A JSON object read from the stream, or {} for anything else (a forged line is possible)."""
    return value if isinstance(value, dict) else {}


class CodexWatch:
    """Live enforcement on the event stream: stop at the turn cap, the cost cap, or when codex keeps
    reconnecting to an endpoint it cannot reach (it never gives up by itself)."""

    def __init__(self, max_turns: int | None, cost_cap: float | None, prices: dict | None) -> None:
        self.stream = CodexStream(prices=prices)
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
