"""The tick's policy: a pure function (snapshot, settings, now) -> actions. No I/O here.

Everything the tick decides is decided here, so every rule is testable with thousands of random
snapshots (tests/test_tick_plan.py) without files or Slurm:
- reconcile: an active run whose job is gone from a KNOWN queue goes back to queued at its phase
  with attempts+1 (or ends blocked:max_attempted at the limit); with the queue UNKNOWN nothing is
  judged dead and leases are judged by TTL only. A job that ended through no fault of the run
  (the controller recorded a preemption, or accounting says PREEMPTED / NODE_FAIL / TIMEOUT) is an
  *interruption* instead: queued again with interruptions+1 and attempts unchanged, or
  blocked:max_interrupted at its own limit (see `judge_vanished`);
- with the queue UNKNOWN nothing is admitted either: the tick changes nothing but TTL reaping;
- reap stale leases (a lease whose holder job is alive is never reaped);
- adopt a submission whose tick died between sbatch and writing the record (matched by token),
  and keep an UNCERTAIN submission (sbatch got no answer) for `uncertain_submit_s` while looking
  for its token in the queue, before giving it up;
- ghosts: a live job with this campaign's prefix that no lease or record recognises counts against
  the limits while it lives and is cancelled once it has been seen for `ghost_grace_s`;
- lanes: a lane whose submissions Slurm refused backs off (exponential, bounded) while the other
  lanes keep admitting; after the back-off one probe is submitted;
- every queued run that is not admitted gets a reason (one `Waiting` action for all), shown by
  `sweep status`;
- admission: nothing while draining; active controllers <= max_parallel, GPU ones <=
  max_gpu_parallel (a 2-GPU run counts once); never more than target_verified - verified - active;
  a CPU candidate later in the panel may pass a GPU candidate waiting for the GPU lane; no run whose
  next role is cooling down, except one canary per role once the cooldown has passed; each admitted
  run gets a budget allocation no larger than what the campaign has left;
- provider cooldowns work the same way, per remote provider: a run whose plan `provider` is cooling
  down (an outage or throttle stamped by a controller or a reconcile) waits, the runs on other
  providers keep admitting, and once the cooldown has passed one canary per provider goes first.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from runstate.lease import LeaseView, judge_lease
from runstate.phases import table_of
from runstate.models import (EndReason, cooldown_key, GhostJob, LaneBackoff, Lease, OutageStamp, Outcome, ProviderStamp,
                             RunRecord, RunState)



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
    breaker: str | None = None                 # the circuit breaker's trip (runstate/breaker.py), one line
    sandboxes_uncertain: str | None = None     # why remote sandboxes may be orphaned (receipts.py marker)
    stamps: dict[str, OutageStamp] = field(default_factory=dict)   # role -> latest stamp (active or not)
    provider_stamps: dict[str, ProviderStamp] = field(default_factory=dict)  # provider -> stamp (active or not)
    capacity: dict[str, int | None] = field(default_factory=dict)  # lane -> devices/slots, None = unknown
    ghosts_seen: dict[str, GhostJob] = field(default_factory=dict)  # job id -> first sighting (ghosts.json)
    lanes: dict[str, LaneBackoff] = field(default_factory=dict)     # lane -> back-off (lane-backoff.json)
    corrupt_runs: frozenset[str] = frozenset()                      # runs whose state.json is unreadable
    # how this tick's vanished jobs ended (ONE accounting call, made by observe only when one vanished):
    # accounting is "not_asked" | "known" | "unknown" (the call failed) | "unavailable" (no accounting)
    end_states: dict[str, str] = field(default_factory=dict)      # job id -> "PREEMPTED", "FAILED", ...
    accounting: str = "not_asked"
    accounting_error: str | None = None
    # ended runs that are not in `runs` (the ended-runs index vouched for them): all the plan needs
    settled_verified: int = 0
    settled_spent_usd: float = 0.0


@dataclass(frozen=True)
class PlanSettings:
    target_verified: int
    max_parallel: int
    max_gpu_parallel: int
    max_spend_usd: float | None
    lease_ttl_s: float
    submit_grace_s: float
    uncertain_submit_s: float = 600.0
    ghost_grace_s: float = 120.0
    prior_verified: int = 0             # valid priors (campaign.toml `priors`): they count toward the target


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
class Interrupt(Action):
    """The controller job ended through no fault of the run: back to queued, no attempt spent."""
    expected: RunRecord
    lease: LeaseView | None
    cause: str                        # preempted | time_limit | node_fail | requeued
    why: str


@dataclass(frozen=True)
class EndRun(Action):
    expected: RunRecord
    lease: LeaseView | None
    outcome: Outcome
    reason: EndReason
    why: str
    cause: str | None = None          # with reason max_interrupted: the last interruption's cause


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


@dataclass(frozen=True)
class GiveUpSubmission(Action):
    """An sbatch whose outcome was uncertain left no job in the queue within the bound: release."""
    expected: RunRecord
    view: LeaseView
    why: str


@dataclass(frozen=True)
class Waiting(Action):
    """Why each queued run is not admitted this tick: reason -> run ids (tick.json and `sweep
    status`; nothing is written on the runs). One action for all of them: at 100,000 queued runs
    a per-run object would cost the planner more than the rest of its work."""
    reasons: dict[str, list[str]]

    def of(self) -> dict[str, str]:
        """run id -> reason."""
        return {rid: reason for reason, ids in self.reasons.items() for rid in ids}


@dataclass(frozen=True)
class CancelGhost(Action):
    """A job of this campaign no lease or record recognises, seen for longer than the grace."""
    job_id: str
    name: str
    first_seen: float


@dataclass(frozen=True)
class NoteGhosts(Action):
    """The ghosts seen in this (known) queue, with their first sighting: the tick's only memory."""
    jobs: dict[str, GhostJob]


