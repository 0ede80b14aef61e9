"""The session-runtime contract: a RoleSpec in, an invocation out; a finished process in, a result out.

A runtime never runs anything itself. `run_session` (sweep/runtimes/session.py) asks it for an
`Invocation`, runs that through a provider inside the role's sandbox, audits the workspace, and
asks the runtime to `parse` what happened. This keeps enforcement (sandbox, environment, walltime,
audit, schema validation) in one place that every runtime goes through, and leaves each runtime
with exactly two jobs: map the RoleSpec onto its CLI's flags, and read its CLI's output.

Each runtime declares `capabilities(options)`: what of a RoleSpec it can honour. The check is
made up front by `check_runtime_supports`, so an unsupported combination fails before any paid work.
claude-code and codex (later) fit as: build_invocation maps tools -> --tools, max_turns ->
--max-turns, output_schema -> --json-schema / --output-schema; parse reads stream-json / --json
events; classification reads their structured error events before falling back to text.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from roles import RoleSpec
from runstate.errors import ConfigError
from sweep.runtimes.facts import RuntimeFacts

STATUSES = ("ok", "failed", "timeout", "audit_failed")
FAILURE_CLASSES = ("outage", "throttle", "config", "failure")

def session_reservation(runtime: str, role_cap_usd: float | None, plan_reservation_usd: float) -> float:
    """What one session reserves before it starts.

    A paid session (an agent CLI) reserves the plan's `worker_reservation_usd` when set, else its
    role's `budget.cost_cap_usd`: never 0, or a campaign cap would not bind sessions whose cost is
    only known after the fact. It is settled with the cost the runtime parsed (or kept whole when
    the cost is unknown). 0.0 for a paid runtime means no figure exists: the caller refuses the session.
    """
    from sweep.runtimes.facts import facts_of
    if not facts_of(runtime).paid:        # never calls a paid API: only what the plan says
        return plan_reservation_usd
    if plan_reservation_usd > 0:
        return plan_reservation_usd
    if role_cap_usd is not None and role_cap_usd > 0:
        return role_cap_usd
    return 0.0


@dataclass(frozen=True)
class ResumeFrom:
    """An earlier session of the same runtime that this one continues: its conversation (the CLI's
    own transcript), not only the workspace it left. Read from that session's result with
    `resume_point`; only a runtime whose facts say `resumable` takes one."""
    session_id: str                       # the CLI's id of it (claude's session id, codex's thread id)
    state_dir: Path                       # the CLI state directory holding its transcript (kept)
    session_dir: Path                     # the earlier session's own records (provenance)


def resume_point(result: SessionResult, session_dir: Path) -> ResumeFrom | None:
    """Where the session that ended with `result` (recorded in `session_dir`) can be continued
    from, as its runtime recorded it (`report.resume`: its id and state directory), or None."""
    resume = (result.report or {}).get("resume")
    if not isinstance(resume, dict):
        return None
    sid, state = resume.get("session_id"), resume.get("state_dir")
    if not (isinstance(sid, str) and sid and isinstance(state, str) and Path(state).is_dir()):
        return None
    return ResumeFrom(session_id=sid, state_dir=Path(state), session_dir=Path(session_dir))


@dataclass
class SessionRequest:
    role: RoleSpec
    manifest_sha256: str
    runtime: str                          # a name in RUNTIMES (sweep/runtimes/facts.py)
    runtime_options: dict                 # e.g. {"argv": [...]} for command
    workspace: Path                       # the directory the agent works in (prepared by the controller)
    session_dir: Path                     # run_dir/sessions/NNNN-<role>/ (outside the workspace)
    prompt: str                           # the text given to the agent
    inputs: dict                          # role inputs, JSON-able (see docs/roles.md)
    secrets: dict[str, Any] = field(default_factory=dict)    # env var -> secret file or FromEnv, child env only
    limits: Any = None                    # sweep.execution.Limits; None = the provider's defaults
    # min(the role's cap, what the run's allocation has left for this session), set by the
    # controller: what the CLI's own cap flag gets and where the relay refuses further requests
    cost_limit_usd: float | None = None
    # set by run_session when the session is relayed (sweep/runtimes/wire): the base URL the CLI
    # must use, the sandbox endpoint that reaches the relay, the placeholder key
    wire: Any = None
    # continue that earlier session's conversation (its CLI state directory and id) with `prompt`
    # as the next message, instead of starting a new one (a runtime whose facts say `resumable`)
    resume: ResumeFrom | None = None
    # an injected fault: the session is stopped when its stream reports this many completed tool
    # calls (a runtime whose facts say `counts_tool_calls`); the result's `fault` says when
    stop_after_tool_calls: int | None = None
    # set by run_session when the provider sandboxes the session (sweep/runtimes/session.py,
    # `session_view`): host directory -> where the sandbox shows it (the workspace at /app, the
    # session directory at /session); empty without a sandbox (isolation none), where the host's
    # paths are what the session sees
    view: tuple[tuple[Path, str], ...] = ()

    def shown(self, path: Path | str) -> str:
        """`path` (a host path) as the session sees it: under the view, or the host path itself."""
        from sweep.execution import view_path
        return view_path(str(Path(path).resolve()), self.view)

    def shown_text(self, text: str) -> str:
        """A string handed to the session (an MCP server's argument, say), a host path in it
        moved under the view; not resolved, so a program's path stays as the plan wrote it."""
        from sweep.execution import view_path
        return view_path(text, self.view)


@dataclass
class SessionResult:
    status: str                           # "ok" | "failed" | "timeout" | "audit_failed"
    failure_class: str | None             # None | "outage" | "throttle" | "config" | "failure"
    evidence: str                         # short, truncated, secret-free
    turns: int | None
    cost_usd: float | None
    session_id: str | None
    structured_output: dict | None        # judges: validated against role.output_schema
    audit_violations: list[str]
    duration_s: float
    reason: str | None = None             # short machine code when not ok, e.g. "no_test_changes"
    report: dict | None = None            # what the runtime says it did (oracle: files written)
    changed_paths: list[str] = field(default_factory=list)   # in-scope changes the session made
    manifest_sha256: str = ""
    isolation: str = ""                   # what enforced the sandbox: "bwrap" | "none"
    network: str = ""                     # the network mode in force: "none" | "api" | "host"
    # the injected fault that stopped it (stop_after_tool_calls): {"after_tool_calls", "tool_calls", "at"}
    fault: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class RuntimeCapabilities:
    restricts_tools: bool                 # can confine the agent to exactly role.tools
    structured_output: bool               # can return a judge's verdict
    max_turns: bool                       # can stop the agent after budget.max_turns
    cost_cap: bool                        # can stop the agent at budget.cost_cap_usd
    needs_network: bool                   # the session must reach a model API
    roles: frozenset[str] | None = None   # role names it knows how to play; None = any
    uses_credentials: bool = True         # False: no secret and no key-family variable reaches it
    skills: bool = False                  # installs the RoleSpec's `skills` where its agent reads them
    mcp_servers: bool = False             # starts the plan's stdio MCP servers (sweep/runtimes/mcp.py)


@dataclass(frozen=True)
class SessionFiles:
    """Where a session's records live; all 0600 inside a 0700 directory."""
    session_dir: Path

    @property
    def prompt(self) -> Path: return self.session_dir / "prompt.md"
    @property
    def instructions(self) -> Path: return self.session_dir / "instructions.md"
    @property
    def output_schema(self) -> Path: return self.session_dir / "output_schema.json"
    @property
    def inputs(self) -> Path: return self.session_dir / "inputs.json"
    @property
    def argv(self) -> Path: return self.session_dir / "argv.json"
    @property
    def stdout(self) -> Path: return self.session_dir / "stdout.txt"
    @property
    def stderr(self) -> Path: return self.session_dir / "stderr.txt"
    @property
    def output(self) -> Path: return self.session_dir / "output.json"
    @property
    def result(self) -> Path: return self.session_dir / "result.json"
    @property
    def pre_session_copy(self) -> Path: return self.session_dir / "pre-session"


@dataclass
class Invocation:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)     # non-secret variables the runtime needs
    read_paths: list[Path] = field(default_factory=list)  # host paths the session must see
    network: bool | str = False          # "none" | "api" | "host" (False = none, True = api)
    endpoints: list[str] = field(default_factory=list)    # network "api": HOST:PORT[=HOST:PORT]
    # The agent CLIs (claude-code, codex) need a few more things from run_session:
    stdin_path: Path | None = None        # the prompt on stdin (one argv element is capped at 128 KiB)
    state_paths: list[Path] = field(default_factory=list)  # the CLI's own writable state, OUTSIDE the
                                          # workspace (its config dir / transcript, kept for --resume)
    sandbox_env: dict[str, str] = field(default_factory=dict)  # set only when the provider really
                                          # sandboxes the session (IS_SANDBOX=1 must never be a lie)
    unsandboxed_argv: list[str] | None = None   # the argv to use when there is no sandbox around the
                                          # session (codex then keeps its own sandbox on)
    idle_timeout_s: float | None = None   # no stdout for this long = the CLI stalled (outage)
    stdout_watch: Any = None              # called with stdout chunks; a returned reason stops the session
    # with req.stop_after_tool_calls: the completed tool calls the CLI has written to its transcript
    # since the session started (a TranscriptToolCalls; set by runtimes that count them)
    tool_calls: Callable[[], int] | None = None


