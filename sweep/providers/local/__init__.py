"""The local provider: a subprocess on this host, in bubblewrap where available.

Guarantees of `LocalProvider.run` (the same for role sessions and for task trials):
- The environment is built, never inherited: PATH (absolute entries only) and LANG from the caller,
  HOME and TMPDIR private to the run, the names in `env_passthrough` (a role's key family) when
  the caller has them, the spec's own non-secret variables, and secrets read from their files at
  launch. Nothing else from the caller's environment reaches the child.
- stdin is closed (or a file, `stdin_path`); the walltime is enforced from outside (TERM, grace, KILL on the process group).
- isolation "bwrap": root read-only, only `write_paths` writable, private /tmp and HOME, its own pid
  namespace (so nothing outlives it), no capabilities, and no network unless asked for.
  isolation "none": the same process handling without the filesystem and network walls; the
  audit after a role session still catches changes in the workspace, but not writes elsewhere on
  the host. "auto" (the default) uses bwrap when the probe succeeds and otherwise warns once.
- Secrets appear in the child's environment only: never in argv, in files the provider writes, or in
  the transcripts (their values are redacted from the streams before they reach disk).
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from runstate.errors import ConfigError, ProviderError
from sweep.providers.base import ExecResult, ExecSpec, OutputChannel, read_secret
from sweep.providers.local.bwrap import SANDBOX_HOME, bwrap_argv, probe_bwrap
from sweep.providers.local.process import run_process

log = logging.getLogger("sweep.providers.local")

ISOLATION_MODES = ("auto", "bwrap", "none")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_KILL_GRACE_S = 5.0
_warned_unsandboxed = False


def child_path(caller_path: str | None) -> str:
    """The caller's PATH without relative entries (a `.` entry would let the workspace shadow tools)."""
    entries = [p for p in (caller_path or "").split(os.pathsep) if p.startswith("/")]
    return os.pathsep.join(entries) or DEFAULT_PATH


class LocalProvider:
    name = "local"
    environment_fidelity = "host"

    def __init__(self, isolation: str = "auto", kill_grace_s: float = DEFAULT_KILL_GRACE_S) -> None:
        global _warned_unsandboxed
        if isolation not in ISOLATION_MODES:
            raise ConfigError(f"unknown isolation {isolation!r}; use one of {', '.join(ISOLATION_MODES)}",
                              field="isolation")
        self.requested_isolation = isolation
        self.kill_grace_s = float(kill_grace_s)
        self._bwrap: str | None = None
        self.isolation_note = ""
        if isolation == "none":
            self.isolation = "none"
            self.isolation_note = "isolation = 'none' was requested"
            return
        exe, why = probe_bwrap()
        if exe is not None:
            self._bwrap = exe
            self.isolation = "bwrap"
            return
        if isolation == "bwrap":
            raise ProviderError(f"isolation = 'bwrap' is required but unusable: {why}",
                                field="isolation",
                                hint="install bubblewrap (apt-get install bubblewrap) or set isolation = 'auto'")
        self.isolation = "none"
        self.isolation_note = f"running without a sandbox: {why}"
        if not _warned_unsandboxed:
            _warned_unsandboxed = True
            log.warning("sweep: %s; role sessions run unsandboxed (the workspace audit still applies). "
                        "Install bubblewrap or set isolation = 'bwrap' to require it.", why)

    # --- output channel ---------------------------------------------------------------------

    def open_output_channel(self, host_path: Path) -> OutputChannel:
        fd = os.open(host_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        return OutputChannel(host_path=Path(host_path), sandbox_path=f"/dev/fd/{fd}", fd=fd)

    def close_output_channel(self, channel: OutputChannel) -> None:
        try:
            os.close(channel.fd)
        except OSError:
            pass

    # --- run --------------------------------------------------------------------------------

    def _environment(self, spec: ExecSpec, home: str, tmpdir: str) -> tuple[dict[str, str], list[str]]:
        env = {
            "PATH": child_path(os.environ.get("PATH")),
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "HOME": home,
            "TMPDIR": tmpdir,
        }
        secrets: list[str] = []
        for name in spec.env_passthrough:
            if os.environ.get(name):
                env[name] = os.environ[name]
                secrets.append(env[name])   # a key family's values are credentials: keep them off disk
        env.update(spec.env)
        for name, path in spec.secret_env.items():
            env[name] = read_secret(name, path)
            secrets.append(env[name])
        return env, secrets

    def run(self, spec: ExecSpec) -> ExecResult:
        cwd = Path(spec.cwd)
        if not cwd.is_dir():
            raise ProviderError("the working directory does not exist", path=cwd)
        for path in spec.write_paths:
            if not Path(path).exists():
                raise ProviderError("a writable path does not exist (create it before the run)", path=path)
        private_home = None
        if self.isolation == "bwrap":
            home, tmpdir = SANDBOX_HOME, "/tmp"   # noqa: S108 - the sandbox's private tmpfs
        else:
            private_home = tempfile.mkdtemp(prefix="sweep-home-")
            home = private_home
            tmpdir = os.path.join(private_home, "tmp")
            os.mkdir(tmpdir, 0o700)
        try:
            env, secrets = self._environment(spec, home, tmpdir)
            argv = list(spec.argv)
            if "/" in argv[0]:
                exe = str(cwd / argv[0]) if not argv[0].startswith("/") else argv[0]
            else:
                exe = shutil.which(argv[0], path=env["PATH"])
            if exe is None or not os.access(exe, os.X_OK):
                return ExecResult(rc=None, timed_out=False, duration_s=0.0, stdout_tail="", stderr_tail="",
                                  isolation=self.isolation, argv=argv, env_names=sorted(env),
                                  launch_error=f"command not found: {argv[0]}")
            argv[0] = exe
            if self.isolation == "bwrap":
                spec_for_binds = _with_read_path(spec, Path(exe))
                full = bwrap_argv(self._bwrap, spec_for_binds, argv)
            else:
                full = argv
            outcome = run_process(full, env=env, cwd=cwd, timeout_s=spec.timeout_s,
                                  stdout_path=spec.stdout_path, stderr_path=spec.stderr_path,
                                  secrets=secrets, pass_fds=spec.pass_fds, stdin_path=spec.stdin_path,
                                  idle_timeout_s=spec.idle_timeout_s, stdout_watch=spec.stdout_watch,
                                  kill_grace_s=self.kill_grace_s if spec.kill_grace_s is None else spec.kill_grace_s)
        finally:
            if private_home is not None:
                shutil.rmtree(private_home, ignore_errors=True)
        return ExecResult(rc=outcome.rc, timed_out=outcome.timed_out, duration_s=outcome.duration_s,
                          stdout_tail=outcome.stdout_tail, stderr_tail=outcome.stderr_tail,
                          isolation=self.isolation, argv=full, env_names=sorted(env),
                          pid=outcome.pid, pgid=outcome.pgid, launch_error=outcome.launch_error,
                          signal=outcome.signal, stopped=outcome.stopped)


def _with_read_path(spec: ExecSpec, path: Path) -> ExecSpec:
    from dataclasses import replace
    return replace(spec, read_paths=(*spec.read_paths, path))


__all__ = ["LocalProvider", "read_secret", "ISOLATION_MODES"]