# ---- helpers ---------------------------------------------------------------------------------

def token_of_job_name(name: str) -> str | None:
    """Job names are 'sw.<campaign>.<token>.<run id>'; the prefix filter already chose our campaign."""
    parts = name.split(".", 3)
    return parts[2] if len(parts) == 4 and parts[0] == "sw" else None


def run_of_job_name(name: str) -> str | None:
    parts = name.split(".", 3)
    return parts[3] if len(parts) == 4 and parts[0] == "sw" else None


def _recognised(job: QueueJob, snap: Snapshot) -> bool:
    """Is this job one a run knows about: its lease's submission, or the job its record names?"""
    token, run_id = token_of_job_name(job.name), run_of_job_name(job.name)
    if token is None or run_id is None:
        return False
    if run_id in snap.corrupt_runs:
        return True                   # the run's record cannot be read: judge nothing about it
    view = snap.runs.get(run_id)
    if view is None:
        return False
    if view.lease is not None:
        if view.lease.lease is None:
            return True               # a corrupt lease: its token is unknown, so is this job's standing
        ls = view.lease.lease
        if ls.token == token and ls.job_id in (None, job.job_id):
            return True
    rec = view.record
    # the run's own controller, finishing after it released its lease (ended, parked, drained)
    return rec.submit_token == token and rec.job_id == job.job_id


def ghost_jobs(snap: Snapshot) -> list[QueueJob]:
    """Live jobs with this campaign's prefix that no lease or record recognises (known queue only)."""
    if not snap.queue_known:
        return []
    return [job for job in snap.queue.values() if not _recognised(job, snap)]


def lane_backoff_reason(lane: str, b: LaneBackoff) -> str:
    return (f"lane {lane} backing off until {_clock(b.until)} after {b.failures} refused "
            f"submission{'s' if b.failures != 1 else ''}: {b.message}")


def _clock(ts: float) -> str:
    import time as _time          # formatting only; the planner never reads the clock
    return _time.strftime("%H:%M:%SZ", _time.gmtime(ts))


def next_role(record: RunRecord) -> str | None:
    """The role the run needs next, by the phase it will run next (its phase table's: a generation
    run's or an evaluation cell's)."""
    return table_of(record.phase).next_role(record.phase)


def next_cooldown(record: RunRecord) -> str | None:
    """The cooldown the run waits on before its next role: the role's, or the role's within the
    run's key family when it has one (an evaluation cell: its arm's; runstate.models.cooldown_key)."""
    role = next_role(record)
    return None if role is None else cooldown_key(role, record.key_family)


