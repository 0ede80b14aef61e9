"""run_session: one role session, from RoleSpec to audited, recorded result.

Order of work, and why:
1. Up-front checks, before anything is written or paid for: the runtime exists and can honour the
   spec, its options are valid, the manifest on disk still has the recorded sha256, the session
   directory is outside the workspace (its transcript would otherwise count as a change), every
   secret is one the role's key family may see and its file is readable.
2. Records: prompt.md, instructions.md, output_schema.json (judges), inputs.json and argv.json, all
   0600 in a 0700 directory, none holding a secret value. argv.json is written before launch so a
   crash mid-session still leaves what was run.
3. Snapshot the workspace and copy every out-of-scope path aside (the pre-session copy).
4. Run through the provider, in a fixed view when it sandboxes the session (`session_view`: the
   workspace at /app, the session's files at /session, a runtime's input paths at /inputs/<name>;
   inputs.json, the prompt and the runtime's argv and environment name those paths, never the
   host's): only the scope's bind roots writable (nothing for read-only roles),
   the key family's variables and the secrets in the environment, the walltime from the budget.
   Structured output comes back through an inherited descriptor, not a writable mount.
5. Audit: diff the workspace; out-of-scope changes fail the session and are reverted from the
   pre-session copy (so they never reach a bundle), whatever happened before. The copy is deleted.
6. Parse, classify, validate a judge's output against its schema, write result.json atomically.
A crash between 3 and 5 leaves `pre-session/` in the session directory (and possibly unreverted
changes in the workspace): a controller resuming must not reuse that workspace without a new audit.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from roles import bind_roots, scope_matches, validate_instance
from roles.manifests import manifest_sha256
from runstate.errors import ConfigError
from runstate.files import make_private_dir, write_atomic
from sweep.providers import audit
from sweep.execution import DEFAULT_LIMITS, ExecResult, ExecSpec, FromEnv, read_secret, view_path
from sweep.redact import Redactor
from sweep.tree import walk_tree
from sweep.runtimes.base import Invocation, Parsed, SessionFiles, SessionRequest, SessionResult, sane_cost, sane_turns
from sweep.credentials import passthrough_for
from sweep.runtimes.classify import classify_text
from sweep.runtimes.facts import facts_of
from sweep.models.evidence import SessionLaunch, SessionRecord
from sweep.runtimes.wire import open_wire, refuse_key_in_sandbox

EVIDENCE_LIMIT = 500
MAX_LISTED_PATHS = 1000
# Where a sandboxed session sees its paths (`session_view`), whatever the campaign's path: the
# workspace at the task container's WORKDIR (a trial's repository is there too), the session's
# own files (prompt, instructions, inputs, the CLIs' config dirs) and the inputs a runtime names.
SANDBOX_WORKSPACE = "/app"
SANDBOX_SESSION_DIR = "/session"
SANDBOX_INPUTS = "/inputs"


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _scrub(text: str, secrets: list[str]) -> str:
    # every spelling (base64, hex, split across lines) of the session's and the process's secrets
    return Redactor(secrets).scrub(text)


def _short(text: str, secrets: list[str]) -> str:
    text = _scrub(" ".join(text.split()), secrets)
    return text if len(text) <= EVIDENCE_LIMIT else text[: EVIDENCE_LIMIT - 15] + "... [truncated]"


def _dump(obj: object) -> bytes:
    return json.dumps(obj, indent=2, sort_keys=True, default=str).encode() + b"\n"


def _preflight(req: SessionRequest) -> tuple[Path, Path, list[str]]:
    from sweep.runtimes import check_runtime_supports, get_runtime, with_runtime_family

    runtime = get_runtime(req.runtime)
    options = req.runtime_options or {}
    req.role = with_runtime_family(req.role, req.runtime)   # codex sees openai's key, claude anthropic's
    runtime.check_options(options)
    check_runtime_supports(req.role, req.runtime, options)
    if not runtime.capabilities(options).uses_credentials:
        req.secrets = {}      # oracle and nop talk to no model API: they get no secret at all
    role = req.role
    if role.source_path and Path(role.source_path).is_file():
        actual = manifest_sha256(role.source_path)
        if actual != req.manifest_sha256:
            raise ConfigError("the manifest changed since it was loaded (its sha256 differs from the one "
                              "the session would record)", path=role.source_path,
                              hint="reload the manifest and pass its current manifest_sha256")
    workspace = Path(req.workspace).resolve()
    if not workspace.is_dir():
        raise ConfigError("the session workspace does not exist", path=workspace, field="workspace")
    session_dir = Path(req.session_dir).resolve()
    if _is_within(session_dir, workspace) or _is_within(workspace, session_dir):
        raise ConfigError("the session directory must be outside the workspace (and not contain it)",
                          path=session_dir, field="session_dir")
    _check_resume_and_fault(req, workspace, session_dir)
    secrets: list[str] = []
    for name, path in (req.secrets or {}).items():
        if name not in role.env_allowlist:
            raise ConfigError(f"secret {name} is not in the {role.key_family!r} key family of role "
                              f"{role.name!r} (allowed: {', '.join(role.env_allowlist) or 'none'})",
                              path=role.source_path, field="key_family")
        secrets.append(read_secret(name, path if isinstance(path, FromEnv) else Path(path)))   # fails now
    try:
        json.dumps(req.inputs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"session inputs are not JSON-able: {exc}", field="inputs") from None
    return workspace, session_dir, secrets


def _check_resume_and_fault(req: SessionRequest, workspace: Path, session_dir: Path) -> None:
    """A resumed session: a runtime that can resume, an earlier session's kept state directory
    (outside the workspace, and not this session's own); a fault: a runtime that counts tool calls."""
    facts = facts_of(req.runtime)
    if req.resume is not None:
        if not facts.resumable:
            raise ConfigError(f"runtime {req.runtime!r} cannot resume a session (its facts say resumable=False): "
                              "start a new one", field="resume")
        state = Path(req.resume.state_dir).resolve()
        if not state.is_dir() or _is_within(state, workspace) or _is_within(workspace, state) \
                or _is_within(state, session_dir):
            raise ConfigError("the resumed session's state directory must be an existing directory outside "
                              "the workspace and this session's directory", path=state, field="resume.state_dir")
    n = req.stop_after_tool_calls
    if n is not None and (not facts.counts_tool_calls or isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ConfigError(f"stop_after_tool_calls needs an integer >= 1 and a runtime whose stream counts tool "
                          f"calls ({req.runtime!r}: counts_tool_calls={facts.counts_tool_calls})",
                          field="stop_after_tool_calls")


FAULT_STOP = "fault"


@dataclass
class _FaultWatch:
    """stop_after_tool_calls: the runtime's own stdout watch first; then, on every stdout chunk and
    on the provider's poll (about once a second, output or not), the completed tool calls the CLI
    has written to its transcript (the runtime's `tool_calls`), so what a resumed session continues
    from holds the N-th. The fault's time is when the N-th was seen there."""
    inner: Any
    tool_calls: Any
    after: int
    at: float | None = None
    seen: int = 0

    def feed(self, chunk: bytes) -> str | None:
        reason = self.inner(chunk) if self.inner is not None else None
        return reason or self.due()

    def due(self) -> str | None:
        if self.at is None:
            self.seen = self.tool_calls()
            if self.seen < self.after:
                return None
            self.at = time.time()
        return f"{FAULT_STOP}: an injected fault after {self.seen} completed tool call(s) (asked: {self.after})"

    def record(self) -> dict | None:
        return None if self.at is None else {"after_tool_calls": self.after, "tool_calls": self.seen, "at": self.at}


def run_session(req: SessionRequest, provider) -> SessionResult:
    """Run one role session through `provider`; see the module docstring for the guarantees."""
    from sweep.runtimes import get_runtime

    started_wall, started = time.time(), time.monotonic()
    workspace, session_dir, secrets = _preflight(req)
    runtime = get_runtime(req.runtime)
    # a model key where no relay reaches (a remote sandbox): refused, unless the plan accepts it
    key_in_sandbox = refuse_key_in_sandbox(req, runtime, provider, req.runtime_options or {})
    role = req.role
    req.view = session_view(req, runtime, provider, workspace, session_dir)
    scope = list(role.scope)

    make_private_dir(session_dir)
    files = SessionFiles(session_dir)
    redactor = Redactor(secrets)
    write_roots = _write_inputs(req, files, redactor, workspace)
    channel = provider.open_output_channel(files.output)
    pre_copy = files.pre_session_copy
    outcome: ExecResult | None = None
    launch: _Launch | None = None
    relay = None
    try:
        # an agent CLI speaking a protocol sweep knows talks to its model through the session's
        # relay, which holds the key: the sandbox gets a placeholder and none of the family's
        # variables, and the cost is what the relay metered
        relay = open_wire(req, runtime, provider, req.runtime_options or {},
                          lambda name, src: read_secret(name, src if isinstance(src, FromEnv) else Path(src)))
        if relay is not None and relay.credential is not None:
            secrets.append(relay.credential.value)
            redactor = Redactor(secrets)
        launch = _plan_launch(req, runtime, files, channel, provider, relay)
        write_atomic(files.argv, _dump(_launch_record(req, launch, workspace, write_roots, provider, relay,
                                                      secrets).for_disk()))
        if pre_copy.exists():
            shutil.rmtree(pre_copy)   # left by a crashed earlier attempt of this session
        make_private_dir(pre_copy)
        before = audit.snapshot(workspace, copy_to=pre_copy, copy_if=lambda rel: not scope_matches(rel, scope))
        try:
            outcome = provider.run(_exec_spec(req, launch, workspace, write_roots, files, channel))
        finally:
            # The audit runs whatever happened to the run, so nothing out of scope survives it.
            after = audit.snapshot(workspace)
            changes = audit.diff(before, after)
            bad = audit.violations(changes, scope)
            unrestored = audit.revert(workspace, pre_copy, bad, before) if bad else []
            shutil.rmtree(pre_copy, ignore_errors=True)
            unsafe = _unsafe_workspace(write_roots, (req.limits or DEFAULT_LIMITS).workspace_bytes)
    finally:
        _close_session(provider, channel, relay, redactor, files, launch.state_paths if launch else [])

    try:
        parsed = runtime.parse(req, files, outcome)
    except Exception as exc:   # a parser bug must still leave an honest record of the session
        parsed = Parsed(ok=False, failure_class="failure", reason="runtime_parse_error",
                        evidence=f"{type(exc).__name__}: {exc}")
    result = _compose(req, outcome, parsed, bad, unrestored, changes, secrets,
                      time.monotonic() - started, provider)
    if outcome.limit_hit or unsafe:
        _fail_on_bound(result, outcome, unsafe, secrets)
    if relay is not None:
        _settle_from_wire(result, parsed, relay)
    if launch is not None and launch.fault is not None and (outcome.stopped or "").startswith(FAULT_STOP):
        result.fault = launch.fault.record()
    record = asdict(result)
    record.update({
        "role": role.name, "runtime": req.runtime, "rc": outcome.rc, "signal": outcome.signal,
        "timed_out": outcome.timed_out, "started_at": started_wall, "ended_at": time.time(),
        "executed_argv": [_scrub(a, secrets) for a in outcome.argv], "env_names": outcome.env_names,
        "isolation_note": getattr(provider, "isolation_note", ""), "unrestored": unrestored,
        "network": outcome.network, "endpoints": outcome.endpoints,
        "network_allow": getattr(outcome, "network_allow", []),
        "limit_hit": outcome.limit_hit, "limits_enforced": outcome.limits_enforced,
        "transcript": {"stdout": files.stdout.name, "stderr": files.stderr.name},
        "wire": relay.summary() if relay is not None else None, "key_in_sandbox": key_in_sandbox,
        "resumed_from": {"session_id": req.resume.session_id, "session_dir": str(req.resume.session_dir),
                         "state_dir": str(req.resume.state_dir)} if req.resume is not None else None,
    })
    write_atomic(files.result, _dump(SessionRecord.model_validate(redactor.scrub_obj(record)).for_disk()))
    return result


def session_view(req: SessionRequest, runtime, provider, workspace: Path,
                 session_dir: Path) -> tuple[tuple[Path, str], ...]:
    """Where a sandboxed session sees its host paths: the workspace at /app, the session directory
    at /session (a resumed session's earlier CLI state at /session/<its name>, as it was shown to
    that session), each input path the runtime binds (`input_paths`: the oracle's source
    repository, reference solution) at /inputs/<name>. Empty when nothing sandboxes the session (isolation
    none, and remote providers, whose sandboxes have paths of their own)."""
    if getattr(provider, "isolation", None) != "bwrap":
        return ()
    view = [(workspace, SANDBOX_WORKSPACE), (session_dir, SANDBOX_SESSION_DIR)]
    if req.resume is not None:
        # the earlier session's CLI state, where that session saw it (its thread names the path)
        state = Path(req.resume.state_dir).resolve()
        if not _is_within(state, session_dir):
            view.append((state, f"{SANDBOX_SESSION_DIR}/{state.name}"))
    named = getattr(runtime, "input_paths", None)
    for name, path in (named(req.inputs or {}) if named is not None else {}).items():
        host = Path(path).resolve()
        if not any(_is_within(host, root) or _is_within(root, host) for root, _ in view):
            view.append((host, f"{SANDBOX_INPUTS}/{name}"))
    return tuple(view)


def _shown_text(text: str, view: tuple[tuple[Path, str], ...]) -> str:
    """`text` with every view directory it names replaced by where the sandbox shows it."""
    for host, shown in sorted(view, key=lambda v: -len(str(v[0]))):
        text = text.replace(str(host), shown)
    return text


def _shown_obj(obj: Any, view: tuple[tuple[Path, str], ...]) -> Any:
    """`obj` (JSON-able inputs) with the host paths it names as the sandbox shows them."""
    if isinstance(obj, str) and obj.startswith("/") and "\n" not in obj:
        try:
            real = os.path.realpath(obj)
        except (OSError, ValueError):
            real = obj
        shown = view_path(real, view)
        if shown != real:
            return shown
    if isinstance(obj, str):
        return _shown_text(obj, view)
    if isinstance(obj, dict):
        return {k: _shown_obj(v, view) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shown_obj(v, view) for v in obj]
    return obj


def _write_inputs(req: SessionRequest, files: SessionFiles, redactor: Redactor, workspace: Path) -> list[Path]:
    """prompt.md, instructions.md, output_schema.json (judges) and inputs.json, and the workspace's
    writable roots (made before the snapshot: a bind target must exist)."""
    role = req.role
    # the prompt and inputs carry text from the PR and from earlier roles: no secret is handed on,
    # and the paths they name are the sandbox's (req.view), never the host's
    write_atomic(files.prompt, redactor.scrub(_shown_text(req.prompt, req.view)).encode())
    write_atomic(files.instructions, role.instructions.encode())
    if role.output_schema is not None:
        write_atomic(files.output_schema, _dump(role.output_schema))
    write_atomic(files.inputs, _dump(redactor.scrub_obj(_shown_obj(req.inputs, req.view))))
    write_roots = []
    for root in bind_roots(list(role.scope)):
        target = workspace / root if root else workspace
        target.mkdir(parents=True, exist_ok=True)   # a bind target must exist; made before the snapshot
        write_roots.append(target)
    return write_roots


@dataclass
class _Launch:
    """What the session runs, decided before anything is snapshotted (argv.json records it)."""
    invocation: Invocation
    argv: list[str]
    env: dict[str, str]
    passthrough: tuple[str, ...]
    secret_env: dict[str, Any]
    network: str
    state_paths: list[Path]
    fault: _FaultWatch | None = None


def _plan_launch(req: SessionRequest, runtime, files: SessionFiles, channel, provider, relay) -> _Launch:
    """The runtime's invocation as this provider runs it: argv (sandboxed or not), environment, the
    key family's variables and secrets (none when the relay holds the key), network, and the CLI's
    own state directories (made here, private)."""
    role = req.role
    credentials = runtime.capabilities(req.runtime_options or {}).uses_credentials
    if credentials and relay is None:
        passthrough = passthrough_for(role.env_allowlist, bool(req.secrets))
    else:
        passthrough = ()      # not even the family's variables from the controller's environment
    secret_env = dict(req.secrets or {}) if relay is None else {}
    invocation = runtime.build_invocation(req, files, channel.sandbox_path)
    network = _network_within_role(role, invocation.network)
    sandboxed = provider.isolation == "bwrap"
    argv = invocation.argv if sandboxed or invocation.unsandboxed_argv is None else invocation.unsandboxed_argv
    env = {**invocation.env, **(invocation.sandbox_env if sandboxed else {})}
    state_paths = [Path(p) for p in invocation.state_paths]
    for path in state_paths:
        make_private_dir(path)
    fault = None
    if req.stop_after_tool_calls is not None:
        if invocation.tool_calls is None:
            raise ConfigError(f"runtime {req.runtime!r} gave no tool-call count for stop_after_tool_calls",
                              field="stop_after_tool_calls")
        fault = _FaultWatch(invocation.stdout_watch, invocation.tool_calls, req.stop_after_tool_calls)
    return _Launch(invocation=invocation, argv=argv, env=env, passthrough=passthrough, secret_env=secret_env,
                   network=network, state_paths=state_paths, fault=fault)


def _launch_record(req: SessionRequest, launch: _Launch, workspace: Path, write_roots: list[Path], provider,
                   relay, secrets: list[str]) -> SessionLaunch:
    """argv.json: what is run, with which paths, network, variable names and secret names (never a value)."""
    invocation = launch.invocation
    return SessionLaunch.model_validate({
        "role": req.role.name, "runtime": req.runtime, "manifest_sha256": req.manifest_sha256,
        "argv": [_scrub(a, secrets) for a in launch.argv], "cwd": str(workspace),
        "write_paths": [str(p) for p in write_roots], "state_paths": [str(p) for p in launch.state_paths],
        "stdin": str(invocation.stdin_path) if invocation.stdin_path else None,
        "read_paths": [str(p) for p in invocation.read_paths], "network": launch.network,
        "endpoints": list(invocation.endpoints) if launch.network == "api" else [],
        "env_set": sorted(launch.env), "env_passthrough": list(launch.passthrough),
        "secrets": sorted(launch.secret_env), "isolation": provider.isolation,
        "wire": {"base_url": req.wire.base_url, "upstream": relay.upstream,
                 "credential": relay.credential.variable if relay.credential else None,
                 "limit_usd": relay.limit_usd} if relay is not None else None,
        "walltime_s": req.role.budget.walltime_s,
        "view": [[str(host), shown] for host, shown in req.view],
    })


def _exec_spec(req: SessionRequest, launch: _Launch, workspace: Path, write_roots: list[Path],
               files: SessionFiles, channel) -> ExecSpec:
    """The provider's spec: only the scope's roots and the CLI's state writable, the prompt and the
    invocation's paths readable, the output channel inherited, the walltime from the budget."""
    invocation = launch.invocation
    return ExecSpec(
        argv=launch.argv, cwd=workspace, timeout_s=req.role.budget.walltime_s,
        write_paths=(*write_roots, *launch.state_paths), read_paths=(files.prompt, *invocation.read_paths),
        network=launch.network, endpoints=tuple(invocation.endpoints) if launch.network == "api" else (),
        limits=req.limits or DEFAULT_LIMITS, env=launch.env, env_passthrough=launch.passthrough,
        secret_env=launch.secret_env, stdout_path=files.stdout, stderr_path=files.stderr,
        pass_fds=(channel.fd,), stdin_path=invocation.stdin_path,
        idle_timeout_s=invocation.idle_timeout_s,
        stdout_watch=launch.fault.feed if launch.fault is not None else invocation.stdout_watch,
        stop_poll=launch.fault.due if launch.fault is not None else None, view=req.view)


def _close_session(provider, channel, relay, redactor: Redactor, files: SessionFiles, state_paths: list[Path]) -> None:
    """After the sandbox, whatever happened: the relay and the output channel closed, and what the
    agent wrote (its output, the transcripts when a relay held a key, its CLI state) scrubbed."""
    if relay is not None:
        relay.close()     # after the sandbox: a response still streaming is read to its end
    provider.close_output_channel(channel)
    redactor.scrub_file(files.output)      # written by the agent itself, through the channel
    if relay is not None:
        # the provider redacts the transcripts with the values in the session's environment;
        # the relay's key is not among them (it never entered the sandbox), a copy might be
        for transcript in (files.stdout, files.stderr):
            redactor.scrub_file(transcript)
    # the CLI's own state (its session transcripts with every tool's output, its config) is
    # kept in the run directory for --resume: written by the agent, so scrubbed like the rest
    for path in state_paths:
        _scrub_tree(redactor, path)


def _fail_on_bound(result: SessionResult, outcome: ExecResult, unsafe: str | None, secrets: list[str]) -> None:
    """A bound was hit, or the workspace holds what no later step may copy: the session failed,
    with the reason (never a crash further on)."""
    what = (f"the session hit its {outcome.limit_hit} bound ({outcome.limits_enforced.get(outcome.limit_hit, '')})"
            if outcome.limit_hit else f"the workspace was refused: {unsafe}")
    result.status, result.failure_class = "failed", "failure"
    result.reason = f"limit_{outcome.limit_hit}" if outcome.limit_hit else "unsafe_workspace"
    result.evidence = _short(what, secrets)
    result.structured_output = None


def _settle_from_wire(result: SessionResult, parsed: Parsed, relay) -> None:
    """The session's cost is what the relay metered at the plan's prices (unknown, so charged its
    whole reservation, when a response's usage could not be read or priced); the CLI's own figure
    is kept beside it. A request the relay refused for the budget ends the session `max_budget`."""
    from sweep.runtimes.wire import cost_disagreement
    wire = relay.summary()
    report = dict(result.report or {})
    anomalies = list(report.get("usage_anomalies") or [])
    metered = wire["metered_cost_usd"]
    report["self_reported_cost_usd"] = parsed.cost_usd
    report["metered_cost_usd"] = metered
    disagreement = cost_disagreement(metered, parsed.cost_usd if isinstance(parsed.cost_usd, (int, float)) else None)
    if disagreement:
        anomalies.append(disagreement)
    if wire["complete"]:
        result.cost_usd = metered
    else:
        result.cost_usd = None
        anomalies.append("the relay could not meter every response (" + "; ".join(
            f"request {u['n']}: {u['why']}" for u in wire["unmetered"][:3]) + "); charged the reservation")
    if anomalies:
        report["usage_anomalies"] = anomalies
    result.report = report
    if relay.budget_cut and result.status != "audit_failed":
        result.status, result.failure_class, result.reason = "failed", "failure", "max_budget"
        result.evidence = (f"the relay refused further requests: {metered:.4f} USD metered reached the "
                           f"session's limit of {relay.limit_usd:g} USD")
        result.structured_output = None


def _scrub_tree(redactor: Redactor, root: Path) -> None:
    """Redact every regular file under `root` (links not followed, nothing else opened)."""
    if not redactor:
        return
    for rel, st in walk_tree(root):
        if stat.S_ISREG(st.st_mode):
            try:
                redactor.scrub_file(root / rel)
            except OSError:
                continue


def _unsafe_workspace(write_roots: list[Path], max_bytes: int | None) -> str | None:
    """Why what the session could write cannot be copied on (a FIFO, a device, a socket, too many
    bytes), or None. Only the writable roots: everything else was read-only or reverted."""
    for root in write_roots:
        try:
            audit.check_tree(root, max_bytes=max_bytes)
        except audit.UnsafeTree as exc:
            return str(exc)
    return None


NETWORK_ORDER = ("none", "api", "host")


def _network_within_role(role, wanted: object) -> str:
    """The session's network mode; a runtime asking for more than the role allows is refused."""
    mode = ("api" if wanted else "none") if isinstance(wanted, bool) else wanted
    if mode not in NETWORK_ORDER:
        raise ConfigError(f"unknown network mode {wanted!r}; use none, api or host", field="runtime_options.network")
    if NETWORK_ORDER.index(mode) > NETWORK_ORDER.index(role.network):
        raise ConfigError(f"the runtime asks for network {mode!r} but role {role.name!r} allows at most "
                          f"{role.network!r}", path=role.source_path, field="network",
                          hint="lower runtime_options.network, or raise `network` in the role's manifest")
    return mode


def _compose(req: SessionRequest, outcome: ExecResult, parsed: Parsed, bad: list, unrestored: list[str],
             changes: list, secrets: list[str], duration_s: float, provider) -> SessionResult:
    role = req.role
    structured = None
    turns, cost, session_id = parsed.turns, parsed.cost_usd, parsed.session_id
    # Figures a runtime reports are data from an untrusted process: a forged or broken value (NaN,
    # Infinity, negative, absurdly above the cap) is dropped, so the controller charges the whole
    # reservation, and the anomaly is kept in the report.
    cost, cost_anomaly = sane_cost(cost, role.budget.cost_cap_usd)
    turns, turns_anomaly = sane_turns(turns, role.budget.max_turns)
    anomalies = [a for a in (cost_anomaly, turns_anomaly) if a]
    if anomalies:
        parsed.report = {**(parsed.report or {}), "usage_anomalies": anomalies}
    if outcome.launch_error:
        status, cls, reason, evidence = "failed", "config", "launch_error", outcome.launch_error
    elif (outcome.stopped or "").startswith(FAULT_STOP):
        # stopped by the caller's injected fault (stop_after_tool_calls): not the agent's doing
        status, cls, reason, evidence = "failed", "failure", "fault", f"stopped by {outcome.stopped}"
    elif outcome.timed_out and facts_of(req.runtime).protocol_classified:
        # an agent CLI's stream is full of tool and model text: only its parser's reading of the
        # protocol may say "outage" (e.g. the last event was an API retry), never a regex over it
        status, reason = "timeout", "walltime"
        cls = parsed.failure_class if parsed.failure_class in ("outage", "throttle") else "failure"
        evidence = f"walltime of {role.budget.walltime_s:g}s exceeded; the process group was killed ({parsed.evidence})"
    elif outcome.timed_out:
        text_class, line = classify_text(outcome.stdout_tail + "\n" + outcome.stderr_tail)
        status, reason = "timeout", "walltime"
        cls = "outage" if text_class == "outage" else "failure"
        evidence = f"walltime of {role.budget.walltime_s:g}s exceeded; the process group was killed"
        if line:
            evidence += f" (last sign: {line})"
    elif not parsed.ok:
        status, cls = "failed", parsed.failure_class or "failure"
        reason, evidence = parsed.reason or "failed", parsed.evidence
    else:
        status, cls, reason, evidence = "ok", None, None, parsed.evidence
        if role.output_schema is not None:
            output = parsed.output
            problems = (["no structured output"] if output is None else
                        ["structured output is not an object"] if not isinstance(output, dict) else
                        validate_instance(output, role.output_schema))
            if problems:
                status, cls = "failed", "failure"
                reason = "no_structured_output" if output is None else "schema_mismatch"
                evidence = "the judge's output does not match its output_schema: " + "; ".join(problems[:5])
            else:
                structured = output
    violations = [c.path for c in bad]
    if violations:
        status, cls, reason = "audit_failed", "failure", "out_of_scope_write"
        shown = ", ".join(violations[:5]) + (f" and {len(violations) - 5} more" if len(violations) > 5 else "")
        what = "changed the workspace but is read-only" if not role.scope else "changed paths outside its scope"
        evidence = f"role {role.name!r} {what}: {shown}; " + (
            f"could not revert {len(unrestored)} path(s)" if unrestored else "all reverted")
        structured = None
    allowed = [c.path for c in changes if c not in bad][:MAX_LISTED_PATHS]
    return SessionResult(status=status, failure_class=cls, evidence=_short(evidence or "", secrets),
                         turns=turns, cost_usd=cost, session_id=session_id, structured_output=structured,
                         audit_violations=violations[:MAX_LISTED_PATHS], duration_s=round(duration_s, 3),
                         reason=reason, report=parsed.report,
                         changed_paths=allowed, manifest_sha256=req.manifest_sha256,
                         isolation=getattr(provider, "isolation", ""), network=outcome.network)