@dataclass
class Parsed:
    """What a runtime read from its finished process (before sweep's own checks)."""
    ok: bool
    failure_class: str | None = None
    evidence: str = ""
    reason: str | None = None
    turns: int | None = None
    cost_usd: float | None = None
    session_id: str | None = None
    output: Any = None                    # a judge's structured output candidate, validated by sweep
    report: dict | None = None


def endpoint_of(url: str) -> str:
    """The HOST:PORT a session in network "api" must reach for a model API's base URL."""
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


class SessionRuntime(Protocol):
    name: str

    facts: RuntimeFacts        # what sweep knows of it by name (sweep/runtimes/facts.py)

    def capabilities(self, options: dict) -> RuntimeCapabilities: ...

    def check_options(self, options: dict) -> None: ...          # ConfigError on bad options

    def build_invocation(self, req: SessionRequest, files: SessionFiles, output_path: str) -> Invocation: ...

    def parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed: ...


# A session can overshoot its cost cap by about one turn (the CLIs check after a turn), never by
# orders of magnitude: a figure beyond this multiple of the cap is an anomaly, not a cost.
COST_SANITY_FACTOR = 10.0
COST_SANITY_UNCAPPED_USD = 1000.0
TURNS_SANITY_FACTOR = 10


def sane_cost(value, cap: float | None) -> tuple[float | None, str | None]:
    """(cost to record, anomaly): None with a reason unless `value` is a finite, non-negative
    number within COST_SANITY_FACTOR x the role's cap (or COST_SANITY_UNCAPPED_USD without one)."""
    import math
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None, f"reported cost {value!r} is not a finite non-negative number; charged the reservation"
    bound = COST_SANITY_UNCAPPED_USD if cap is None else max(cap * COST_SANITY_FACTOR, 0.01)
    if value > bound:
        return None, f"reported cost {value!r} USD is beyond {bound:g} USD for this role; charged the reservation"
    return float(value), None


