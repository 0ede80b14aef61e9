"""The scheduler contract: everything sweep asks of Slurm (or of the local stand-in).

The tick's side (`Scheduler`, one instance per tick): `submit` one controller job, read the whole
`queue()` of this campaign in ONE call, `cancel` jobs, `end_states` of vanished jobs (at most one
call per tick), `capacity()`, and `job_environment(job)` (exactly what a job gets). The side
that needs no instance (`SchedulerBackend`, the backend's class): `preflight` (what init and
doctor check before anything runs), and what a running controller asks about its own job:
`job_restart_count` and, after SIGTERM, `job_stop_cause`. The controller and `sweep doctor`
use only this module's names; nothing outside sweep/scheduler/ imports a backend's modules or
reads SLURM_* itself. tests/test_scheduler_contract.py runs every backend through all of it.
The contract every backend keeps:

- `queue()` never raises for a scheduler problem. When the scheduler cannot be asked (controller
  down, timeout, garbage output) it returns an explicit UNKNOWN (`known=False` plus the
  scheduler's own message), never an empty queue: an empty queue would make the tick judge every
  active run's job dead and resubmit them all while they are still running.
- `submit` returns a job id or raises SchedulerError carrying the scheduler's stderr; it refuses a
  bad JobSpec (job name, environment name) before anything runs.
- `cancel` is idempotent: unknown or finished job ids are fine.
- Every job sees `SWEEP_JOB_ID` (the id `submit` returned) so the controller can compare it with
  its lease holder.
- A job gets the environment `job_environment(job)` says, never the submitter's own scheduler job
  context (`SLURM_*` bar `SLURM_CONF`): a tick running inside a Slurm job (scrontab) would
  otherwise hand its SLURM_RESTART_COUNT to every controller it submits.
- `capacity()` says what each lane can ever provide (None = unknown), so the tick can hold a GPU
  run on a machine without GPUs with a message instead of submitting it to wait forever.
- `end_states` never raises for a scheduler problem: it answers, or says it could not
  (`known=False`), or that this site keeps no record (`available=False`).
- `job_restart_count(environ, job_id)` counts only restarts of `job_id` itself, as seen from
  inside that job (0 when `environ` is another job's); `job_stop_cause` is ONE bounded question
  and says `unknown` rather than wait.

Only stdlib at module level: `sweep status` imports this module and must stay light.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

JOB_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_JOB_NAME = 200          # below every Slurm limit we know of; squeue prints it untruncated
RESERVED_ENV = frozenset({"SWEEP_JOB_ID"})   # set by the scheduler itself, never by the caller
# A job's own scheduler context: set by the scheduler for each job, never passed from the submitter
# (SLURM_CONF is configuration, not context: clients in the job need it to find the cluster).
JOB_CONTEXT_PREFIXES = ("SLURM_", "SLURMD_")
NOT_JOB_CONTEXT = frozenset({"SLURM_CONF"})

# partition names the local backend reports, so the tick can tell the lanes apart in `queue()`
LANE_CPU = "cpu"
LANE_GPU = "gpu"


@dataclass(frozen=True)
class JobSpec:
    """One controller job. Built by the tick from validated ids; checked again by `validate_job`."""

    name: str                          # [A-Za-z0-9._-]+, e.g. "sw.<cid>.<token>.<run_id>"
    argv: list[str]                    # the controller command, an argv list (never a shell string)
    workdir: Path                      # the run directory
    stdout: Path                       # run_dir/logs/controller.out (created 0600)
    stderr: Path                       # run_dir/logs/controller.err (created 0600)
    gpus: int = 0                      # > 0 -> GPU lane with the full device count
    env: dict[str, str] = field(default_factory=dict)   # extra environment; never secrets
    script_path: Path | None = None    # where the rendered job script is kept for audit (slurm)
    # names whose values the job gets from the submitter's environment (values never rendered into
    # the job script, so a secret passed here stays out of every file); see job_environment()
    pass_env: tuple[str, ...] = ()

    @property
    def lane(self) -> str:
        return LANE_GPU if self.gpus > 0 else LANE_CPU


@dataclass(frozen=True)
class JobInfo:
    """One job as the scheduler reports it."""

    job_id: str
    name: str
    state: str          # Slurm's long state name: PENDING, RUNNING, COMPLETING, ...
    reason: str         # why it pends ("Resources", "Priority", "None", ...)
    partition: str
    gres: str           # the raw GPU request as printed ("gres:gpu:2", "gres/gpu:a100:2", "")
    gpus: int           # parsed device count (0 for CPU jobs)


@dataclass(frozen=True)
class QueueSnapshot:
    """This campaign's jobs as seen by ONE scheduler call, or UNKNOWN."""

    known: bool                     # False = UNKNOWN: the scheduler could not be asked; nothing is dead
    jobs: dict[str, JobInfo]        # job id -> info, only this campaign's jobs (name prefix filter)
    error: str | None = None        # the scheduler's own message when unknown

    @classmethod
    def unknown(cls, error: str) -> QueueSnapshot:
        return cls(known=False, jobs={}, error=error)

    @classmethod
    def of(cls, jobs: Iterable[JobInfo]) -> QueueSnapshot:
        return cls(known=True, jobs={job.job_id: job for job in jobs}, error=None)


