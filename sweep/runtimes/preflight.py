"""Preflight of the agent CLIs a campaign uses: `sweep init` (errors only) and `sweep doctor`.

For each (role, runtime) pair the plan uses with a runtime that drives an agent CLI (its facts
name one: `RuntimeFacts.cli`, sweep/runtimes/facts.py), e.g. `claude-code` or `codex`:
- the CLI is found (a missing binary is a config error up front, never an attempt or an outage);
- it runs INSIDE the sandbox (`--version` through the local provider, with the install dir as its
  only extra read path): a CLI installed under /tmp, say, is visible on the host and not in there;
- its version is in the pinned range (outside: a warning, the parser may not know its events);
- the key family's secret is named: `sweep init` refuses a runtime whose family (claude-code:
  anthropic, codex: openai, whatever the manifest says) has no [secrets] entry, naming role,
  runtime and family (`missing_key_families`); doctor checks the entry's file or variable;
- doctor only: the model endpoint (base_url) accepts a TCP connection.
"""
from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

KEY_VARIABLES = {"anthropic": ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"),
                 "openai": ("OPENAI_API_KEY", "CODEX_API_KEY")}


@dataclass
class Finding:
    level: str          # "ok" | "warn" | "error"
    where: str          # e.g. "defaults.runtimes.author (claude-code)"
    message: str


def role_runtimes(opts) -> list[tuple[str, str, str, dict]]:
    """(field, role, runtime, options) for every session runtime a candidate's options name: the
    three roles', and the reviewer's escalation (quality.escalation) when the plan has one."""
    from runstate.models import PIPELINE_ROLES
    out = [(f"runtimes.{role}", role, getattr(opts.runtimes, role), dict(opts.runtime_options.get(role, {})))
           for role in PIPELINE_ROLES]
    escalation = opts.quality.escalation
    if escalation is not None:
        out.append(("quality.escalation", "reviewer", escalation.runtime, dict(escalation.runtime_options)))
    return out


def _uses(settings, candidates) -> list[tuple[str, str, str, dict]]:
    """(where, role, runtime, options) for every distinct agent-CLI use in the plan."""
    seen, out = set(), []
    # frozen candidates carry their options merged over the defaults: they are what runs
    sources = ([(f"candidates.{i}", c.options) for i, c in enumerate(candidates)] if candidates
               else [("defaults", settings.defaults)])
    from sweep.runtimes.facts import RUNTIMES, facts_of
    for where, opts in sources:
        for field, role, runtime, options in role_runtimes(opts):
            if runtime not in RUNTIMES or facts_of(runtime).cli is None:
                continue
            key = (role, runtime, repr(sorted(options.items())))
            if key in seen:
                continue
            seen.add(key)
            out.append((f"{where}.{field} ({runtime})", role, runtime, options))
    return out


def missing_key_families(settings, candidates=None, roles_dir: Path | None = None) -> list[tuple[str, str, str, str]]:
    """(where, role, runtime, family) for each role the plan gives a runtime that needs a key
    (its facts name key families: claude-code, codex) whose family has no `[secrets]` entry.

    Without one the session would reach its endpoint keyless (or with whatever key the tick's
    environment happens to hold) and the role would only park as a config error on the endpoint's
    401, after a whole campaign was admitted. Runtimes that take no key (oracle, nop) or any family
    the manifest names (command, which may run a CLI that needs none) are not concerned."""
    from roles import load_manifest, shipped_manifests_dir
    from sweep.runtimes import key_family_of
    from sweep.runtimes.facts import RUNTIMES, facts_of
    manifests = Path(roles_dir) if roles_dir is not None else shipped_manifests_dir()
    have = set(getattr(settings, "secrets", None) or {})
    sources = ([(f"candidates.{i}", c.options) for i, c in enumerate(candidates)] if candidates
               else [("defaults", settings.defaults)])
    seen: set[tuple[str, str]] = set()
    specs: dict = {}
    out = []
    for where, opts in sources:
        for field, role, runtime, _ in role_runtimes(opts):
            families = facts_of(runtime).key_families if runtime in RUNTIMES else None
            if (role, runtime) in seen or not families:
                continue
            seen.add((role, runtime))
            if role not in specs:
                path = manifests / f"{role}.toml"
                specs[role] = load_manifest(path) if path.is_file() else None
            spec = specs[role]
            family = key_family_of(spec, runtime) if spec is not None else families[0]
            if family not in have:
                out.append((f"{where}.{field}", role, runtime, family))
    return out