def sane_turns(value, cap: int | None) -> tuple[int | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None, f"reported turns {value!r} is not a non-negative integer"
    if cap is not None and value > cap * TURNS_SANITY_FACTOR + 10:
        return None, f"reported turns {value} is beyond {cap * TURNS_SANITY_FACTOR + 10} for this role"
    return value, None


# ---- What the agent-CLI runtimes (claude-code, codex) share -------------------------------------

MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/\[\]-]{0,127}$")
URL_RE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:\d+)?(/[A-Za-z0-9._~/-]*)?$")
THROTTLE_STATUSES = {429, 529}          # capacity: wait and retry the role later
CONFIG_STATUSES = {401, 402, 403}       # the key or the account: the operator must act


# What users of the agent CLIs may try to hand a session, and why the plan refuses it (no dead
# settings): a session runs with sweep's command line only, no settings or hooks, and no MCP
# servers but the plan's `mcp_servers` (stdio or remote: sweep/runtimes/mcp.py); nothing from the
# PR's workspace (.claude/, .mcp.json, .codex/ are ignored: docs/agents.md).
_NO_CONFIG = ("a session gets no settings, hooks or MCP servers from the PR's .claude/, .mcp.json or "
              ".codex/; its tools come from the role's manifest (tools, network)")
NOT_GIVEN_TO_AGENTS = {
    "mcp": "MCP servers are given as mcp_servers (stdio or remote by url: docs/agents.md); " + _NO_CONFIG,
    "mcp_config": "MCP servers are given as mcp_servers (stdio or remote by url: docs/agents.md); " + _NO_CONFIG,
    "hooks": "hooks would run commands the role's tools do not allow; " + _NO_CONFIG,
    "settings": _NO_CONFIG,
    "permissions": "the role's manifest says what it may do (tools); " + _NO_CONFIG,
}


