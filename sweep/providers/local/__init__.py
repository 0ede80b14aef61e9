"""The local provider: a subprocess on this host, in bubblewrap where available.

Guarantees of `LocalProvider.run` (the same for role sessions and for task trials):
- The environment is built, never inherited: PATH (absolute entries only) and LANG from the caller,
  HOME and TMPDIR private to the run, the names in `env_passthrough` (a role's key family) when
  the caller has them, the spec's own non-secret variables, and secrets read from their files at
  launch. Nothing else from the caller's environment reaches the child.
- stdin is closed (or a file, `stdin_path`); the walltime is enforced from outside (TERM, grace,
  KILL on the process group).
- Every run is started under a keeper (keeper.py) that the kernel signals when the calling thread
  dies: a controller killed at any moment, even while bwrap is still setting up, takes the whole
  run with it (the sandbox's pid namespace, and with isolation none whatever the program forked).
- isolation "bwrap" (the default): an allowlist view of the host (see bwrap.py: system toolchain,
  minimal /etc, sweep's runtime, the declared read paths read-only; only `write_paths` writable;
  private /tmp and HOME; its own pid, ipc, uts and network namespaces; no capabilities) and the
  network mode of the spec (see network.py: none, api endpoints only, or host as a loud opt-in).
  isolation "none": the same process handling without any wall; only an explicit plan setting
  gets it, and every session and report says so. There is no silent fallback: a required bwrap
  that does not work is a ProviderError here, which the controller turns into a parked run.
- Secrets appear in the child's environment only: never in argv, in files the provider writes, or in
  the transcripts (their values are redacted from the streams before they reach disk).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from runstate.errors import ConfigError, ProviderError
from sweep.execution import SandboxEnvironment
from sweep.providers.base import ExecResult, ExecSpec, OutputChannel, read_secret
from sweep.providers.local.bwrap import (DEFAULT_TMP_BYTES, SANDBOX_HOME, SANDBOX_RELAY_DIR, SYSTEM_DIRS,
                                         SandboxView,
                                         bwrap_argv, probe_bwrap, runtime_read_paths, view_path)
from sweep.providers.local.limits import Bounds, tree_bytes
from sweep.providers.local.network import (RELAY_SCRIPT, Endpoint, HostRelay, hosts_file, network_mode,
                                           parse_endpoints)
from sweep.providers.local.keeper import PARENT_GONE
from sweep.providers.local.process import ProcessOutcome, run_process

log = logging.getLogger("sweep.providers.local")

ISOLATION_MODES = ("bwrap", "none")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_KILL_GRACE_S = 5.0
KEEPER_SCRIPT = Path(__file__).resolve().parent / "keeper.py"


def child_path(caller_path: str | None) -> str:
    """The caller's PATH without relative entries (a `.` entry would let the workspace shadow tools)."""
    entries = [p for p in (caller_path or "").split(os.pathsep) if p.startswith("/")]
    return os.pathsep.join(entries) or DEFAULT_PATH