# Slurm end states of a vanished controller job that are not the run's fault -> interruption cause
INTERRUPTION_STATES = {"PREEMPTED": "preempted", "NODE_FAIL": "node_fail", "BOOT_FAIL": "node_fail",
                       "TIMEOUT": "time_limit", "REQUEUED": "requeued"}
# states that do not say how the job ended (accounting lags behind the queue): wait and ask again
NOT_ENDED_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED",
                    "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT"}


def judge_vanished(rec: RunRecord, lease: LeaseView | None, snap: Snapshot,
                   cfg: PlanSettings) -> tuple[str, str | None, str]:
    """("interrupt", cause, why) | ("attempt", None, why) | ("wait", None, why) for a vanished job.

    In order: a cause the controller recorded for this very job wins; then the job's end state
    from this tick's accounting answer; without accounting at all it is an attempt (as before
    interruptions existed; `sweep status` says why). With accounting UNKNOWN (the call failed, or
    it does not list the job yet) the run keeps its slot and is judged on a later tick, until
    `tick.lease_ttl_s` after the controller was last seen: then it counts as an attempt, so a
    cluster whose accounting never answers cannot keep a run waiting forever.
    """
    job = rec.job_id
    pending = rec.pending_interruption or {}
    if pending.get("job_id") == job and pending.get("cause"):
        return "interrupt", str(pending["cause"]), \
            f"job {job} vanished after its controller recorded: {pending.get('detail') or pending['cause']}"
    state = snap.end_states.get(job or "")
    if state and state not in NOT_ENDED_STATES:
        cause = INTERRUPTION_STATES.get(state)
        if cause:
            return "interrupt", cause, f"job {job} ended {state} (accounting)"
        return "attempt", None, f"job {job} ended {state} (accounting)"
    if snap.accounting in ("not_asked", "unavailable"):
        why = f"job {job} vanished from the queue"
        if snap.accounting == "unavailable":
            why += f"; no accounting to say why ({snap.accounting_error}), so it counts as an attempt"
        return "attempt", None, why
    last_seen = lease.lease.last_seen if lease is not None and lease.lease is not None else rec.updated
    waited = snap.now - last_seen
    what = f"accounting {'did not list it' if snap.accounting == 'known' else 'unanswered'}" + (
        f" ({snap.accounting_error})" if snap.accounting_error else "")
    if waited < cfg.lease_ttl_s:
        return "wait", None, f"job {job} vanished; {what}; judged on a later tick"
    return "attempt", None, (f"job {job} vanished; {what} for {waited:.0f} s (tick.lease_ttl_s), "
                             "so it counts as an attempt")


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

@dataclass
class _Tally:
    """What the planner's one pass over the runs adds up, for admission after it."""

    snap: Snapshot
    cfg: PlanSettings
    jobs_by_token: dict[str, QueueJob]
    verified: int
    committed: float                       # money spent or promised (for the allocation)
    actions: list[Action] = field(default_factory=list)
    slots_all: int = 0                     # controller slots taken (or possibly taken) after this tick
    slots_gpu: int = 0
    canaries_active: dict[str, int] = field(default_factory=dict)
    waits: dict[str, list[str]] = field(default_factory=dict)   # reason -> queued runs not admitted
    candidates: list[RunRecord] = field(default_factory=list)   # queued runs free to be admitted

    def wait(self, run_id: str, reason: str) -> None:
        self.waits.setdefault(reason, []).append(run_id)

    def hold_slot(self, rec: RunRecord) -> None:
        self.slots_all += 1
        if rec.gpus > 0:
            self.slots_gpu += 1

    def reap_if_stale(self, run_id: str, lease: LeaseView, why: str | None = None) -> bool:
        """Reap a lease the TTL judges stale (holder unknown); True if it was."""
        verdict = judge_lease(lease, holder_alive=None, now=self.snap.now, ttl_s=self.cfg.lease_ttl_s)
        if verdict.stale:
            self.actions.append(ReapLease(run_id, lease, why or verdict.why))
        return verdict.stale


