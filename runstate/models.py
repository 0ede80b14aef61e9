"""Typed models of every file in a campaign directory (see docs/state.md).

Readers are tolerant: every model ignores unknown keys, so older and newer sweep versions read each
other's files. Writers are strict: `RunRecord.check_invariants` runs before any save, so a record
that breaks the state machine can never reach disk.
"""
from __future__ import annotations

import re
import time
from enum import Enum, StrEnum
from typing import Any, Literal, overload

from typing_extensions import TypedDict

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runstate.errors import StateError
from runstate.phases import EVAL_PHASE_TABLE, PHASE_TABLE, validate_phase
from runstate.phases import Phase as Phase      # re-exported: the phase table's home is runstate/phases.py

SCHEMA_VERSION = 1
RUN_ID_RE = re.compile(r"^[a-z0-9_-][a-z0-9._-]{0,127}$")
ROLE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
DETAIL_LIMIT = 500

OUTAGE_COOLDOWN_S = 45 * 60
THROTTLE_COOLDOWN_S = 5 * 60
OUTAGE_MAX_COOLDOWN_S = 4 * 3600        # the longest a stamp may park a role, whatever it says
THROTTLE_MAX_COOLDOWN_S = 3600
MAX_COOLDOWN_S = {"outage": OUTAGE_MAX_COOLDOWN_S, "throttle": THROTTLE_MAX_COOLDOWN_S}
CLOCK_SKEW_S = 5 * 60


def validate_run_id(run_id: object) -> str:
    """Run ids become directory names, job names and argv elements: keep them boring."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise ValueError(
            f"invalid run id {run_id!r}: expected lowercase letters, digits, '.', '_' or '-', "
            "at most 128 characters, not starting with '.'")
    return run_id


# The roles of the pipeline, in the order a run meets them (the shipped roles/*.toml manifests):
# the phase table's roles.
PIPELINE_ROLES: tuple[str, ...] = PHASE_TABLE.roles
KEY_FAMILIES: tuple[str, ...] = ("anthropic", "openai")   # the model APIs' key families


def cooldown_key(role: str, family: str | None) -> str:
    """The cooldown a run waits on before a session of `role`: the role's own, or, for a run whose
    sessions use one key family (an evaluation cell: its arm's, RunRecord.key_family), the role's
    within that family (`solver-anthropic`, stamped as outage-solver-anthropic.json): an outage of
    one family's endpoint then holds only the runs of that family."""
    return role if family is None else f"{role}-{family}"


# every cooldown stamp a campaign can have: each role's, and each evaluation role's per key family
COOLDOWN_KEYS: tuple[str, ...] = PIPELINE_ROLES + tuple(
    cooldown_key(role, family) for role in EVAL_PHASE_TABLE.roles for family in KEY_FAMILIES)


def validate_role(role: object) -> str:
    if not isinstance(role, str) or not ROLE_RE.match(role):
        raise ValueError(f"invalid role name {role!r}: expected [a-z][a-z0-9_-]*, at most 32 characters")
    return role


def validate_provider(name: object) -> str:
    """A provider name is part of a file name (provider-outage-<name>.json): [a-z][a-z0-9_-]*."""
    if not isinstance(name, str) or not ROLE_RE.match(name):
        raise ValueError(f"invalid provider name {name!r}: expected [a-z][a-z0-9_-]*, at most 32 characters")
    return name


@overload
def truncate(text: str, limit: int = DETAIL_LIMIT) -> str: ...
@overload
def truncate(text: None, limit: int = DETAIL_LIMIT) -> None: ...
def truncate(text: str | None, limit: int = DETAIL_LIMIT) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 15] + "... [truncated]"


class Tolerant(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=False)


class RunState(str, Enum):
    queued = "queued"
    active = "active"
    ended = "ended"


class Outcome(str, Enum):
    verified = "verified"
    generated_unverified = "generated_unverified"
    blocked = "blocked"


