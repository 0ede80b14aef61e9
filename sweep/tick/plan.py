"""The tick's policy: a pure function (snapshot, settings, now) -> actions. No I/O here.

Everything the tick decides is decided here, so every rule is testable with thousands of random
snapshots (tests/test_tick_plan.py) without files or Slurm:
- reconcile: an active run whose job is gone from a KNOWN queue goes back to queued at its phase
  with attempts+1 (or ends blocked:max_attempted at the limit); with the queue UNKNOWN nothing is
  judged dead and leases are judged by TTL only;
- with the queue UNKNOWN nothing is admitted either: the tick changes nothing but TTL reaping;
- reap stale leases (a lease whose holder job is alive is never reaped);
- adopt a submission whose tick died between sbatch and writing the record (matched by token);
- admission: nothing while draining; active controllers <= max_parallel, GPU ones <=
  max_gpu_parallel (a 2-GPU run counts once); never more than target_verified - verified - active;
  a CPU candidate later in the panel may pass a GPU candidate waiting for the GPU lane; no run whose
  next role is cooling down, except one canary per role once the cooldown has passed; each admitted
  run gets a budget allocation no larger than what the campaign has left.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from runstate.lease import LeaseView, judge_lease
from runstate.models import EndReason, Lease, OutageStamp, Outcome, Phase, RunRecord, RunState

# the role a run needs next, by the phase it will run next
NEXT_ROLE = {Phase.intake: "author", Phase.author: "author", Phase.gates: "reviewer",
             Phase.review: "reviewer", Phase.solve: "solver", Phase.evaluate: None}


@dataclass(frozen=True)
class QueueJob:
    job_id: str
    name: str
    gpus: int = 0


@dataclass(frozen=True)
class RunView:
    record: RunRecord
    lease: LeaseView | None = None
    committed_usd: float = 0.0        # spend.json: spent + reserved (0 if none)


@dataclass(frozen=True)
class Snapshot:
    now: float
    queue_known: bool
    queue: dict[str, QueueJob]                 # job id -> job (this campaign's only)
    runs: dict[str, RunView]
    draining: bool = False
    stamps: dict[str, OutageStamp] = field(default_factory=dict)   # role -> latest stamp (active or not)
    capacity: dict[str, int | None] = field(default_factory=dict)  # lane -> devices/slots, None = unknown


@dataclass(frozen=True)
class PlanSettings:
    target_verified: int
    max_parallel: int
    max_gpu_parallel: int
    max_spend_usd: float | None
    lease_ttl_s: float
    submit_grace_s: float


# ---- actions ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Action:
    run_id: str

    @property
    def kind(self) -> str:
        return type(self).__name__.lower()


@dataclass(frozen=True)
class ReapLease(Action):
    view: LeaseView
    why: str


@dataclass(frozen=True)
class Requeue(Action):
    """The controller job vanished without a terminal write: back to queued, one more attempt."""
    expected: RunRecord
    lease: LeaseView | None
    why: str


@dataclass(frozen=True)
class EndRun(Action):
    expected: RunRecord
    lease: LeaseView | None
    outcome: Outcome
    reason: EndReason
    why: str


@dataclass(frozen=True)
class Adopt(Action):
    """A queued run whose submission made it into the queue: record it as active."""
    expected: RunRecord
    job_id: str
    token: str
    hand_over: bool


@dataclass(frozen=True)
class Admit(Action):
    expected: RunRecord
    lane: str
    gpus: int
    allocation_usd: float | None
    canary_for: str | None


@dataclass(frozen=True)
class SetHold(Action):
    expected: RunRecord
    reason: str | None


# ---- helpers ---------------------------------------------------------------------------------

def token_of_job_name(name: str) -> str | None:
    """Job names are 'sw.<campaign>.<token>.<run id>'; the prefix filter already chose our campaign."""
    parts = name.split(".", 3)
    return parts[2] if len(parts) == 4 and parts[0] == "sw" else None


def next_role(record: RunRecord) -> str | None:
    return NEXT_ROLE.get(record.phase)


def _lease_holder_alive(lease: Lease, snap: Snapshot, jobs_by_token: dict[str, QueueJob]) -> bool | None:
    if not snap.queue_known:
        return None
    if lease.job_id:
        return lease.job_id in snap.queue
    # held by a tick before hand-over: alive if its job made it into the queue; a younger lease may
    # still have an sbatch in flight from a tick killed mid-submit, so it is left alone for a grace
    if lease.token in jobs_by_token:
        return True
    return None


# ---- the planner -----------------------------------------------------------------------------

def plan_tick(snap: Snapshot, cfg: PlanSettings) -> list[Action]:
    actions: list[Action] = []
    jobs_by_token: dict[str, QueueJob] = {}
    for job in snap.queue.values():
        tok = token_of_job_name(job.name)
        if tok:
            jobs_by_token[tok] = job

    verified = 0
    slots = {"all": 0, "gpu": 0}           # controller slots taken (or possibly taken) after this tick
    busy: set[str] = set()                 # runs that must not be admitted this tick
    canaries_active: dict[str, int] = {}
    committed = 0.0                        # money spent or promised (for the allocation)

    def hold_slot(rec: RunRecord) -> None:
        slots["all"] += 1
        if rec.gpus > 0:
            slots["gpu"] += 1

    for run_id, view in snap.runs.items():
        rec, lease = view.record, view.lease
        if rec.state is RunState.ended:
            committed += max(rec.spent_usd, view.committed_usd)
            if rec.outcome is Outcome.verified:
                verified += 1
            if lease is not None:
                alive = None if lease.lease is None else _lease_holder_alive(lease.lease, snap, jobs_by_token)
                verdict = judge_lease(lease, holder_alive=alive, now=snap.now, ttl_s=cfg.lease_ttl_s)
                if verdict.stale:
                    actions.append(ReapLease(run_id, lease, f"ended run: {verdict.why}"))
            continue

        if rec.state is RunState.active:
            job_alive = None if not snap.queue_known else (rec.job_id in snap.queue)
            if job_alive is False:
                # gone from a known queue, and the record (read after the queue) is still active:
                # the controller died without a terminal write
                busy.add(run_id)
                committed += view.committed_usd
                if rec.attempts + 1 >= rec.max_attempts:
                    actions.append(EndRun(run_id, rec, lease, Outcome.blocked, EndReason.max_attempted,
                                          f"job {rec.job_id} vanished; attempt {rec.attempts + 1} of "
                                          f"{rec.max_attempts}"))
                else:
                    actions.append(Requeue(run_id, rec, lease, f"job {rec.job_id} vanished from the queue"))
                continue
            # alive or unknown: the run holds its slot and its whole allocation
            hold_slot(rec)
            if rec.canary_for:
                canaries_active[rec.canary_for] = canaries_active.get(rec.canary_for, 0) + 1
            committed += max(view.committed_usd, rec.allocation_usd or 0.0)
            busy.add(run_id)
            if lease is not None and job_alive is None:
                verdict = judge_lease(lease, holder_alive=None, now=snap.now, ttl_s=cfg.lease_ttl_s)
                if verdict.stale:
                    actions.append(ReapLease(run_id, lease, verdict.why))
            elif lease is not None and lease.lease is not None and lease.lease.job_id \
                    and lease.lease.job_id != rec.job_id and snap.queue_known \
                    and lease.lease.job_id not in snap.queue:
                actions.append(ReapLease(run_id, lease, "lease of a job that is gone"))
            continue

        # queued
        committed += view.committed_usd
        if lease is None:
            continue
        busy.add(run_id)
        if lease.lease is None:
            verdict = judge_lease(lease, holder_alive=None, now=snap.now, ttl_s=cfg.lease_ttl_s)
            if verdict.stale:
                actions.append(ReapLease(run_id, lease, verdict.why))
            hold_slot(rec)          # unknown holder: keep its slot until judged
            continue
        ls = lease.lease
        job = snap.queue.get(ls.job_id) if ls.job_id else jobs_by_token.get(ls.token)
        if snap.queue_known and job is not None and job.job_id != rec.job_id:
            # submitted, but the tick that submitted it died before recording it: adopt
            actions.append(Adopt(run_id, rec, job.job_id, ls.token, hand_over=ls.job_id is None))
            hold_slot(rec)
            committed += rec.allocation_usd or 0.0
            continue
        if snap.queue_known and job is not None:
            # the job wrote this queued record itself (drain/park) and is on its way out
            hold_slot(rec)
            continue
        if snap.queue_known and job is None:
            if ls.job_id is None and snap.now - ls.last_seen < cfg.submit_grace_s:
                hold_slot(rec)       # a submission may still be in flight
                continue
            actions.append(ReapLease(run_id, lease, "holder job is gone" if ls.job_id
                                     else "submission never reached the queue"))
            continue
        verdict = judge_lease(lease, holder_alive=None, now=snap.now, ttl_s=cfg.lease_ttl_s)
        if verdict.stale:
            actions.append(ReapLease(run_id, lease, verdict.why))
        else:
            hold_slot(rec)

    actions.extend(_admit(snap, cfg, busy, slots["all"], slots["gpu"], verified, canaries_active, committed))
    return actions


def _admit(snap: Snapshot, cfg: PlanSettings, busy: set[str], active: int, gpu_active: int,
           verified: int, canaries_active: dict[str, int], committed: float) -> list[Action]:
    out: list[Action] = []
    if not snap.queue_known:
        # the scheduler cannot be asked: admitting now would only meet the same failure in sbatch,
        # and nothing about the queue is known, so this tick changes nothing it does not have to
        return out
    queued = sorted((v.record for rid, v in snap.runs.items()
                     if v.record.state is RunState.queued and rid not in busy),
                    key=lambda r: (r.panel_index, r.run_id))
    remaining_target = cfg.target_verified - verified - active
    budget_left = None if cfg.max_spend_usd is None else cfg.max_spend_usd - committed
    canary_taken: set[str] = set()
    gpu_capacity = snap.capacity.get("gpu")
    cpu_capacity = snap.capacity.get("cpu")
    cpu_active = sum(1 for v in snap.runs.values() if v.record.gpus == 0 and (
        v.record.state is RunState.active or (v.record.state is RunState.queued and v.lease is not None)))
    gpu_devices = sum(v.record.gpus for v in snap.runs.values() if v.record.gpus and (
        v.record.state is RunState.active or (v.record.state is RunState.queued and v.lease is not None)))

    for rec in queued:
        hold = None
        role = next_role(rec)
        stamp = snap.stamps.get(role) if role else None
        if rec.gpus > 0 and gpu_capacity is not None and rec.gpus > gpu_capacity:
            hold = f"needs {rec.gpus} GPU{'s' if rec.gpus > 1 else ''}, lane gpu has {gpu_capacity}"
        elif stamp is not None and stamp.is_active(snap.now):
            hold = f"role {role} cooling down ({stamp.kind}) until {stamp.until:.0f}"
        elif rec.parked_until is not None and rec.parked_until > snap.now:
            hold = f"parked until {rec.parked_until:.0f} ({rec.parked_role} cooldown)"

        if hold is None and not snap.draining and remaining_target > 0 and active < cfg.max_parallel:
            canary = None
            if stamp is not None:            # cooldown passed but not yet cleared by a success
                if canaries_active.get(role, 0) or role in canary_taken:
                    hold = f"waiting for the {role} canary after its cooldown"
                else:
                    canary = role
            # lane limits: max_gpu_parallel counts GPU runs; a known capacity counts slots/devices
            gpu_blocked = rec.gpus > 0 and (gpu_active >= cfg.max_gpu_parallel or (
                gpu_capacity is not None and gpu_devices + rec.gpus > gpu_capacity))
            gpu_blocked = gpu_blocked or (rec.gpus == 0 and cpu_capacity is not None
                                          and cpu_active >= cpu_capacity)
            allocation = None
            if hold is None and not gpu_blocked:
                cap = rec.cap_usd
                if cap is not None and cap + 1e-9 < rec.reservation_usd:
                    out.append(EndRun(rec.run_id, rec, None, Outcome.blocked, EndReason.budget_exhausted,
                                      f"the candidate's cap {cap:.2f} USD is below one session's "
                                      f"reservation {rec.reservation_usd:.2f} USD"))
                    continue
                if budget_left is not None:
                    allocation = budget_left if cap is None else min(cap, budget_left)
                    # an allocation that cannot pay for one session would only end the run at once
                    if allocation <= 0 or allocation + 1e-9 < rec.reservation_usd:
                        hold = "campaign budget exhausted"
                        if active == 0:   # nothing running can free budget: this run can never start
                            out.append(EndRun(rec.run_id, rec, None, Outcome.blocked, EndReason.budget_exhausted,
                                              f"campaign spent {committed:.2f} of {cfg.max_spend_usd:.2f} USD"))
                            continue
                else:
                    allocation = cap
            if hold is None and not gpu_blocked:
                out.append(Admit(rec.run_id, rec, "gpu" if rec.gpus else "cpu", rec.gpus, allocation, canary))
                active += 1
                remaining_target -= 1
                if rec.gpus > 0:
                    gpu_active += 1
                    gpu_devices += rec.gpus
                else:
                    cpu_active += 1
                if canary:
                    canary_taken.add(canary)
                if budget_left is not None and allocation is not None:
                    budget_left -= allocation
                continue
        if hold != rec.hold_reason and (hold is not None or rec.hold_reason is not None):
            out.append(SetHold(rec.run_id, rec, hold))
    return out