def plan_tick(snap: Snapshot, cfg: PlanSettings) -> list[Action]:
    jobs_by_token: dict[str, QueueJob] = {}
    for job in snap.queue.values():
        tok = token_of_job_name(job.name)
        if tok:
            jobs_by_token[tok] = job
    t = _Tally(snap, cfg, jobs_by_token, verified=snap.settled_verified, committed=snap.settled_spent_usd)
    for run_id, view in snap.runs.items():
        if view.record.state is RunState.ended:
            _plan_ended(t, run_id, view)
        elif view.record.state is RunState.active:
            _plan_active(t, run_id, view)
        else:
            _plan_queued(t, run_id, view)
    ghosts, ghost_gpu_devices = _plan_ghosts(t)
    t.actions.extend(_admit(snap, cfg, t.candidates, t.slots_all, t.slots_gpu, t.verified, t.canaries_active,
                            t.committed, ghosts, ghost_gpu_devices, t.waits))
    if t.waits:
        t.actions.append(Waiting("", t.waits))
    return t.actions


def _plan_ended(t: _Tally, run_id: str, view: RunView) -> None:
    rec, lease, snap = view.record, view.lease, t.snap
    t.committed += max(rec.spent_usd, view.committed_usd)
    if rec.outcome is Outcome.verified:
        t.verified += 1
    if snap.queue_known and rec.job_id and rec.job_id in snap.queue:
        t.hold_slot(rec)      # its controller wrote the ending but its job is still in the queue
    if lease is not None:
        alive = None if lease.lease is None else _lease_holder_alive(lease.lease, snap, t.jobs_by_token)
        verdict = judge_lease(lease, holder_alive=alive, now=snap.now, ttl_s=t.cfg.lease_ttl_s)
        if verdict.stale:
            t.actions.append(ReapLease(run_id, lease, f"ended run: {verdict.why}"))


def _plan_active(t: _Tally, run_id: str, view: RunView) -> None:
    rec, lease, snap = view.record, view.lease, t.snap
    job_alive = None if not snap.queue_known else (rec.job_id in snap.queue)
    if job_alive is False:
        # gone from a known queue, and the record (read after the queue) is still active:
        # the controller died without a terminal write
        t.committed += view.committed_usd
        _plan_vanished(t, run_id, view)
        return
    # alive or unknown: the run holds its slot and its whole allocation
    t.hold_slot(rec)
    if rec.canary_for:
        t.canaries_active[rec.canary_for] = t.canaries_active.get(rec.canary_for, 0) + 1
    t.committed += max(view.committed_usd, rec.allocation_usd or 0.0)
    if lease is not None and job_alive is None:
        t.reap_if_stale(run_id, lease)
    elif lease is not None and lease.lease is not None and lease.lease.job_id \
            and lease.lease.job_id != rec.job_id and snap.queue_known \
            and lease.lease.job_id not in snap.queue:
        t.actions.append(ReapLease(run_id, lease, "lease of a job that is gone"))


def _plan_vanished(t: _Tally, run_id: str, view: RunView) -> None:
    """An active run whose job left a known queue: wait for accounting, interrupt, requeue or end."""
    rec, lease = view.record, view.lease
    fate, cause, why = judge_vanished(rec, lease, t.snap, t.cfg)
    if fate == "wait":
        t.hold_slot(rec)     # its job may have been the last thing holding this slot
        t.wait(run_id, why)    # shown in tick.json and `sweep status`
    elif fate == "interrupt":
        if rec.interruptions + 1 >= rec.max_interruptions:
            t.actions.append(EndRun(run_id, rec, lease, Outcome.blocked, EndReason.max_interrupted,
                                    f"{why}; interruption {rec.interruptions + 1} of "
                                    f"{rec.max_interruptions}", cause=cause))
        else:
            t.actions.append(Interrupt(run_id, rec, lease, cause or "unknown", why))
    elif rec.attempts + 1 >= rec.max_attempts:
        t.actions.append(EndRun(run_id, rec, lease, Outcome.blocked, EndReason.max_attempted,
                                f"{why}; attempt {rec.attempts + 1} of {rec.max_attempts}"))
    else:
        t.actions.append(Requeue(run_id, rec, lease, why))