def check_cli_options(cli: str, options: dict, types: dict[str, type | tuple[type, ...]],
                      efforts: tuple[str, ...]) -> None:
    """The option checks every agent CLI shares: known keys of the right type, a model name, an
    effort level, an http(s) base_url, bounded retries and timeouts, a command name or absolute path.
    ConfigError names the field."""
    for key, value in options.items():
        if key in NOT_GIVEN_TO_AGENTS:
            raise ConfigError(f"{cli} option {key!r} is not supported: {NOT_GIVEN_TO_AGENTS[key]}",
                              field=f"runtime_options.{key}", hint="remove it from the plan")
        if key not in types:
            raise ConfigError(f"unknown {cli} option {key!r}; known: {', '.join(sorted(types))}",
                              field=f"runtime_options.{key}")
        if isinstance(value, bool) or not isinstance(value, types[key]):
            raise ConfigError(f"{cli} option {key} has the wrong type ({type(value).__name__})",
                              field=f"runtime_options.{key}")
    if "model" in options and not MODEL_RE.match(options["model"]):
        raise ConfigError(f"model {options['model']!r} is not a model name", field="runtime_options.model")
    if "effort" in options and options["effort"] not in efforts:
        raise ConfigError(f"effort must be one of {', '.join(efforts)}", field="runtime_options.effort")
    if "base_url" in options and not URL_RE.match(options["base_url"]):
        raise ConfigError(f"base_url {options['base_url']!r} is not an http(s) URL", field="runtime_options.base_url")
    if not 0 <= options.get("max_retries", 0) <= 10:
        raise ConfigError("max_retries must be between 0 and 10 (each retry of a 529 can wait half a minute)",
                          field="runtime_options.max_retries")
    for key in ("request_timeout_s", "stall_s"):
        if key in options and not 1 <= options[key] <= 24 * 3600:
            raise ConfigError(f"{key} must be between 1 and 86400 seconds", field=f"runtime_options.{key}")
    binary = options.get("binary")
    if binary is not None and (not binary or ("/" in binary and not os.path.isabs(binary))):
        raise ConfigError("binary must be a command name or an absolute path", field="runtime_options.binary")


def check_wire_options(options: dict) -> None:
    """`prices` (sweep/runtimes/wire/prices.py) and `ca_file` (the CA the relay checks the model
    endpoint's certificate against, instead of the system bundle): ConfigError naming the field."""
    from sweep.runtimes.wire.prices import check_prices
    if "prices" in options:
        check_prices(options["prices"])
    ca_file = options.get("ca_file")
    if ca_file is not None and not (os.path.isabs(ca_file) and os.path.isfile(ca_file)):
        raise ConfigError(f"ca_file {ca_file!r} is not an absolute path to a file (PEM certificates)",
                          field="runtime_options.ca_file")