@dataclass(frozen=True)
class EndStates:
    """How vanished jobs ended, from ONE optional `end_states(job_ids)` call of a backend.

    Backends that can say (Slurm through sacct, the local backend from its own records) implement
    `end_states`; the tick asks at most once per tick and only when a job vanished.
    """

    asked: bool = False                              # False: nothing vanished, no call was made
    known: bool = False                              # the call answered
    available: bool = True                           # False: the site keeps no accounting at all
    states: dict[str, str] = field(default_factory=dict)   # job id -> Slurm end state ("PREEMPTED", ...)
    error: str | None = None

    @classmethod
    def unavailable(cls, why: str) -> EndStates:
        return cls(asked=True, known=False, available=False, error=why)


@dataclass(frozen=True)
class StopCause:
    """Why the scheduler is stopping a job, as the job itself learns it after SIGTERM."""

    cause: str            # preempted | requeued | node_fail | time_limit | cancelled | unknown
    detail: str
    requeued: bool = False     # the scheduler reruns this same job id: the run stays active for it


@dataclass(frozen=True)
class Finding:
    """One preflight finding: an error refuses init (naming the plan field), a warning is shown."""

    level: str            # "error" | "warning"
    field: str
    message: str


@dataclass(frozen=True)
class Preflight:
    findings: list[Finding]
    checked: str | None = None     # what was checked and held, for `sweep doctor`'s "ok" line


@runtime_checkable
class Scheduler(Protocol):
    name: str

    def submit(self, job: JobSpec) -> str: ...             # job id; raises SchedulerError with stderr
    def queue(self) -> QueueSnapshot: ...                  # ONE call; UNKNOWN on failure/timeout
    def cancel(self, job_ids: Iterable[str]) -> None: ...  # idempotent
    def capacity(self) -> dict[str, int | None]: ...       # lane -> devices/slots it can ever give
    def end_states(self, job_ids: Iterable[str]) -> EndStates: ...   # ONE call, only for vanished jobs
    def job_environment(self, job: JobSpec) -> dict[str, str]: ...   # exactly what the job gets


class SchedulerBackend(Protocol):
    """What is asked of a backend without a scheduler instance (its class): before a campaign
    exists, and from inside a running job."""

    name: str
    uses_lanes: bool     # jobs go to the plan's [scheduler.lanes] (a GPU run needs a GPU lane)
    # jobs start from the environment of the process that ticks (the local backend: this shell, or
    # `sweep run`); False: from the scheduler's (a Slurm job from scrontab gets the login PATH), so
    # a plan with no [environment] is warned at init
    jobs_get_tickers_environment: bool

    def preflight(self, settings: Any, needs_gpu_lane: bool, max_gpus: int) -> Preflight: ...
    def job_restart_count(self, environ: Mapping[str, str], job_id: str) -> int: ...
    def job_stop_cause(self, job_id: str, restarts: int, environ: Mapping[str, str]) -> StopCause: ...