def _plan_queued(t: _Tally, run_id: str, view: RunView) -> None:
    rec, lease, snap, cfg = view.record, view.lease, t.snap, t.cfg
    t.committed += view.committed_usd
    if lease is None:
        if snap.queue_known and rec.job_id and rec.job_id in snap.queue:
            # its controller wrote this record (failed attempt, park, drain) and is on its way
            # out: the job still takes a slot, and the run waits for it to leave the queue
            t.hold_slot(rec)
            t.wait(run_id, f"controller job {rec.job_id} is finishing")
        else:
            t.candidates.append(rec)
        return
    if lease.lease is None:
        if not t.reap_if_stale(run_id, lease):
            t.wait(run_id, f"corrupt lease.json ({lease.problem}): left alone until the "
                           f"lease TTL ({cfg.lease_ttl_s:.0f}s) passes")
        t.hold_slot(rec)          # unknown holder: keep its slot until judged
        return
    ls = lease.lease
    holder_job = snap.queue.get(ls.job_id) if ls.job_id else t.jobs_by_token.get(ls.token)
    if snap.queue_known and holder_job is not None and holder_job.job_id != rec.job_id:
        # submitted, but the tick that submitted it died before recording it: adopt
        t.actions.append(Adopt(run_id, rec, holder_job.job_id, ls.token, hand_over=ls.job_id is None))
        t.hold_slot(rec)
        t.committed += rec.allocation_usd or 0.0
    elif snap.queue_known and holder_job is not None:
        # the job wrote this queued record itself (drain/park) and is on its way out
        t.wait(run_id, f"controller job {holder_job.job_id} is finishing")
        t.hold_slot(rec)
    elif snap.queue_known:
        _plan_lost_submission(t, run_id, rec, lease, ls)
    elif not t.reap_if_stale(run_id, lease):
        t.wait(run_id, f"queue UNKNOWN: lease of submission {ls.token} kept "
                       f"({judge_lease(lease, holder_alive=None, now=snap.now, ttl_s=cfg.lease_ttl_s).why})")
        t.hold_slot(rec)


def _plan_lost_submission(t: _Tally, run_id: str, rec: RunRecord, lease: LeaseView, ls: Lease) -> None:
    """A queued run's lease whose holder job is not in a known queue: wait out the submit grace
    (an sbatch may be in flight), give up an uncertain submission, or reap the lease."""
    snap, cfg = t.snap, t.cfg
    uncertain = rec.submitting_since is not None and rec.submit_token == ls.token
    if ls.job_id is None:
        since = max(ls.last_seen, rec.submitting_since or 0.0)
        bound = max(cfg.submit_grace_s, cfg.uncertain_submit_s) if uncertain else cfg.submit_grace_s
        if snap.now - since < bound:
            t.hold_slot(rec)       # a submission may still be in flight, or its job may yet appear
            what = ("sbatch got no answer" if uncertain and rec.last_error
                    else "a submission may be in flight")
            t.wait(run_id, f"{what}: waiting out the submit grace, looking for token "
                           f"{ls.token} in the queue until {_clock(since + bound)}")
            return
        if uncertain:
            t.actions.append(GiveUpSubmission(run_id, rec, lease,
                                              f"no job with token {ls.token} reached the queue within "
                                              f"{bound:.0f}s of an uncertain sbatch"))
            return
    t.actions.append(ReapLease(run_id, lease, "holder job is gone" if ls.job_id
                               else "submission never reached the queue"))


def _plan_ghosts(t: _Tally) -> tuple[list[QueueJob], int]:
    """Ghosts: our prefix, no lease or record knows them. They take slots while they live, and are
    cancelled once seen for ghost_grace_s. Returns them and the GPU devices they hold."""
    snap = t.snap
    ghosts = ghost_jobs(snap)
    seen: dict[str, GhostJob] = {}
    ghost_gpu_devices = 0
    for job in ghosts:
        t.slots_all += 1
        if job.gpus > 0:
            t.slots_gpu += 1
            ghost_gpu_devices += job.gpus
        prior = snap.ghosts_seen.get(job.job_id)
        first = prior.first_seen if prior is not None and prior.name == job.name else snap.now
        seen[job.job_id] = GhostJob(name=job.name, first_seen=first, gpus=job.gpus)
        if snap.now - first >= t.cfg.ghost_grace_s and prior is not None:
            t.actions.append(CancelGhost(run_of_job_name(job.name) or "", job.job_id, job.name, first))
    if snap.queue_known and (seen or snap.ghosts_seen):
        t.actions.append(NoteGhosts("", seen))
    return ghosts, ghost_gpu_devices


