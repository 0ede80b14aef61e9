"""The provider contracts.

`run(ExecSpec) -> ExecResult` (one command in a sandbox on this host) is defined in
`sweep/execution.py`, below this package, so that sweep/harbor can run trials through it without
importing providers; its names are re-exported here for the providers that implement it.

Below: the lifecycle contract of remote sandboxes (Daytona, Modal; see docs/providers.md).

One folder per provider: `local/` (subprocess + bubblewrap), `daytona/`, `modal/`. Every provider
keeps the same guarantees: nothing writable outside `write_paths`, an explicit environment,
a walltime enforced from outside the sandbox, and no secret in any file the provider writes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from runstate.errors import ProviderError
from sweep.execution import (DEFAULT_LIMITS, ExecResult, ExecSpec, FromEnv, Limits, OutputChannel, Provider,
                             read_secret)

__all__ = [  # the execution contract (sweep.execution), re-exported for the providers
    "DEFAULT_LIMITS", "ExecResult", "ExecSpec", "FromEnv", "Limits", "OutputChannel", "Provider", "read_secret",
    # the remote sandbox lifecycle contract, defined here
    "ERROR_CLASSES", "TAG_KEYS", "GpuRequest", "SandboxError", "SandboxExecResult", "SandboxHandle", "SandboxInfo",
    "SandboxProvider", "SandboxSpec", "TerminateOutcome", "allowed_cidrs", "check_tags", "network_policy", "sandbox_name",
]


# --- Remote sandboxes: the lifecycle contract (Daytona, Modal; see docs/providers.md) -------------
#
# `run(ExecSpec)` above is one command in a fresh sandbox on this host. Remote providers have a
# lifecycle instead: create a sandbox from the task's environment, upload the workspace as one
# archive, exec commands in it, download the workspace, terminate it. Every sandbox carries a
# deterministic name and tags so a later `sweep reconcile` can find what a dead controller left.

TAG_KEYS = ("sweep.campaign", "sweep.run", "sweep.job", "sweep.role", "sweep.attempt", "sweep.instance")

ERROR_CLASSES = ("outage", "throttle", "config", "failure")


@dataclass(frozen=True)
class GpuRequest:
    count: int
    type: str | None = None               # provider's GPU type name ("H100"); None = any


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. Provider-neutral: each provider maps it (docs/providers.md has the table)."""
    name: str                             # deterministic (see sandbox_name); create is idempotent on it
    tags: dict[str, str]                  # TAG_KEYS, all set; values short ASCII
    dockerfile: Path | None = None        # the task's environment/Dockerfile; None = image below
    image: str | None = None              # a registry reference when there is no Dockerfile
    cpu: float = 1.0
    memory_mb: int = 2048
    disk_gb: int | None = None
    gpu: GpuRequest | None = None
    timeout_s: int = 3600                 # provider-side hard cap from creation (always set)
    idle_timeout_s: int | None = 900      # provider-side stop when idle (always set by remote providers)
    env: dict[str, str] = field(default_factory=dict)   # non-secret only
    agent_cli: str | None = None          # npm spec of the agent CLI the image installs (sweep/providers/image.py)
    network_block_all: bool = False       # no network at all inside (trials; sessions with network "none")
    # network "api": outbound only to these CIDRs (/32 or /128 of the endpoints' resolved addresses,
    # see remote.resolve_allow_list). Empty and not block_all = unrestricted egress (network "host")
    network_allow: tuple[str, ...] = ()


@dataclass(frozen=True)
class SandboxHandle:
    provider: str
    sandbox_id: str
    name: str
    tags: dict[str, str]
    image: str = ""                       # the image's identity (content hash) or registry reference
    network: str = ""                     # the policy the provider was asked for: none | api | host
    network_allow: tuple[str, ...] = ()   # network "api": the CIDRs passed to the provider


@dataclass(frozen=True)
class SandboxInfo:
    sandbox_id: str
    name: str
    tags: dict[str, str]
    state: str                            # the provider's own state word ("started", "stopped", ...)


@dataclass
class SandboxExecResult:
    rc: int | None                        # None: no exit code (walltime, stall, lost connection)
    timed_out: bool                       # the walltime (timeout_s) ended it
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    stopped: str | None = None            # "stalled": no output for idle_timeout_s, so it was stopped.
                                          # A stall is the provider's or the agent's hang, not the task's
                                          # verdict: callers treat it like an outage (retry, park)


