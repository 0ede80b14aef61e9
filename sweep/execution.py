"""The execution contract: run one command in a sandbox, bounded in time, space and environment.

A provider knows nothing about roles or agents. It is given an `ExecSpec` that already says what
is writable, what must be visible, whether the network is on, which environment variables the
child may see and how long it may run; it returns an `ExecResult` that says what happened. The
session runtimes (sweep/runtimes) turn a RoleSpec into an ExecSpec; the Harbor trial runner
(sweep/harbor) uses the same contract to run a task's solution and tests.

Here, below both, so that the providers (sweep/providers, which implement `Provider`) and the code
that runs commands through one (sweep/harbor, sweep/runtimes) share the contract without the task
bundle code importing the providers package (docs/architecture.md). Stdlib + runstate.errors only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from runstate.errors import ProviderError


@dataclass(frozen=True)
class Limits:
    """Resource bounds of one sandboxed run; None = unbounded. See docs/security.md for what
    enforces each where (cgroup, rlimit, a watcher) and what `limit_hit` then says."""
    memory_bytes: int | None = 8 << 30        # the run's memory: cgroup when usable, else RLIMIT_AS
    processes: int | None = 512               # tasks at once: cgroup pids, else RLIMIT_NPROC (not root)
    file_bytes: int | None = 4 << 30          # one file's size: RLIMIT_FSIZE
    workspace_bytes: int | None = 4 << 30     # apparent size of everything under write_paths, watched
    transcript_bytes: int | None = 8 << 20    # kept per stream: the first and last halves, cut marked
    tmp_bytes: int | None = 1 << 30           # the private /tmp (memory-backed)


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class SandboxEnvironment:
    """The toolchains a sandbox sees: what the plan's `[environment]` declares, resolved by
    `sweep init` (sweep/models/environment.py). `path` is the child's whole PATH (absolute
    entries, in order); `binds` are bound read-only (never a home directory); `variables` are set
    in every session and trial. A provider given one uses exactly it, never the caller's PATH."""
    path: tuple[str, ...] = ()
    binds: tuple[Path, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()

    @property
    def path_text(self) -> str:
        return os.pathsep.join(self.path)


@dataclass(frozen=True)
class FromEnv:
    """A secret read at launch from the caller's environment variable `name` (never stored)."""
    name: str


@dataclass(frozen=True)
class ExecSpec:
    argv: list[str]                       # never a shell string
    cwd: Path
    timeout_s: float                      # walltime, enforced from outside (TERM, grace, KILL)
    write_paths: tuple[Path, ...] = ()    # the ONLY writable host paths; empty = read-only session
    read_paths: tuple[Path, ...] = ()     # host paths that must be visible (read-only) in the sandbox
    network: bool | str = False           # "none" | "api" | "host" (False = none, True = api); see
                                          # sweep/providers/local/network.py
    endpoints: tuple[str, ...] = ()       # network "api": HOST:PORT or NAME:PORT=HOST:PORT reachable
    env: dict[str, str] = field(default_factory=dict)         # non-secret variables to set
    env_passthrough: tuple[str, ...] = ()  # names copied from the caller's environment when set
    secret_env: dict[str, Path | FromEnv] = field(default_factory=dict)  # name -> file or FromEnv, read at launch
    stdout_path: Path | None = None       # transcript files, created 0600, secrets redacted
    stderr_path: Path | None = None
    pass_fds: tuple[int, ...] = ()        # open descriptors the child inherits (output channel)
    kill_grace_s: float | None = None     # None = the provider's default
    limits: Limits = DEFAULT_LIMITS
    stdin_path: Path | None = None        # a file given as the child's stdin (a prompt); None = closed
    idle_timeout_s: float | None = None   # no stdout for this long -> stopped as "stalled" (agent CLIs
                                          # that retry a dead endpoint forever must not hold a slot)
    # Called with each chunk of (redacted) stdout as it arrives; a non-empty return value stops the
    # process group and is reported as `stopped`. How sweep enforces caps a CLI cannot apply itself.
    stdout_watch: Callable[[bytes], str | None] | None = None
    # Called about once a second while the process runs, output or not; a non-empty return value
    # stops it like stdout_watch's (an injected fault that waits for the CLI to write its state).
    # The local provider calls it; the others only see stdout_watch.
    stop_poll: Callable[[], str | None] | None = None
    # A fixed view: host directory -> the path the sandbox shows it at (the repository at /app, as
    # the task container's WORKDIR). Every bound path under one, the working directory, argv and
    # environment values naming one are shown there, so no host path, campaign or run id is seen.
    # A provider without a sandbox of its own (isolation none) runs at the host paths.
    view: tuple[tuple[Path, str], ...] = ()


@dataclass
class ExecResult:
    rc: int | None                        # None when it never started or was killed
    timed_out: bool
    duration_s: float
    stdout_tail: str                      # last few KB, secrets redacted
    stderr_tail: str
    isolation: str                        # "bwrap" | "none": what actually enforced the spec
    argv: list[str]                       # what was executed, sandbox prefix included (no secrets)
    env_names: list[str]                  # names only, never values
    pid: int | None = None
    pgid: int | None = None
    launch_error: str | None = None       # e.g. "command not found: my-agent"
    signal: int | None = None             # the signal that ended the process, if any
    stopped: str | None = None            # why sweep stopped it early: "stalled" or the watcher's reason
    limit_hit: str | None = None          # "memory" | "processes" | "file_size" | "workspace_bytes"
    limits_enforced: dict = field(default_factory=dict)   # bound -> how it was enforced (or "none")
    network: str = ""                     # the network mode that was in force: none | api | host
    endpoints: list[str] = field(default_factory=list)   # network "api": what was reachable
    network_allow: list[str] = field(default_factory=list)   # remote "api": the CIDRs the provider enforces


@dataclass(frozen=True)
class OutputChannel:
    """A file the session writes its structured output to without any writable bind.

    `sandbox_path` is what the agent is told (e.g. `/dev/fd/7`); the provider passes `fd`, an open
    descriptor of `host_path`, to the child, so the write lands outside the sandbox while every
    mounted path stays read-only.
    """
    host_path: Path
    sandbox_path: str
    fd: int


@runtime_checkable
class Provider(Protocol):
    name: str
    isolation: str                        # effective isolation: "bwrap" | "none"
    environment_fidelity: str             # "host": task Dockerfiles are not built; see docs/tasks.md

    def run(self, spec: ExecSpec) -> ExecResult: ...

    def open_output_channel(self, host_path: Path) -> OutputChannel: ...

    def close_output_channel(self, channel: OutputChannel) -> None: ...


def read_secret(name: str, path: Path | FromEnv) -> str:
    """A secret's value from its file (trailing newline dropped). The message names the file only.

    Here, with the contract, so a runtime that needs a secret's value (to redact it) never imports
    a concrete provider."""
    if isinstance(path, FromEnv):
        value = os.environ.get(path.name, "")
        if not value:
            raise ProviderError(f"the secret for {name} comes from the environment variable {path.name}, "
                                "which is not set", field="secrets")
        return value
    try:
        value = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderError(f"cannot read the secret for {name}: {exc.strerror or exc}", path=path) from None
    value = value.rstrip("\r\n")
    if not value:
        raise ProviderError(f"the secret file for {name} is empty", path=path)
    return value


def view_path(text: str, view: tuple[tuple[Path, str], ...]) -> str:
    """`text` as a sandbox with this fixed view (ExecSpec.view) shows it: a host path under a
    directory of the view moved to where the view puts it (the deepest directory wins); anything
    else unchanged."""
    for host, target in sorted(view, key=lambda v: -len(str(v[0]))):
        root = str(host).rstrip("/")
        if text == root:
            return target
        if text.startswith(root + "/"):
            return target.rstrip("/") + text[len(root):]
    return text