def _admit(snap: Snapshot, cfg: PlanSettings, candidates: list[RunRecord], active: int, gpu_active: int,
           verified: int, canaries_active: dict[str, int], committed: float,
           ghosts: list[QueueJob], ghost_gpu_devices: int, waits: dict[str, list[str]]) -> list[Action]:
    """Admissions in panel order, and the reason of every queued run that is not admitted.

    Cost matters here: at 100,000 queued runs this loop is most of the planner. Once a reason that
    holds for every run stops admission (draining, target reached, max_parallel, ...), nothing
    later in the loop can change it, so the remaining runs only get their own hold (if any) or
    that one reason, in a tight loop (`_wait_rest`)."""
    out: list[Action] = []
    queued = sorted(candidates, key=attrgetter("panel_index", "run_id"))
    if not snap.queue_known:
        # the scheduler cannot be asked: admitting now would only meet the same failure in sbatch,
        # and nothing about the queue is known, so this tick changes nothing it does not have to
        if queued:
            waits.setdefault("queue UNKNOWN: nothing is admitted until squeue answers", []).extend(
                rec.run_id for rec in queued)
        return out
    adm = _Admission(snap, cfg, out, waits, canaries_active, active=active, gpu_active=gpu_active,
                     verified=verified, committed=committed,
                     remaining_target=cfg.target_verified - cfg.prior_verified - verified - active,
                     budget_left=None if cfg.max_spend_usd is None else cfg.max_spend_usd - committed)
    adm.count_lanes(ghosts, ghost_gpu_devices)
    for index, rec in enumerate(queued):
        # a reason that holds for every run: no admission can happen after it, so the rest of the
        # queue is explained in one pass
        everyone = adm.everyone_waits()
        if everyone is not None:
            _wait_rest(snap, cfg, queued[index:], everyone, waits, out)
            break
        adm.consider(rec)
    return out