class EndReason(StrEnum):
    """Why a run ended short of `verified` (state.json's `reason`; the values are what is on disk).

    The record's field stays a plain string so a reason a newer sweep adds still reads here."""

    max_attempted = "max_attempted"              # its attempts ran out (controller or tick)
    max_interrupted = "max_interrupted"          # preempted / timed out / lost its node too often
    budget_exhausted = "budget_exhausted"        # the candidate's or the campaign's spend cap (tick)
    duplicate = "duplicate"                      # the PR is in the plan's prior_verified
    intake_failed = "intake_failed"
    construction_failed = "construction_failed"  # no usable task bundle could be built
    author_failed = "author_failed"              # repairs ran out at each stage ...
    gates_failed = "gates_failed"
    # the gates failed because the PR's tests already pass before the fix (the empty solution scores 1
    # on every repeat while the reference does too): the PR's tests cannot tell a fix from no fix
    passes_before_fix = "passes_before_fix"
    review_failed = "review_failed"
    review_rejected = "review_rejected"
    evidence_incomplete = "evidence_incomplete"  # the evaluate phase lacks evidence for `verified`
    insufficient_evidence = "insufficient_evidence"  # a solver rollout could not run (its attempts spent)
    weak_tests = "weak_tests"                    # the tests accepted a wrong solution (a surviving mutant or probe)
    reward_hack = "reward_hack"                  # a rollout earned its reward by tampering with what scores it
    task_defect = "task_defect"                  # a rollout showed the task itself at fault
    unsolved = "unsolved"                        # every rollout scored 0 and the plan does not allow that
    # the plan's prepared probes name a bundle sha256 the run did not build (refused before any paid session)
    prepared_probes_stale = "prepared_probes_stale"
    secret_in_bundle = "secret_in_bundle"  # noqa: S105 - a reason, not a password: the bundle held a secret


def quality_summary(checkpoints: dict[str, Any]) -> str | None:
    """What `sweep status` shows of whether a run's tests discriminate and its task is solvable,
    from its checkpoints: "mutants K/N" (mutants killed of those run; "(equivalent E)" after it when
    the accepted review's equivalent claims excused E survivors), "solved S/R" (rollouts
    with reward 1 of those run) and the rollouts' labels ("(legitimate_success 2, reward_hack 1)"). A plain dict read: it runs per ended run."""
    parts = []
    probes = checkpoints.get("probes")
    if isinstance(probes, dict):
        killed, run = probes.get("killed"), probes.get("run")
        if type(killed) is int and type(run) is int and run > 0:
            parts.append(f"mutants {killed}/{run}")
            review = checkpoints.get("review")
            excused = review.get("excused_mutants") if isinstance(review, dict) else None
            if type(excused) is int and excused > 0:
                parts.append(f"(equivalent {excused})")
    solve = checkpoints.get("solve")
    if isinstance(solve, dict):
        solved, rollouts = solve.get("solved"), solve.get("rollouts")
        if type(solved) is int and type(rollouts) is int and rollouts > 0:
            parts.append(f"solved {solved}/{rollouts}")
        labels = solve.get("labels")
        if isinstance(labels, dict) and labels:
            parts.append("(" + ", ".join(f"{k} {v}" for k, v in sorted(labels.items())) + ")")
    return " ".join(parts) or None