def key_in_remote_sandbox(candidates) -> list[tuple[str, str, str, str]]:
    """(where, role, runtime, provider) for each candidate whose solver session would hold its model
    key inside a remote sandbox: a runtime that speaks a model API (claude-code, codex, a `command`
    naming a `protocol`) on a remote provider, where it runs in the task's image and the relay
    cannot be reached (sweep/controller/phases.py runs only the solver remotely)."""
    from sweep.runtimes import get_runtime
    from sweep.runtimes.facts import RUNTIMES, facts_of
    from sweep.runtimes.wire import wire_protocol
    out = []
    for i, c in enumerate(candidates):
        opts = c.options
        runtime = opts.runtimes.solver
        if opts.provider == "local" or runtime not in RUNTIMES or facts_of(runtime).host_only:
            continue
        if wire_protocol(get_runtime(runtime), dict(opts.runtime_options.get("solver", {})))[0] is not None:
            out.append((f"candidates.{i}.runtimes.solver", "solver", runtime, opts.provider))
    return out


def check_agent_runtimes(settings, candidates=None, *, reach: bool = False, sandbox: bool = True,
                         roles_dir: Path | None = None) -> list[Finding]:
    """Findings for every agent-CLI use; `roles_dir` holds the manifests in force (default: the
    shipped ones, which `init` copies), so a runtime that cannot honour a role is caught here."""
    from roles import load_manifest, shipped_manifests_dir
    from runstate.errors import ConfigError
    from sweep.runtimes import check_runtime_supports, facts_of, get_runtime
    findings: list[Finding] = []
    manifests = Path(roles_dir) if roles_dir is not None else shipped_manifests_dir()
    for where, role, runtime, options in _uses(settings, candidates):
        facts = facts_of(runtime)
        cli, families = facts.cli, facts.key_families or ()
        if cli is None or not families or facts.default_endpoint is None:
            continue        # not reached: _uses yields only runtimes that drive an agent CLI (which have both)
        try:
            get_runtime(runtime).check_options(options)
            path = manifests / f"{role}.toml"
            spec = load_manifest(path) if path.is_file() else None
            if spec is not None:
                check_runtime_supports(spec, runtime, options)
        except ConfigError as exc:
            findings.append(Finding("error", where, f"{exc}"))
            continue
        binary = options.get("binary", cli.default_binary)
        exe = cli.find(binary)
        if exe is None:
            findings.append(Finding("error", where, f"the {runtime} CLI ({binary!r}) is not installed; "
                                    f"npm install -g {cli.npm_spec}"))
            continue
        version_text, why = _version_in_sandbox(exe, cli.install_root(exe)) if sandbox else _version_on_host(exe)
        if version_text is None:
            findings.append(Finding("error", where, f"{exe} does not run inside the sandbox: {why}"))
            continue
        got = _parse_version(version_text)
        low, high = cli.supported_range
        if got is None or not (low <= got < high):
            findings.append(Finding("warn", where, f"{runtime} version {version_text.strip()[:60]!r} is outside the "
                                    f"tested range {'.'.join(map(str, low))} to <{'.'.join(map(str, high))} "
                                    f"(pinned {cli.pinned_version}); its events may not parse"))
        else:
            findings.append(Finding("ok", where, f"{runtime} {'.'.join(map(str, got))} runs in the sandbox ({exe})"))
        if sandbox and spec is not None:
            findings.append(_argv_check(where, spec, path, runtime, options, settings))
        family = spec.key_family if spec is not None and spec.key_family in families else families[0]
        secret = (getattr(settings, "secrets", None) or {}).get(family)
        if secret is not None and secret.file is not None:
            from sweep.credentials import secret_file_problem     # exists, a regular file, yours, 0600
            problem = secret_file_problem(secret.file)
            findings.append(Finding("error" if problem else "ok", where,
                                    f"secrets.{family}.file: {problem}" if problem else
                                    f"secret for {family}: file {secret.file} readable by you only"))
        elif secret is not None and secret.env is not None:
            ok = bool(os.environ.get(secret.env))
            findings.append(Finding("ok" if ok else "error", where,
                                    f"secret for {family}: ${secret.env} " + ("set" if ok else "is not set")))
        else:
            present = [v for v in KEY_VARIABLES[family] if os.environ.get(v)]
            findings.append(Finding("ok" if present else "warn", where,
                                    f"secret for {family}: " + (f"${present[0]} set in this environment" if present else
                                                                f"no [secrets].{family} in the plan and none of "
                                                                f"{', '.join(KEY_VARIABLES[family])} set here")))
        if reach:
            url = options.get("base_url") or facts.default_endpoint
            findings.append(_reachable(where, url))
    return findings