@dataclass
class _Admission:
    """The running counts of one tick's admissions (`_admit`), and the decision for one run."""

    snap: Snapshot
    cfg: PlanSettings
    out: list[Action]
    waits: dict[str, list[str]]
    canaries_active: dict[str, int]
    active: int
    gpu_active: int
    verified: int
    committed: float
    remaining_target: int
    budget_left: float | None
    canary_taken: set[str] = field(default_factory=set)
    probe_taken: set[str] = field(default_factory=set)
    cpu_active: int = 0
    gpu_devices: int = 0

    def count_lanes(self, ghosts: list[QueueJob], ghost_gpu_devices: int) -> None:
        """Slots and devices in use: only needed (and only counted) when the lane's capacity is known."""
        snap = self.snap

        def holds(v: RunView) -> bool:
            return v.record.state is RunState.active or (v.record.state is RunState.queued and v.lease is not None)
        if snap.capacity.get("cpu") is not None:
            self.cpu_active = sum(1 for v in snap.runs.values() if v.record.gpus == 0 and holds(v)) \
                + sum(1 for j in ghosts if j.gpus == 0)
        if snap.capacity.get("gpu") is not None:
            self.gpu_devices = sum(v.record.gpus for v in snap.runs.values() if v.record.gpus and holds(v)) \
                + ghost_gpu_devices

    def everyone_waits(self) -> str | None:
        snap, cfg = self.snap, self.cfg
        if snap.draining:
            return "draining: no admissions until `sweep undrain`"
        if snap.breaker:
            return snap.breaker
        if snap.sandboxes_uncertain:
            return (f"remote sandboxes uncertain ({snap.sandboxes_uncertain}): no admissions "
                    "until `sweep reconcile`")
        if self.remaining_target <= 0:
            prior = f" + {cfg.prior_verified} prior" if cfg.prior_verified else ""
            return (f"target reached: {self.verified} verified{prior} + {self.active} running >= target_verified "
                    f"{cfg.target_verified}")
        if self.active >= cfg.max_parallel:
            return f"limit reached: max_parallel {cfg.max_parallel} ({self.active} running or in flight)"
        return None

    def consider(self, rec: RunRecord) -> None:
        """Admit `rec`, end it (a budget that can never pay for it), or say why it waits."""
        snap = self.snap
        hold = _hold_of(rec, snap, self.cfg)   # a lasting, per-run reason: written on the record (SetHold)
        lane = "gpu" if rec.gpus else "cpu"
        wait = self._lane_backoff_wait(lane) if hold is None else None   # why not this tick: tick.json only
        if hold is None and wait is None:
            hold, canary = self._canary(rec)
            wait = self._lane_limit_wait(rec)
            allocation = None
            if hold is None and wait is None:
                ended, hold, allocation = self._allocation(rec)
                if ended:
                    return
            if hold is None and wait is None:
                self._take(rec, lane, allocation, canary)
                return
        self.waits.setdefault(hold or wait or "not admitted", []).append(rec.run_id)
        if hold != rec.hold_reason and (hold is not None or rec.hold_reason is not None):
            self.out.append(SetHold(rec.run_id, rec, hold))

    def _lane_backoff_wait(self, lane: str) -> str | None:
        backoff = self.snap.lanes.get(lane)
        if backoff is not None and backoff.failures > 0 and backoff.until > self.snap.now:
            return lane_backoff_reason(lane, backoff)
        if backoff is not None and backoff.failures > 0 and lane in self.probe_taken:
            return f"lane {lane} is probing after its back-off: one submission at a time"
        return None

    def _canary(self, rec: RunRecord) -> tuple[str | None, str | None]:
        """(hold, canary): a role or provider whose cooldown passed but was not yet cleared by a
        success lets one run through as its canary; the others wait for it."""
        hold, canary = None, None
        role = next_cooldown(rec)
        stamp = self.snap.stamps.get(role) if role else None
        if stamp is not None and role is not None:
            if self.canaries_active.get(role, 0) or role in self.canary_taken:
                hold = f"waiting for the {role} canary after its cooldown"
            else:
                canary = role
        pkey = f"provider:{rec.provider}"
        if hold is None and self.snap.provider_stamps.get(rec.provider) is not None:
            if self.canaries_active.get(pkey, 0) or pkey in self.canary_taken:
                hold = f"waiting for the provider {rec.provider} canary after its cooldown"
                canary = None
            else:
                canary = canary or pkey
        return hold, canary

    def _lane_limit_wait(self, rec: RunRecord) -> str | None:
        """Lane limits: max_gpu_parallel counts GPU runs; a known capacity counts slots/devices."""
        cfg, gpu_capacity, cpu_capacity = self.cfg, self.snap.capacity.get("gpu"), self.snap.capacity.get("cpu")
        if rec.gpus > 0 and self.gpu_active >= cfg.max_gpu_parallel:
            return (f"limit reached: needs {rec.gpus} GPU{'s' if rec.gpus > 1 else ''} and "
                    f"max_gpu_parallel is {cfg.max_gpu_parallel} ({self.gpu_active} GPU runs)")
        if rec.gpus > 0 and gpu_capacity is not None and self.gpu_devices + rec.gpus > gpu_capacity:
            return f"lane gpu full: {self.gpu_devices} of {gpu_capacity} devices in use, needs {rec.gpus}"
        if rec.gpus == 0 and cpu_capacity is not None and self.cpu_active >= cpu_capacity:
            return f"lane cpu full: {self.cpu_active} of {cpu_capacity} slots in use"
        return None

    def _allocation(self, rec: RunRecord) -> tuple[bool, str | None, float | None]:
        """(ended, hold, allocation): the budget the run is admitted with, or why it cannot be."""
        cap = rec.cap_usd
        if cap is not None and cap + 1e-9 < rec.reservation_usd:
            self.out.append(EndRun(rec.run_id, rec, None, Outcome.blocked, EndReason.budget_exhausted,
                                   f"the candidate's cap {cap:.2f} USD is below one session's "
                                   f"reservation {rec.reservation_usd:.2f} USD"))
            return True, None, None
        if self.budget_left is None:
            return False, None, cap
        allocation = self.budget_left if cap is None else min(cap, self.budget_left)
        # an allocation that cannot pay for one session would only end the run at once
        if allocation <= 0 or allocation + 1e-9 < rec.reservation_usd:
            if self.active == 0:   # nothing running can free budget: this run can never start
                self.out.append(EndRun(rec.run_id, rec, None, Outcome.blocked, EndReason.budget_exhausted,
                                       f"campaign spent {self.committed:.2f} of {self.cfg.max_spend_usd:.2f} USD"))
                return True, None, None
            return False, "campaign budget exhausted", allocation
        return False, None, allocation

    def _take(self, rec: RunRecord, lane: str, allocation: float | None, canary: str | None) -> None:
        self.out.append(Admit(rec.run_id, rec, lane, rec.gpus, allocation, canary))
        self.active += 1
        self.remaining_target -= 1
        if rec.gpus > 0:
            self.gpu_active += 1
            self.gpu_devices += rec.gpus
        else:
            self.cpu_active += 1
        if canary:
            self.canary_taken.add(canary)
        if self.snap.provider_stamps.get(rec.provider) is not None:
            self.canary_taken.add(f"provider:{rec.provider}")
        backoff = self.snap.lanes.get(lane)
        if backoff is not None and backoff.failures > 0:
            self.probe_taken.add(lane)
        if self.budget_left is not None and allocation is not None:
            self.budget_left -= allocation