class LocalProvider:
    name = "local"
    environment_fidelity = "host"
    # an `api` endpoint may be mapped onto a unix socket of the caller's (NAME:PORT=unix:/PATH): an
    # agent CLI's credential and metering relay (sweep/runtimes/wire) runs on this side
    wire_relay = True

    def __init__(self, isolation: str = "bwrap", kill_grace_s: float = DEFAULT_KILL_GRACE_S,
                 environment: SandboxEnvironment | None = None) -> None:
        if isolation == "auto":
            raise ConfigError("isolation 'auto' was removed: a session must never fall back to running "
                              "unsandboxed without saying so; use 'bwrap' (the default) or, knowingly, 'none'",
                              field="isolation")
        if isolation not in ISOLATION_MODES:
            raise ConfigError(f"unknown isolation {isolation!r}; use one of {', '.join(ISOLATION_MODES)}",
                              field="isolation")
        self.requested_isolation = isolation
        # the plan's declared toolchains: exactly this PATH, these binds and variables in every run
        # (None: the caller's PATH, as before `[environment]` existed)
        self.environment = environment
        self.kill_grace_s = float(kill_grace_s)
        self._bwrap: str | None = None
        self.isolation_note = ""
        if isolation == "none":
            self.isolation = "none"
            self.isolation_note = "UNSANDBOXED: the plan sets isolation = 'none'"
            return
        exe, why = probe_bwrap()
        if exe is None:
            raise ProviderError(f"isolation = 'bwrap' is required but unusable: {why}",
                                field="isolation",
                                hint="install bubblewrap (apt-get install bubblewrap) and enable user namespaces, "
                                     "or set isolation = 'none' in the plan to run unsandboxed knowingly")
        self._bwrap = exe
        self.isolation = "bwrap"

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
        declared = self.environment
        env = {
            "PATH": child_path(declared.path_text if declared is not None else os.environ.get("PATH")),
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "HOME": home,
            "TMPDIR": tmpdir,
        }
        if declared is not None:
            env.update(dict(declared.variables))
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

    def sandbox_path_of(self, view: tuple[tuple[Path, str], ...], path: Path) -> str:
        """`path` as a run with this fixed view sees it (its host path when nothing sandboxes it)."""
        if self.isolation != "bwrap":
            return str(path)
        return view_path(str(Path(path).resolve()), tuple((Path(h).resolve(), t) for h, t in view))

    def _resolve(self, argv0: str, cwd: Path, path: str) -> str | None:
        if "/" in argv0:
            return str(cwd / argv0) if not argv0.startswith("/") else argv0
        return shutil.which(argv0, path=path)

    def _checked(self, spec: ExecSpec) -> tuple[ExecSpec, Path]:
        """The spec with the declared toolchains among its read paths, and its working directory;
        a working directory or writable path that does not exist is a ProviderError before anything starts."""
        if self.environment is not None and self.environment.binds:
            # the declared toolchains are bound read-only like any read path (and PATH keeps them)
            spec = dataclasses.replace(spec, read_paths=(*spec.read_paths, *self.environment.binds))
        cwd = Path(spec.cwd)
        if not cwd.is_dir():
            raise ProviderError("the working directory does not exist", path=cwd)
        for path in spec.write_paths:
            if not Path(path).exists():
                raise ProviderError("a writable path does not exist (create it before the run)", path=path)
        return spec, cwd

    def _homes(self, held: _Held) -> tuple[str, str]:
        """HOME and TMPDIR of the run: the sandbox's private ones, or a fresh private directory on
        the host without a sandbox (removed when the run ends)."""
        if self.isolation == "bwrap":
            return SANDBOX_HOME, "/tmp"   # noqa: S108 - the sandbox's private tmpfs
        held.private_home = tempfile.mkdtemp(prefix="sweep-home-")
        tmpdir = os.path.join(held.private_home, "tmp")
        os.mkdir(tmpdir, 0o700)
        return held.private_home, tmpdir

    def _find(self, spec: ExecSpec, cwd: Path, env: dict[str, str]) -> str | None:
        """The program's executable (None when there is none); under bwrap, env's PATH becomes what
        the sandbox shows."""
        argv0 = spec.argv[0]
        if self.isolation != "bwrap":
            return self._resolve(argv0, cwd, env["PATH"])
        # The program is found on the caller's PATH (it is then bound into the view), except in
        # version-manager shim directories (pyenv, rbenv, asdf: `.../shims`), whose scripts dispatch
        # through a tree the sandbox does not show. Inside, PATH keeps only the entries that exist there.
        exe = self._resolve(argv0, cwd, _without_shims(env["PATH"]))
        env["PATH"] = _visible_path(env["PATH"], spec)
        return exe

    def _sandboxed(self, spec: ExecSpec, cwd: Path, argv: list[str], env: dict[str, str], mode: str,
                   endpoints: list[Endpoint], held: _Held) -> tuple[list[str], list[str], dict[str, str]]:
        """The bwrap command line for argv (as recorded, and as launched: its options through a
        descriptor) and the environment as the sandbox shows it; the api relay and the view's data
        descriptors are recorded in `held` as soon as they exist."""
        exe = argv[0]
        view = SandboxView(spec, extra_read=(Path(exe), Path(os.path.realpath(exe))),
                           tmp_bytes=spec.limits.tmp_bytes or DEFAULT_TMP_BYTES,
                           share_resolver=mode == "host",
                           hosts=hosts_file(endpoints) if endpoints else None)
        if endpoints:
            held.relay = relay = HostRelay(endpoints)
            relay.start()
            view.relay_dir = relay.dir
            argv = [sys.executable, "-I", "-S", str(RELAY_SCRIPT), *relay.sandbox_args(SANDBOX_RELAY_DIR),
                    "--", *argv]
        mounts, (data_args, held.data_fds) = view.mount_args(), view.data_fds()   # data_fds after mount_args
        if self._bwrap is None:      # never: isolation "bwrap" is set only with a probed executable
            raise ProviderError("isolation 'bwrap' without a bwrap executable", field="isolation")
        shown_cwd, argv, env = _in_view(spec, cwd, argv, env)
        full = bwrap_argv(self._bwrap, shown_cwd, argv, unshare_net=mode != "host", mounts=mounts,
                          data_args=data_args,
                          caps=("CAP_NET_BIND_SERVICE", "CAP_SETPCAP") if endpoints else ())
        # bwrap stays the sandbox's pid 1, and its command line is readable there (/proc/1/cmdline):
        # its options, which name every bind's host path, go through a sealed descriptor instead
        options = full[1:len(full) - len(argv) - 1]
        fd = os.memfd_create("sweep-bwrap-args", os.MFD_CLOEXEC)
        os.write(fd, b"".join(o.encode() + b"\0" for o in options))
        os.lseek(fd, 0, os.SEEK_SET)
        held.data_fds.append(fd)
        return full, [full[0], "--args", str(fd), "--", *argv], env

    def _launch(self, spec: ExecSpec, full: list[str], env: dict[str, str], cwd: Path, bounds: Bounds,
                secrets: list[str], data_fds: list[int], watch: Callable[[], str | None]) -> ProcessOutcome:
        """Run the command under the keeper, bounded, until it ends (or its time is up)."""
        bounds.prepare()
        # the keeper stands between this process and the run: if we die, it ends everything
        # the run holds (see keeper.py)
        kept = [sys.executable, "-I", "-S", str(KEEPER_SCRIPT), "--parent", str(os.getpid()),
                *[arg for group in bounds.cgroup_dirs for arg in ("--cgroup", str(group))], "--", *full]
        return run_process(kept, env=env, cwd=cwd, timeout_s=spec.timeout_s,
                           keep_bytes=spec.limits.transcript_bytes, preexec_fn=bounds.preexec,
                           poll=watch,
                           stdout_path=spec.stdout_path, stderr_path=spec.stderr_path,
                           secrets=secrets, pass_fds=(*spec.pass_fds, *data_fds), stdin_path=spec.stdin_path,
                           idle_timeout_s=spec.idle_timeout_s, stdout_watch=spec.stdout_watch,
                           kill_grace_s=self.kill_grace_s if spec.kill_grace_s is None else spec.kill_grace_s,
                           end_signal=PARENT_GONE)

    def run(self, spec: ExecSpec) -> ExecResult:
        spec, cwd = self._checked(spec)
        mode = network_mode(spec.network)
        endpoints = parse_endpoints(spec.endpoints) if mode == "api" else []
        if mode == "host":
            log.warning("sweep: a session runs with the HOST network (network = 'host'): it can reach every "
                        "host service and address; %s", " ".join(spec.argv)[:200])
        held = _Held()
        bounds = Bounds(spec.limits)
        workspace_hit: list[str] = []

        def watch_workspace() -> str | None:
            limit = spec.limits.workspace_bytes
            if limit is not None and spec.write_paths and tree_bytes(spec.write_paths) > limit:
                workspace_hit.append("workspace_bytes")
                return f"the writable paths hold more than {limit} bytes"
            return spec.stop_poll() if spec.stop_poll is not None else None

        home, tmpdir = self._homes(held)
        try:
            env, secrets = self._environment(spec, home, tmpdir)
            argv = list(spec.argv)
            exe = self._find(spec, cwd, env)
            if exe is None or not os.access(exe, os.X_OK):
                return ExecResult(rc=None, timed_out=False, duration_s=0.0, stdout_tail="", stderr_tail="",
                                  isolation=self.isolation, argv=argv, env_names=sorted(env),
                                  launch_error=f"command not found: {argv[0]}", network=mode,
                                  endpoints=[e.text for e in endpoints])
            argv[0] = exe
            if self.isolation == "bwrap":
                full, launched, env = self._sandboxed(spec, cwd, argv, env, mode, endpoints, held)
            else:
                full = launched = argv
            outcome = self._launch(spec, launched, env, cwd, bounds, secrets, held.data_fds, watch_workspace)
            limit_hit = workspace_hit[0] if workspace_hit else _limit_hit(outcome, bounds)
        finally:
            bounds.finish()
            held.release()
        return ExecResult(rc=outcome.rc, timed_out=outcome.timed_out, duration_s=outcome.duration_s,
                          stdout_tail=outcome.stdout_tail, stderr_tail=outcome.stderr_tail,
                          isolation=self.isolation, argv=full, env_names=sorted(env),
                          pid=outcome.pid, pgid=outcome.pgid, launch_error=outcome.launch_error,
                          signal=outcome.signal, stopped=outcome.stopped, limit_hit=limit_hit,
                          limits_enforced=dict(bounds.enforced),
                          network=mode if self.isolation == "bwrap" else "host",
                          endpoints=[e.text for e in endpoints])