def _scratch_base() -> str | None:
    """Where the probes' private (mkdtemp, 0700) directories go: not /tmp, which the sandbox
    replaces with its own tmpfs, so a probe workspace there would not exist inside it."""
    return "/var/tmp" if os.path.isdir("/var/tmp") else None  # noqa: S108 - mkdtemp below it, see docstring


def _provider(settings):
    """The local provider as the campaign's sessions will get it (the plan's isolation if it has one)."""
    from sweep.providers.local import ISOLATION_MODES, LocalProvider
    wanted = getattr(settings, "isolation", None)
    mode = wanted if wanted in ISOLATION_MODES else ("auto" if "auto" in ISOLATION_MODES else "bwrap")
    return LocalProvider(isolation=mode)


def _argv_check(where: str, spec, manifest: Path, runtime: str, options: dict, settings) -> Finding:
    """Run the role's real command line, in the sandbox, against an endpoint nobody listens on.

    The CLI parses its flags and emits its first event (claude's init, codex's thread.started)
    before it calls the API: a session that ends without any event means the command line or the
    CLI is broken, which is a config error now rather than a stream of parks later.
    """
    from roles import manifest_sha256
    from sweep.runtimes import SessionRequest, facts_of, run_session
    with socket.socket() as sock:       # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # the path of its default endpoint kept (codex's base_url ends in /v1, claude's has none)
    dead = f"http://127.0.0.1:{port}" + urlsplit(facts_of(runtime).default_endpoint or "").path.rstrip("/")
    probe_options = {**options, "base_url": dead, "max_retries": 0, "stall_s": 20}
    base = _scratch_base()
    try:
        with tempfile.TemporaryDirectory(prefix="sweep-doctor-", dir=base) as tmp:
            workspace = Path(tmp) / "ws"
            workspace.mkdir()
            probe_spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={"walltime_s": 60})})
            result = run_session(SessionRequest(
                role=probe_spec.with_source(manifest), manifest_sha256=manifest_sha256(manifest), runtime=runtime,
                runtime_options=probe_options, workspace=workspace, session_dir=Path(tmp) / "session",
                prompt="sweep doctor: a command-line check; the endpoint is deliberately unreachable.",
                inputs={}), _provider(settings))
    except Exception as exc:    # a refusal up front (bad options, unusable sandbox) is the finding
        return Finding("error", where, f"the {runtime} command line could not be checked: {exc}")
    if result.reason in ("cli_failed", "launch_error", "mcp_server_failed"):
        return Finding("error", where, f"the {runtime} command line for role {spec.name} does not start: "
                                       f"{result.evidence}")
    return Finding("ok", where, f"the {runtime} command line for role {spec.name} is accepted "
                               f"(a dead endpoint gave {result.failure_class}: {result.reason})")


def _parse_version(text: str):
    import re
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text or "")
    return tuple(int(x) for x in m.groups()) if m else None


def _version_on_host(exe: str) -> tuple[str | None, str]:
    import subprocess
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return (done.stdout, "") if done.returncode == 0 else (None, (done.stderr or done.stdout).strip()[-200:])


def _version_in_sandbox(exe: str, install_root: Path) -> tuple[str | None, str]:
    from sweep.execution import ExecSpec
    from sweep.providers.local import LocalProvider
    from runstate.errors import ProviderError
    try:
        provider = LocalProvider(isolation="bwrap")       # sessions run only in the sandbox: check there
    except ProviderError as exc:
        return None, str(exc)
    with tempfile.TemporaryDirectory(prefix="sweep-doctor-", dir=_scratch_base()) as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        result = provider.run(ExecSpec(argv=[exe, "--version"], cwd=Path(tmp), timeout_s=60,
                                       read_paths=(install_root,), network=False, stdout_path=out, stderr_path=err))
    if result.launch_error:
        return None, result.launch_error
    if result.rc != 0:
        return None, f"exited {result.rc}: {(result.stderr_tail or result.stdout_tail).strip()[-200:]}"
    return result.stdout_tail, ""


def _reachable(where: str, url: str) -> Finding:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=5):
            return Finding("ok", where, f"endpoint {host}:{port} accepts connections")
    except OSError as exc:
        return Finding("error", where, f"endpoint {host}:{port} is unreachable: {exc.strerror or exc}")