def _hold_of(rec: RunRecord, snap: Snapshot, cfg: PlanSettings) -> str | None:
    """A lasting reason this run cannot be admitted, whatever else happens this tick."""
    if rec.gpus > 0:
        gpu_capacity = snap.capacity.get("gpu")
        if gpu_capacity is not None and rec.gpus > gpu_capacity:
            return (f"needs {rec.gpus} GPU{'s' if rec.gpus > 1 else ''}, lane gpu has {gpu_capacity}: "
                    "never admitted under this plan (lower the candidate's options.gpus, or give the "
                    "lane more: [scheduler.local] gpu_slots)")
        if cfg.max_gpu_parallel == 0:
            return (f"needs {rec.gpus} GPU{'s' if rec.gpus > 1 else ''} and max_gpu_parallel is 0: never "
                    "admitted under this plan (raise max_gpu_parallel)")
    if snap.stamps:
        role = next_cooldown(rec)
        stamp = snap.stamps.get(role) if role else None
        if stamp is not None and stamp.is_active(snap.now):
            return f"role {role} cooling down ({stamp.kind}) until {stamp.until:.0f}"
    if snap.provider_stamps:
        pstamp = snap.provider_stamps.get(rec.provider)
        if pstamp is not None and pstamp.is_active(snap.now):
            return f"provider {rec.provider} cooling down ({pstamp.kind}) until {pstamp.until:.0f}"
    if rec.parked_until is not None and rec.parked_until > snap.now:
        return f"parked until {rec.parked_until:.0f} ({rec.parked_role} cooldown)"
    return None


def _wait_rest(snap: Snapshot, cfg: PlanSettings, queued: list[RunRecord], everyone: str,
               waits: dict[str, list[str]], out: list[Action]) -> None:
    """Every run in `queued` waits: for its own hold if it has one (kept on the record: SetHold
    when it changed), else for `everyone`. The planner's hot loop at 100,000 queued runs."""
    bucket = waits.setdefault(everyone, [])
    append = bucket.append
    stamps, now, no_gpus = bool(snap.stamps or snap.provider_stamps), snap.now, cfg.max_gpu_parallel == 0 or snap.capacity.get("gpu") is not None
    for rec in queued:
        if (rec.gpus > 0 and no_gpus) or stamps or (rec.parked_until is not None and rec.parked_until > now):
            hold = _hold_of(rec, snap, cfg)
        else:
            hold = None
        if hold is None:
            append(rec.run_id)
        else:
            waits.setdefault(hold, []).append(rec.run_id)
        if hold != rec.hold_reason and (hold is not None or rec.hold_reason is not None):
            out.append(SetHold(rec.run_id, rec, hold))
    if not bucket:
        del waits[everyone]