@dataclasses.dataclass
class _Held:
    """What a run holds until it ends, released by `LocalProvider.run` whatever raised."""
    private_home: str | None = None
    relay: HostRelay | None = None
    data_fds: list[int] = dataclasses.field(default_factory=list)

    def release(self) -> None:
        for fd in self.data_fds:
            os.close(fd)
        if self.relay is not None:
            self.relay.close()
        if self.private_home is not None:
            shutil.rmtree(self.private_home, ignore_errors=True)


def _limit_hit(outcome: ProcessOutcome, bounds: Bounds) -> str | None:
    """Which of the run's bounds ended it, if one did."""
    limit_hit = bounds.hit(outcome.stderr_tail)
    if limit_hit is None and (outcome.signal == signal.SIGXFSZ or outcome.rc == 128 + signal.SIGXFSZ
                              or "File too large" in outcome.stderr_tail):
        limit_hit = "file_size"     # SIGXFSZ, or EFBIG where the writer ignores the signal (Python)
    return limit_hit


def _in_view(spec: ExecSpec, cwd: Path, argv: list[str],
             env: dict[str, str]) -> tuple[str, list[str], dict[str, str]]:
    """The working directory, argv and environment as the sandbox shows them under the spec's fixed
    view (ExecSpec.view): a host path under one of its directories is named where the view puts it
    (PATH entry by entry)."""
    view = tuple((Path(h).resolve(), t) for h, t in spec.view)
    if not view:
        return str(cwd.resolve()), argv, env
    shown = {k: view_path(v, view) for k, v in env.items()}
    shown["PATH"] = os.pathsep.join(view_path(e, view) for e in env["PATH"].split(os.pathsep))
    return view_path(str(cwd.resolve()), view), [view_path(a, view) for a in argv], shown


def _without_shims(path: str) -> str:
    return os.pathsep.join(e for e in path.split(os.pathsep) if os.path.basename(e.rstrip("/")) != "shims")


def _visible_path(path: str, spec: ExecSpec) -> str:
    """PATH entries that exist inside the sandbox: under a system directory, sweep's runtime or a
    declared read path (compared as normalised strings: Path.parents per entry and root cost
    ~2 ms a run)."""
    roots = [f"/{name}" for name in SYSTEM_DIRS]
    roots += [str(p) for p in (*runtime_read_paths(), *(Path(p) for p in spec.read_paths))]
    keep = []
    for entry in path.split(os.pathsep):
        shown = str(Path(entry))
        if any(root == "/" or shown == root or shown.startswith(root + "/") for root in roots):
            keep.append(entry)
    return os.pathsep.join(keep) or DEFAULT_PATH


__all__ = ["LocalProvider", "read_secret", "ISOLATION_MODES"]