class TerminateOutcome:
    CONFIRMED = "confirmed"               # the provider says it is gone
    ALREADY_GONE = "already_gone"         # not found: someone (or auto-delete) removed it
    REQUESTED = "requested"               # asked, not confirmed: reconcile must look again


@runtime_checkable
class SandboxProvider(Protocol):
    """The lifecycle contract. Every method raises ProviderError with `error_class` set
    (outage | throttle | config | failure) for a provider-side problem; see `classify`."""
    name: str
    environment_fidelity: str             # "container" for remote providers
    # the IP versions the provider's outbound allow list can express ((4,) or (4, 6)); () = it has
    # none, and network "api" is refused on it (never widened to full egress)
    network_allow_families: tuple[int, ...]

    def create(self, spec: SandboxSpec) -> SandboxHandle: ...
    def upload_archive(self, handle: SandboxHandle, local_dir: Path, remote_dir: str) -> None: ...
    # exec streams: `on_output` gets each piece of output as it arrives (not once at the end);
    # `timeout_s` is the walltime; `idle_timeout_s` (None = off) stops a command that has written
    # nothing for that long and reports `stopped="stalled"`.
    def exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: bytes | None = None, timeout_s: float,
             on_output: Callable[[str], None] | None = None,
             idle_timeout_s: float | None = None) -> SandboxExecResult: ...
    # unpacked with sweep.tree.extract_tar: files and directories only, names checked under dir
    # descriptors, only the `only` prefixes, at most `max_bytes` (ExtractRefused(limit=True) past it)
    def download_archive(self, handle: SandboxHandle, remote_dir: str, local_dir: Path, *,
                         only: list[str] | None = None, max_bytes: int | None = None) -> None: ...
    def terminate(self, handle: SandboxHandle) -> str: ...           # a TerminateOutcome value
    def list_by_tags(self, tags: dict[str, str]) -> list[SandboxInfo]: ...


def sandbox_name(tags: dict[str, str]) -> str:
    """The deterministic name: sw-<campaign>-<run>-<role>-a<attempt>-<instance>, at most 63 chars of
    [A-Za-z0-9-] (the common denominator of Modal's and Daytona's name rules)."""
    import re
    parts = [tags["sweep.campaign"], tags["sweep.run"], tags["sweep.role"], "a" + tags["sweep.attempt"],
             tags["sweep.instance"]]
    raw = "sw-" + "-".join(parts)
    clean = re.sub(r"[^A-Za-z0-9-]+", "-", raw)
    if len(clean) > 63:         # keep the instance id (the unique part) whole
        inst = re.sub(r"[^A-Za-z0-9-]+", "-", tags["sweep.instance"])
        clean = clean[: 62 - len(inst)] + "-" + inst
    return clean


def network_policy(spec: SandboxSpec) -> str:
    """The mode a spec asks the provider for: none | api | host."""
    if spec.network_block_all:
        return "none"
    return "api" if spec.network_allow else "host"


def allowed_cidrs(spec: SandboxSpec) -> tuple[str, ...]:
    """The outbound allow list a provider is given for `spec`: its CIDRs under network "api", ()
    when it blocks all network (none) or has no list (host)."""
    return () if spec.network_block_all else tuple(spec.network_allow)


def check_tags(tags: dict[str, str]) -> dict[str, str]:
    missing = [k for k in TAG_KEYS if not tags.get(k)]
    if missing:
        raise ValueError(f"sandbox tags missing: {', '.join(missing)}")
    return tags


class SandboxError(ProviderError):
    """A provider-side problem, classified: `error_class` is one of ERROR_CLASSES.
    outage: the provider is down for everyone; throttle: it refuses us for now; config: our key or
    settings are wrong (stop and alert); failure: an ordinary problem with this sandbox or task."""

    def __init__(self, message: str, *, error_class: str, evidence: str = "", **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        if error_class not in ERROR_CLASSES:
            raise ValueError(f"unknown error class {error_class!r}")
        self.error_class = error_class
        self.evidence = evidence
        self.nothing_ran = False       # refused before anything was created (e.g. network "api" it cannot narrow)