class RunRecord(Tolerant):
    """state.json: where one run is in the state machine. Replaced only by atomic rename."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    state: RunState = RunState.queued
    # the next phase to run (finished ones are in checkpoints): a row of the phase table
    phase: str = Field(default_factory=lambda: PHASE_TABLE.first)
    outcome: Outcome | None = None
    reason: str | None = None
    # why, as a code of runstate/causes.py and one line for a human: of the ending once ended,
    # else of the last failed attempt or park (None: nothing has gone wrong yet)
    cause: str | None = None
    cause_detail: str | None = None
    attempts: int = 0
    max_attempts: int = 3
    # Interruptions are stops that are not the run's fault (preemption, the time limit, a failed
    # node): they re-queue the run without spending an attempt, up to their own limit, so that a
    # run that is always preempted still ends (blocked: max_interrupted). See docs/slurm.md.
    interruptions: int = 0
    max_interruptions: int = 10
    interrupted_by: dict[str, int] = Field(default_factory=dict)   # cause -> count
    # A cause the controller recorded while leaving the run active (Slurm requeues its job itself,
    # lane requeue = "slurm"): {"job_id", "cause", "detail", "at"}. Read by the next controller of
    # the same job, or by the tick if that job vanishes instead.
    pending_interruption: dict[str, Any] | None = None
    slurm_restarts: int = 0                     # SLURM_RESTART_COUNT already counted for job_id
    job_id: str | None = None                   # controller job while active (and the last one after)
    submit_token: str | None = None             # ties lease, job name and argv together
    lane: str = "cpu"
    gpus: int = 0
    provider: str = "local"                     # where its sessions and gates run (the plan's `provider`)
    key_family: str | None = None               # its sessions' one key family, whose cooldown it waits on
                                                # (an evaluation cell: its arm's); None: the role's cooldown
    panel_index: int = 0                        # position in the plan: admission order
    hold_reason: str | None = None              # why the tick is not admitting it (shown by status)
    canary_for: str | None = None               # admitted as the one canary after a role's cooldown
    spent_usd: float = 0.0                      # final spend, copied from spend.json at the ending
    parked_until: float | None = None           # outage/throttle park: not admitted before this time
    parked_role: str | None = None
    runtime_sha: str | None = None
    allocation_usd: float | None = None         # budget granted by the tick at admission
    cap_usd: float | None = None                # this candidate's spending cap (from the plan)
    reservation_usd: float = 0.0                # what one paid session reserves: the smallest useful allocation
    checkpoints: dict[str, dict[str, Any]] = Field(default_factory=dict)  # finished phase -> summary
    last_error: str | None = None               # e.g. a failed sbatch, shown by status
    submitting_since: float | None = None       # an sbatch with submit_token is (or may be) in flight
    created: float = Field(default_factory=time.time)
    updated: float = Field(default_factory=time.time)

    @field_validator("run_id")
    @classmethod
    def _check_run_id(cls, v: str) -> str:
        return validate_run_id(v)

    @field_validator("phase")
    @classmethod
    def _check_phase(cls, v: str) -> str:
        return validate_phase(v)

    def check_invariants(self) -> None:
        """Refuse a record that the state machine cannot be in (called by every save)."""
        def bad(msg: str) -> StateError:
            return StateError(msg, field=f"state.json of {self.run_id}")
        if self.attempts < 0 or self.max_attempts < 1:
            raise bad(f"attempts must be >= 0 and max_attempts >= 1 (got {self.attempts}/{self.max_attempts})")
        if self.interruptions < 0 or self.max_interruptions < 1:
            raise bad("interruptions must be >= 0 and max_interruptions >= 1 "
                      f"(got {self.interruptions}/{self.max_interruptions})")
        if self.gpus < 0:
            raise bad(f"gpus must be >= 0 (got {self.gpus})")
        if self.state is RunState.ended:
            if self.outcome is None:
                raise bad("an ended run needs an outcome")
            if self.outcome is Outcome.blocked and not self.reason:
                raise bad("a blocked run needs a reason")
        else:
            if self.outcome is not None:
                raise bad(f"only an ended run has an outcome (state {self.state.value})")
        if self.state is RunState.active:
            if not self.job_id:
                raise bad("an active run needs a controller job id")
            if not self.submit_token:
                raise bad("an active run needs its submission token")
        if (self.parked_until is None) != (self.parked_role is None):
            raise bad("parked_until and parked_role go together")
        if self.parked_role is not None:
            validate_role(self.parked_role)
        if self.key_family is not None and self.key_family not in KEY_FAMILIES:
            raise bad(f"key_family must be one of {', '.join(KEY_FAMILIES)} (got {self.key_family!r})")

    def interrupted(self, cause: str) -> dict[str, Any]:
        """The update that counts one interruption of `cause` (no attempt spent)."""
        return {"interruptions": self.interruptions + 1, "pending_interruption": None,
                "interrupted_by": {**self.interrupted_by, cause: self.interrupted_by.get(cause, 0) + 1}}

    @property
    def finished_phases(self) -> list[str]:
        return [name for name in PHASE_TABLE.names if name in self.checkpoints]


class Lease(Tolerant):
    """lease.json: who may act on a run. Created only exclusively, never edited in place."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    token: str                    # submission token: also in the job name and the controller's argv
    holder: Literal["tick", "job"]
    job_id: str | None = None     # the holder job (None while the tick holds it before hand-over)
    acquired_at: float
    heartbeat_at: float
    host: str | None = None
    pid: int | None = None

    @property
    def last_seen(self) -> float:
        return max(self.acquired_at, self.heartbeat_at)