def session_cost_limit(role_cap: float | None, allocation_limit: float | None) -> float | None:
    """What one session may spend: min(the role's cap, what the controller says the run's allocation
    has left for it), or whichever is known."""
    known = [x for x in (role_cap, allocation_limit) if x is not None]
    return min(known) if known else None


STALL_SHARE_OF_WALLTIME = 0.5


def stall_limit(options: dict, defaults: dict, walltime_s: float) -> float:
    """How long a silent CLI stream may last before the session is stopped as an outage (a park,
    not an attempt). The plan's `stall_s` as given (it must stay above the longest tool call, which
    is silent on the stream); the default is capped at half the role's walltime, so a silent endpoint parks the role before
    the walltime kill would spend an attempt (the reviewer's 900 s walltime equals claude's 900 s)."""
    if "stall_s" in options:
        return float(options["stall_s"])
    return float(min(defaults["stall_s"], walltime_s * STALL_SHARE_OF_WALLTIME))


def find_binary(binary: str) -> str | None:
    """The absolute, symlink-resolved path of an agent CLI, or None."""
    path = binary if os.path.isabs(binary) else shutil.which(binary)
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        return None
    return os.path.realpath(path)


@dataclass
class JsonLines:
    """One JSON object per line, as the agent CLIs print their events; what is not one is counted."""
    events: int = 0
    bad_lines: int = 0

    def event_of(self, raw: bytes | str) -> dict[str, Any] | None:
        """The line's event, or None (blank, not JSON, or not an object: the last two counted)."""
        line = (raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw).strip()
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self.bad_lines += 1
            return None
        self.events += 1
        return event


def feed_stdout(files: SessionFiles, feed_line: Callable[[bytes], None]) -> None:
    """Replay the session's kept stdout into a stream parser, one line at a time (none if missing)."""
    try:
        with open(files.stdout, "rb") as fh:
            for line in fh:
                feed_line(line)
    except OSError:
        pass


class TranscriptToolCalls:
    """The completed tool calls an agent CLI has written to its own transcript (JSON lines), counted
    from `baseline()` on: what a resumed session continues from holds exactly these, so an injected
    fault stops a session once its N-th is there (claude writes its transcript a little behind its
    stream, and the stream reaches a watch later still: the redactor holds back its tail). `find()`
    names the transcript files, `count(entry)` the tool calls one entry completes. The files are
    the agent's to write: only regular files are read (never a link, a FIFO or a device), at most
    READ_BYTES per call, and a line that is not a JSON object counts nothing. Thread-safe."""

    READ_BYTES = 1 << 20

    def __init__(self, find: Callable[[], list[Path]], count: Callable[[dict], int]) -> None:
        import threading
        self.find, self.count = find, count
        self._lock = threading.Lock()
        self._read: dict[Path, tuple[int, bytes]] = {}     # path -> (offset, an unfinished line)
        self._total = 0
        self._base = 0

    def baseline(self) -> None:
        """What the transcript holds before the session (a resumed one's earlier calls): not counted."""
        self._base = self._scan()

    def __call__(self) -> int:
        return self._scan() - self._base

    def _scan(self) -> int:
        import stat as stat_mod
        with self._lock:
            for path in self.find():
                offset, partial = self._read.get(path, (0, b""))
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
                except OSError:
                    continue
                try:
                    if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
                        continue
                    os.lseek(fd, offset, os.SEEK_SET)
                    data = os.read(fd, self.READ_BYTES)
                finally:
                    os.close(fd)
                *lines, partial = (partial + data).split(b"\n")
                self._read[path] = (offset + len(data), partial[-self.READ_BYTES:])
                for line in lines:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(entry, dict):
                        self._total += self.count(entry)
            return self._total


def class_of_status(status: int | None) -> str | None:
    """The failure class of an API's HTTP status (None: no status)."""
    if status is None:
        return None
    if status in THROTTLE_STATUSES:
        return "throttle"
    if status in CONFIG_STATUSES:
        return "config"
    if 500 <= status <= 599:
        return "outage"
    return "failure"
