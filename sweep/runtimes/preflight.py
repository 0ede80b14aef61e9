"""Preflight of the agent CLIs a campaign uses: `sweep init` (errors only) and `sweep doctor`.

For each (role, runtime) pair the plan uses with `claude-code` or `codex`:
- the CLI is found (a missing binary is a config error up front, never an attempt or an outage);
- it runs INSIDE the sandbox (`--version` through the local provider, with the install dir as its
  only extra read path): a CLI installed under /tmp, say, is visible on the host and not in there;
- its version is in the pinned range (outside: a warning, the parser may not know its events);
- the key family's secret is present (the plan's [secrets] entry, else the caller's environment);
- doctor only: the model endpoint (base_url) accepts a TCP connection.
"""
from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

AGENT_RUNTIMES = ("claude-code", "codex")
DEFAULT_ENDPOINTS = {"claude-code": "https://api.anthropic.com", "codex": "https://api.openai.com/v1"}
FAMILY_OF = {"claude-code": "anthropic", "codex": "openai"}
KEY_VARIABLES = {"anthropic": ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"),
                 "openai": ("OPENAI_API_KEY", "CODEX_API_KEY")}


@dataclass
class Finding:
    level: str          # "ok" | "warn" | "error"
    where: str          # e.g. "defaults.runtimes.author (claude-code)"
    message: str


def _uses(settings, candidates) -> list[tuple[str, str, str, dict]]:
    """(where, role, runtime, options) for every distinct agent-CLI use in the plan."""
    seen, out = set(), []
    # frozen candidates carry their options merged over the defaults: they are what runs
    sources = ([(f"candidates.{i}", c.options) for i, c in enumerate(candidates)] if candidates
               else [("defaults", settings.defaults)])
    for where, opts in sources:
        for role in ("author", "reviewer", "solver"):
            runtime = getattr(opts.runtimes, role)
            if runtime not in AGENT_RUNTIMES:
                continue
            options = dict(opts.runtime_options.get(role, {}))
            key = (role, runtime, repr(sorted(options.items())))
            if key in seen:
                continue
            seen.add(key)
            out.append((f"{where}.runtimes.{role} ({runtime})", role, runtime, options))
    return out


def _module(runtime: str) -> tuple[Any, Any, Any]:
    if runtime == "claude-code":
        from sweep.runtimes import claude_code
        return claude_code, claude_code.find_binary, claude_code.install_root
    from sweep.runtimes import codex
    return codex, codex.native_binary, codex.package_root


def check_agent_runtimes(settings, candidates=None, *, reach: bool = False, sandbox: bool = True,
                         roles_dir: Path | None = None) -> list[Finding]:
    """Findings for every agent-CLI use; `roles_dir` holds the manifests in force (default: the
    shipped ones, which `init` copies), so a runtime that cannot honour a role is caught here."""
    from roles import load_manifest, shipped_manifests_dir
    from runstate.errors import ConfigError
    from sweep.runtimes import check_runtime_supports, get_runtime
    findings: list[Finding] = []
    manifests = Path(roles_dir) if roles_dir is not None else shipped_manifests_dir()
    for where, role, runtime, options in _uses(settings, candidates):
        mod, find, root_of = _module(runtime)
        try:
            get_runtime(runtime).check_options(options)
            path = manifests / f"{role}.toml"
            spec = load_manifest(path) if path.is_file() else None
            if spec is not None:
                check_runtime_supports(spec, runtime, options)
        except ConfigError as exc:
            findings.append(Finding("error", where, f"{exc}"))
            continue
        if spec is not None and spec.key_family != FAMILY_OF[runtime]:
            # at init the shipped manifest is checked, which the operator may still edit in the
            # campaign's roles/: a warning there, an error for the manifests in force (doctor)
            findings.append(Finding("error" if roles_dir is not None else "warn", where,
                                    f"{runtime} needs key_family = \"{FAMILY_OF[runtime]}\" but role {role} has "
                                    f"\"{spec.key_family}\" (edit roles/{role}.toml of the campaign)"))
        binary = options.get("binary", mod.DEFAULTS["binary"])
        exe = find(binary)
        if exe is None:
            package = "@anthropic-ai/claude-code" if runtime == "claude-code" else "@openai/codex"
            findings.append(Finding("error", where, f"the {runtime} CLI ({binary!r}) is not installed; "
                                    f"npm install -g {package}@{mod.PINNED_VERSION}"))
            continue
        version_text, why = _version_in_sandbox(exe, root_of(exe)) if sandbox else _version_on_host(exe)
        if version_text is None:
            findings.append(Finding("error", where, f"{exe} does not run inside the sandbox: {why}"))
            continue
        got = _parse_version(version_text)
        low, high = mod.SUPPORTED_RANGE
        if got is None or not (low <= got < high):
            findings.append(Finding("warn", where, f"{runtime} version {version_text.strip()[:60]!r} is outside the "
                                    f"tested range {'.'.join(map(str, low))} to <{'.'.join(map(str, high))} "
                                    f"(pinned {mod.PINNED_VERSION}); its events may not parse"))
        else:
            findings.append(Finding("ok", where, f"{runtime} {'.'.join(map(str, got))} runs in the sandbox ({exe})"))
        if sandbox and spec is not None:
            findings.append(_argv_check(where, spec, path, runtime, options, settings))
        family = FAMILY_OF[runtime]
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
            url = options.get("base_url") or DEFAULT_ENDPOINTS[runtime]
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
    from sweep.runtimes import SessionRequest, run_session
    with socket.socket() as sock:       # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = f"http://127.0.0.1:{port}" + ("/v1" if runtime == "codex" else "")
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
    if result.reason in ("cli_failed", "launch_error"):
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