class Cooldown(Tolerant):
    """What every cooldown stamp has: a kind, when it was stamped and for how long (clamped)."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["outage", "throttle"]
    detail: str | None = None
    stamped_at: float
    cooldown_s: float
    stamped_by: str | None = None   # job id or host.pid

    @field_validator("detail")
    @classmethod
    def _cut_detail(cls, v: str | None) -> str | None:
        return truncate(v)

    @property
    def until(self) -> float:
        """The end of the cooldown, with the stamp's own cooldown clamped to [0, MAX_COOLDOWN_S]:
        a stamp saying 1e12 s must not park a role for ever."""
        limit = MAX_COOLDOWN_S.get(self.kind, OUTAGE_MAX_COOLDOWN_S)
        return self.stamped_at + min(max(0.0, self.cooldown_s), limit)

    def is_active(self, now: float) -> bool:
        """Active while now < stamped_at + cooldown. A stamp slightly in the future (clock skew between
        nodes, up to CLOCK_SKEW_S) counts; a far-future stamp is a broken clock and must not park a
        role for hours, so it counts as inactive."""
        if self.stamped_at > now + CLOCK_SKEW_S:
            return False
        return now < self.until


class OutageStamp(Cooldown):
    """outage-<role>.json: a per-role cooldown, decided when stamped."""

    role: str

    @field_validator("role")
    @classmethod
    def _check_role(cls, v: str) -> str:
        return validate_role(v)


class ProviderStamp(Cooldown):
    """provider-outage-<provider>.json: a remote provider (daytona, modal) is down or throttling us.
    Parks only the runs that need that provider; clamped like a role's cooldown."""

    provider: str

    @field_validator("provider")
    @classmethod
    def _check_provider(cls, v: str) -> str:
        return validate_provider(v)


class DrainMarker(Tolerant):
    """drain-request.json: latched until `sweep undrain` removes it."""

    schema_version: int = SCHEMA_VERSION
    requested_by: str
    requested_at: float
    reason: str | None = None


class Event(Tolerant):
    """One line of events.jsonl: a transition of a run, for `sweep show` and audits."""

    ts: float = Field(default_factory=time.time)
    run_id: str
    kind: str                                   # admitted, submitted, phase_done, requeued, ended, ...
    from_state: str | None = None
    to_state: str | None = None
    phase: str | None = None
    detail: str | None = None
    by: str | None = None                       # "tick" or "job:<id>"

    @field_validator("detail")
    @classmethod
    def _cut_detail(cls, v: str | None) -> str | None:
        return truncate(v, 2000)


class TickAction(TypedDict):
    """One thing a tick did (tick.json's `actions`): a plain JSON object on disk, typed here."""

    kind: str          # admit, adopt, requeue, interrupt, end, reap, hold, give_up, skipped, reconcile, ...
    run_id: str
    detail: str