def check_job_name(name: str) -> str:
    """Return `name` if it is safe as a Slurm job name; ValueError naming the problem otherwise.

    Names reach argv only, never a shell, but a name is also how `queue()` recognises this
    campaign's jobs, so anything outside [A-Za-z0-9._-] is refused rather than escaped.
    """
    if not isinstance(name, str) or not JOB_NAME_RE.fullmatch(name):
        raise ValueError(f"job name {name!r} is not allowed: use only letters, digits, '.', '_' and '-'")
    if len(name) > MAX_JOB_NAME:
        raise ValueError(f"job name is {len(name)} characters long; the limit is {MAX_JOB_NAME}")
    return name


def check_name_prefix(prefix: str) -> str:
    """A campaign's job-name prefix must itself be a valid (non-empty) job name fragment."""
    if not prefix or not JOB_NAME_RE.fullmatch(prefix):
        raise ValueError(f"job-name prefix {prefix!r} is not allowed: use only letters, digits, '.', '_' and '-'")
    return prefix


def check_job_env(env: Mapping[str, str]) -> dict[str, str]:
    """Validate the extra environment of a job: POSIX names, string values without NUL."""
    checked: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
            raise ValueError(f"environment name {key!r} is not allowed: use [A-Za-z_][A-Za-z0-9_]*")
        if key in RESERVED_ENV:
            raise ValueError(f"environment name {key} is set by the scheduler and cannot be overridden")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"environment value of {key} must be a string without NUL bytes")
        checked[key] = value
    return checked


def is_job_context(name: str) -> bool:
    """True for a variable that describes the submitter's own scheduler job (SLURM_JOB_ID,
    SLURM_RESTART_COUNT, ...): it must never reach another job."""
    return name.startswith(JOB_CONTEXT_PREFIXES) and name not in NOT_JOB_CONTEXT


def without_job_context(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not is_job_context(k)}


def passed_environment(job: JobSpec, source: Mapping[str, str]) -> dict[str, str]:
    """Exactly what a job gets when only its named variables pass: `job.pass_env` taken from
    `source` (the submitter's environment; absent names are skipped, job context never passes),
    then `job.env` (what sweep sets) over them. The scheduler adds SWEEP_JOB_ID, and Slurm its own
    SLURM_* for the job itself."""
    passed = {n: source[n] for n in job.pass_env if n in source and not is_job_context(n)}
    return {**passed, **check_job_env(job.env)}


def validate_job(job: JobSpec, name_prefix: str | None = None) -> None:
    """Every check a backend runs before it touches anything (raises ValueError)."""
    check_job_name(job.name)
    if name_prefix is not None and not job.name.startswith(name_prefix):
        # a job outside the prefix would be invisible to queue(): the tick would resubmit it forever
        raise ValueError(f"job name {job.name!r} does not start with this campaign's prefix {name_prefix!r}")
    if not job.argv or not all(isinstance(a, str) for a in job.argv):
        raise ValueError("job argv must be a non-empty list of strings")
    if any("\0" in a for a in job.argv):
        raise ValueError("job argv must not contain NUL bytes")
    if not isinstance(job.gpus, int) or job.gpus < 0:
        raise ValueError(f"job gpus must be an integer >= 0, got {job.gpus!r}")
    check_job_env(job.env)
    for name in job.pass_env:
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
            raise ValueError(f"environment name {name!r} is not allowed: use [A-Za-z_][A-Za-z0-9_]*")


_GPU_ENTRY_RE = re.compile(r"^(?:gres[:/])?gpu(?::[^:,()]+)?:(\d+)(?:\([^)]*\))?$")


def parse_gpu_count(*tres_fields: str) -> int:
    """GPUs requested according to squeue's tres fields.

    Accepts Slurm's spellings across versions: `gres:gpu:2` (22.05), `gres/gpu:2` (newer),
    typed `gres:gpu:a100:2`, bare `gpu:2`, several comma-separated entries, and `N/A`/empty.
    The first field that names a GPU count wins (per-node before per-job, as passed).
    """
    for text in tres_fields:
        total = 0
        found = False
        for entry in (text or "").split(","):
            match = _GPU_ENTRY_RE.match(entry.strip())
            if match:
                total += int(match.group(1))
                found = True
        if found:
            return total
    return 0