class TickReport(Tolerant):
    """tick.json: what the last tick saw and did."""

    schema_version: int = SCHEMA_VERSION
    started_at: float
    finished_at: float
    duration_s: float
    host: str | None = None
    squeue_known: bool
    squeue_error: str | None = None
    squeue_jobs: int = 0
    runs_read: int = 0                  # runs whose state.json this tick read
    runs_indexed: int = 0               # ended runs the ended-runs index vouched for (not read)
    corrupt: list[str] = Field(default_factory=list)
    actions: list[TickAction] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    draining: bool = False
    counts: dict[str, int] = Field(default_factory=dict)
    waiting: dict[str, list[str]] = Field(default_factory=dict)   # reason -> queued runs not admitted
    ghosts: list[dict[str, Any]] = Field(default_factory=list)    # live jobs no lease recognises
    # the tick's one accounting call for vanished jobs: not_asked | known | unknown | unavailable
    accounting: str = "not_asked"
    accounting_error: str | None = None
    accounting_jobs: int = 0


class LaneBackoff(Tolerant):
    """One lane's back-off after refused submissions (lane-backoff.json, written by the tick)."""

    failures: int = 0               # refused submissions in a row
    until: float = 0.0              # no submission to this lane before this time (one probe after)
    message: str = ""               # Slurm's own words for the last refusal, in full
    since: float = 0.0              # first refusal of this series


class LaneBackoffFile(Tolerant):
    schema_version: int = SCHEMA_VERSION
    lanes: dict[str, LaneBackoff] = Field(default_factory=dict)


class GhostJob(Tolerant):
    name: str
    first_seen: float
    gpus: int = 0


class GhostsFile(Tolerant):
    """ghosts.json: jobs with this campaign's prefix that no lease or record recognises (tick memory)."""

    schema_version: int = SCHEMA_VERSION
    jobs: dict[str, GhostJob] = Field(default_factory=dict)       # job id -> first sighting
    cancelled: list[dict[str, Any]] = Field(default_factory=list)  # the last 100 cancellations


class SeenJob(Tolerant):
    """One of this campaign's jobs in the last queue snapshot (queue.json)."""

    name: str
    state: str                      # Slurm's long name: PENDING, RUNNING, COMPLETING, ...
    reason: str = ""                # why it pends ("Resources", "BeginTime", "None" once running)
    partition: str = ""
    gpus: int = 0
    since: float                    # the first snapshot that saw it in this state


class QueueFile(Tolerant):
    """queue.json: the last tick's one queue read, as Slurm said it (written by the tick only).

    `sweep status` shows each live run's job from it and replans its wait reasons with it, so
    status never asks the scheduler itself. A tick whose queue call failed keeps the jobs of the
    last read that answered (`taken_at`) and says so (`known` false, `error`)."""

    schema_version: int = SCHEMA_VERSION
    asked_at: float                 # the last tick's queue call
    known: bool
    error: str | None = None
    taken_at: float | None = None   # when `jobs` was read (None: no call ever answered)
    jobs: dict[str, SeenJob] = Field(default_factory=dict)        # job id -> job
    capacity: dict[str, int | None] = Field(default_factory=dict)  # lane -> slots/devices (None: unknown)


class SpendEntry(Tolerant):
    op_id: str
    what: str
    reserved_usd: float
    actual_usd: float | None = None
    status: Literal["reserved", "settled", "uncertain"] = "reserved"
    at: float = Field(default_factory=time.time)
    # the budget scope the operation is also counted in besides the run's allocation: "quality"
    # for the reviews, repairs and rollouts `quality.max_spend_usd` bounds; None for the rest
    scope: str | None = None

    @property
    def cost_usd(self) -> float:
        """Spent or possibly spent: the settled actual, else the reservation (open or uncertain)."""
        return self.actual_usd if self.status == "settled" and self.actual_usd is not None else self.reserved_usd


class SpendLedger(Tolerant):
    """spend.json: one run's reservations and actual costs. Written only by the run's controller."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    entries: list[SpendEntry] = Field(default_factory=list)
    overrun: bool = False          # an actual cost exceeded its reservation: no more paid work

    @property
    def committed_usd(self) -> float:
        """Money that is spent or may have been spent: settled actuals plus open reservations."""
        return sum(e.cost_usd for e in self.entries)

    def committed_in(self, scope: str) -> float:
        """What the operations of one budget scope have committed (as `committed_usd`)."""
        return sum(e.cost_usd for e in self.entries if e.scope == scope)
