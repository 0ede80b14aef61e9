"""The operator's verbs on one run: `sweep retry` and `sweep abort`.

Both are safe against a concurrent tick and a concurrent operator by the same rules the tick
follows (docs/state.md):

1. **The tick lock.** They hold `tick.lock` (the same kernel flock `sweep tick` takes) for their
   whole change, waiting for a running tick to finish. No tick observes, admits, requeues or ends
   anything meanwhile, and two operators on the same campaign take turns.
2. **The lease.** They write the record only while holding the run's lease, acquired exclusively
   (O_EXCL) with a token of their own: a controller can never be acting on the run at the same time
   (abort first stops the controller's job, waits until the scheduler no longer lists it, and reaps
   the dead holder's lease by compare-and-swap).
3. **Compare, then write.** The record is re-read just before writing and must be exactly the one
   that was judged; otherwise nothing is written and the verb says what changed.

A crash anywhere leaves the old record or the new one (atomic rename) and at most a lease of this
process, which the tick judges like any other (holder gone: reaped).
"""
from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from runstate.errors import ConfigError, SweepError
from runstate.lease import acquire_lease, read_lease, reap_lease, release_lease
from runstate.models import Event, Outcome, RunRecord, RunState, truncate, validate_run_id
from runstate.phases import table_of
from runstate.paths import LOCK_FILE, CampaignPaths, RunPaths
from runstate.runs import append_event, load_record, run_dir, save_record
from sweep.models.evidence import Checkpoints

LOCK_WAIT_S = 300.0         # longer than a tick normally takes; a hung tick ends at max_runtime_s
ABORT_REASON = "aborted"


class Refused(SweepError):
    """The run's state does not allow the verb; nothing was changed."""

    exit_code = 3


@dataclass
class Done:
    run_id: str
    message: str
    record: RunRecord | None = None


def _who() -> str:
    try:
        import getpass
        user = getpass.getuser()
    except Exception:
        user = str(os.getuid())
    return f"operator:{user}@{socket.gethostname()}"


class _TickLock:
    def __init__(self, campaign_dir: Path, wait_s: float):
        from filelock import FileLock
        self.lock = FileLock(str(CampaignPaths(campaign_dir).tick_lock), timeout=wait_s, mode=0o600)
        self.wait_s = wait_s

    def __enter__(self):
        from filelock import Timeout
        try:
            self.lock.acquire()
        except Timeout:
            raise SweepError(f"a tick (or another operator) held {LOCK_FILE} for {self.wait_s:.0f}s; nothing changed",
                             hint="try again; `sweep status` shows the last tick") from None
        return self

    def __exit__(self, *exc):
        self.lock.release()


def _load(campaign_dir: Path, run_id: str) -> tuple[Path, RunRecord]:
    try:
        validate_run_id(run_id)
    except ValueError as exc:
        raise ConfigError(str(exc), field="RUN") from None
    rdir = run_dir(campaign_dir, run_id)
    loaded = load_record(rdir)
    if loaded.missing:
        raise ConfigError(f"no run {run_id!r} in this campaign", path=campaign_dir)
    if loaded.value is None:
        raise Refused(f"state.json of {run_id} is unreadable ({loaded.problem}); fix or remove it first",
                      path=RunPaths.at(rdir).state)
    return rdir, loaded.value


def _ending(rec: RunRecord) -> str:
    """'outcome' or 'outcome:reason' of an ended record (state.json's invariants give it an outcome)."""
    outcome = rec.outcome.value if rec.outcome is not None else "(no outcome)"
    return outcome + (f":{rec.reason}" if rec.reason else "")


def _write_holding_lease(rdir: Path, judged: RunRecord, new: RunRecord, event: Event) -> RunRecord:
    """Acquire the lease, compare the record with `judged`, write `new`, log, release."""
    token = "op" + secrets.token_hex(5)
    if acquire_lease(rdir, run_id=judged.run_id, token=token, holder="tick") is None:
        view = read_lease(rdir)
        holder = (f"{view.lease.holder} {view.lease.job_id or ''} token {view.lease.token}".strip()
                  if view and view.lease else "a corrupt or vanished lease")
        raise Refused(f"{judged.run_id} has a lease ({holder}): something may still act on it; nothing changed",
                      hint="wait for the next tick to reap it, then try again")
    try:
        current = load_record(rdir).value
        if current != judged:
            raise Refused(f"{judged.run_id} changed while it was being judged "
                          f"(now {current.state.value if current else 'unreadable'}); nothing changed")
        written = save_record(rdir, new)
        append_event(rdir, event)
        return written
    finally:
        release_lease(rdir, token=token)


# ---- retry ---------------------------------------------------------------------------------------

def retry_run(campaign_dir: Path, run_id: str, *, reason: str | None = None,
              lock_wait_s: float = LOCK_WAIT_S) -> Done:
    """Re-admit an ended blocked or generated_unverified run with fresh attempts.

    The run starts again from intake with attempts 0 and no repair used; every earlier bundle,
    evidence file and session stays on disk, and bundle revisions keep counting up (so no evidence
    file is overwritten). The retry is recorded in `checkpoints.retry` (how many, the previous
    ending, why) and as a `retried` event.
    """
    from sweep.campaign import load_campaign
    campaign_dir = Path(campaign_dir).resolve()
    load_campaign(campaign_dir)
    with _TickLock(campaign_dir, lock_wait_s):
        rdir, rec = _load(campaign_dir, run_id)
        if rec.state is not RunState.ended:
            raise Refused(f"{run_id} is {rec.state.value}, not ended: there is nothing to retry "
                          "(the tick admits queued runs by itself)")
        if rec.outcome is Outcome.verified:
            raise Refused(f"{run_id} is verified: retrying would only spend money on a finished task")
        previous = _ending(rec)
        cps = Checkpoints.of(rec.checkpoints, where=str(RunPaths.at(rdir).state))   # malformed: named, refused
        last_revision = max(cps.author_revision, cps.retry_after_revision)
        retry_cp = {"count": (cps.retry.count if cps.retry else 0) + 1, "previous": previous,
                    "reason": truncate(reason, 500), "after_revision": last_revision,
                    "by": _who(), "at": time.time()}
        new = rec.model_copy(update={
            "state": RunState.queued, "phase": table_of(rec.phase).first, "outcome": None, "reason": None, "attempts": 0,
            "checkpoints": {"retry": retry_cp}, "last_error": None, "hold_reason": None, "canary_for": None,
            "parked_until": None, "parked_role": None, "job_id": None, "submit_token": None,
            # fresh interruptions too: a run ended max_interrupted gets its full allowance again
            "interruptions": 0, "interrupted_by": {}, "pending_interruption": None, "slurm_restarts": 0})
        event = Event(run_id=run_id, kind="retried", from_state="ended", to_state="queued", by=_who(),
                      detail=f"retry {retry_cp['count']} after {previous}" + (f": {reason}" if reason else ""))
        written = _write_holding_lease(rdir, rec, new, event)
    return Done(run_id, f"{run_id}: {previous} -> queued with fresh attempts (retry {retry_cp['count']})", written)


# ---- abort ---------------------------------------------------------------------------------------

def _wait_gone(scheduler, job_id: str, deadline: float) -> tuple[bool, str]:
    """(True, "") once a successfully read queue no longer lists the job. An unreadable queue is
    UNKNOWN, never 'gone'."""
    why = ""
    while True:
        snap = scheduler.queue()
        if snap.known and job_id not in snap.jobs:
            return True, ""
        why = f"queue UNKNOWN: {snap.error}" if not snap.known else f"job {job_id} still {snap.jobs[job_id].state}"
        if time.monotonic() > deadline:
            return False, why
        time.sleep(0.5)


def abort_run(campaign_dir: Path, run_id: str, *, reason: str | None = None, wait_s: float = 120.0,
              lock_wait_s: float = LOCK_WAIT_S, scheduler=None) -> Done:
    """Stop a queued or active run for good: cancel its job, wait until the scheduler no longer
    lists it (its controller, on SIGTERM, stops its sessions' process groups), reap the dead
    holder's lease, and end the run `blocked` with reason `aborted`."""
    from sweep.campaign import Campaign
    campaign = Campaign.load(campaign_dir)
    campaign_dir = campaign.dir
    with _TickLock(campaign_dir, lock_wait_s):
        rdir, rec = _load(campaign_dir, run_id)
        if rec.state is RunState.ended:
            ending = _ending(rec)
            raise Refused(f"{run_id} has already ended ({ending}); nothing to abort"
                          + ("" if rec.outcome is Outcome.verified else f" (`sweep retry {run_id}` re-admits it)"))
        cancelled = ""
        if rec.state is RunState.active and rec.job_id:
            sched = scheduler or campaign.scheduler()
            sched.cancel([rec.job_id])
            append_event(rdir, Event(run_id=run_id, kind="abort_requested", by=_who(),
                                     detail=f"cancelled job {rec.job_id}" + (f": {reason}" if reason else "")))
            gone, why = _wait_gone(sched, rec.job_id, time.monotonic() + wait_s)
            if not gone:
                raise SweepError(f"cancelled job {rec.job_id}, but after {wait_s:.0f}s it has not left the queue "
                                 f"({why}); the record is unchanged",
                                 hint=f"run `sweep abort {run_id}` again once the job is gone")
            cancelled = f"job {rec.job_id} cancelled; "
            view = read_lease(rdir)
            if view is not None:
                reap_lease(rdir, view)        # its holder is gone: CAS on the exact bytes judged
            rdir, rec = _load(campaign_dir, run_id)   # the controller may have written on SIGTERM
            if rec.state is RunState.ended:
                ending = _ending(rec)
                return Done(run_id, f"{run_id}: {cancelled}it ended on its own ({ending}) before the abort "
                                    "took effect; record left as it is", rec)
        elif rec.state is RunState.active:
            raise Refused(f"{run_id} is active without a job id; nothing changed")
        new = rec.model_copy(update={
            "state": RunState.ended, "outcome": Outcome.blocked, "reason": ABORT_REASON, "canary_for": None,
            "hold_reason": None, "parked_until": None, "parked_role": None,
            "last_error": truncate(f"aborted by {_who()}" + (f": {reason}" if reason else ""), 500)})
        event = Event(run_id=run_id, kind="ended", from_state=rec.state.value, to_state="ended", by=_who(),
                      detail=f"blocked:{ABORT_REASON}" + (f": {reason}" if reason else ""))
        written = _write_holding_lease(rdir, rec, new, event)
    return Done(run_id, f"{run_id}: {cancelled}ended blocked: {ABORT_REASON}", written)


# ---- clear a cooldown ----------------------------------------------------------------------------

def _ack_breaker_for(campaign_dir: Path, details: list[str], released: list[str], who: str):
    """The circuit breaker's trip, acknowledged, when the cooldowns just cleared are its cause (a
    bad key parks its run and trips the breaker at once, so clearing the key family's cooldown
    alone would leave admission stopped); None when it has not tripped or tripped on another."""
    from runstate.breaker import acknowledge, tripped
    trip = tripped(campaign_dir)
    if trip is None or not (any(trip.cause in d for d in details) or set(trip.runs) & set(released)):
        return None
    return acknowledge(campaign_dir, trip.cause, who=who)


def clear_cooldown(campaign_dir: Path, roles: list[str], *, family: str | None = None, reason: str | None = None,
                   lock_wait_s: float = LOCK_WAIT_S) -> Done:
    """End the cooldown of `roles` (and of every role of key family `family`) now, once the operator
    fixed the key: each role's stamp is rewritten as expired (so, as after any cooldown, one canary
    run goes first and its success clears the stamp), and each queued run parked for one of those
    roles is released, with a `cooldown_cleared` event on it. A config park otherwise holds a
    family for 45 minutes after the fix."""
    from roles import load_roles_dir
    from runstate.markers import read_outage, stamp_outage
    from runstate.models import COOLDOWN_KEYS, PIPELINE_ROLES, cooldown_key
    from runstate.phases import EVAL_PHASE_TABLE
    from runstate.runs import list_runs
    from sweep.campaign import load_campaign
    from sweep.runtimes import key_family_of
    campaign_dir = Path(campaign_dir).resolve()
    campaign = load_campaign(campaign_dir)
    for role in roles:
        if role not in COOLDOWN_KEYS:
            raise ConfigError(f"{role!r} is not a role (roles: {', '.join(PIPELINE_ROLES)}; an evaluation's "
                              f"per key family: {', '.join(COOLDOWN_KEYS[len(PIPELINE_ROLES):])})", field="ROLE")
    chosen = set(roles)
    if family is not None:
        # an evaluation's cells wait on their arm's family's cooldown (solver-<family>)
        chosen.update(cooldown_key(role, family) for role in EVAL_PHASE_TABLE.roles)
        specs = load_roles_dir(campaign_dir / "roles")
        defaults = campaign.settings.defaults.runtimes
        for role in PIPELINE_ROLES:
            stamp = read_outage(campaign_dir, role).value
            if (role in specs and key_family_of(specs[role], getattr(defaults, role)) == family) or \
                    (stamp is not None and f"key family {family}" in (stamp.detail or "")):
                chosen.add(role)
    if not chosen:
        raise ConfigError("name a role or a key family whose cooldown to clear", field="ROLE",
                          hint="sweep clear-cooldown solver, or sweep clear-cooldown --family openai")
    now = time.time()
    who = _who()
    cleared, released, details = [], [], []
    with _TickLock(campaign_dir, lock_wait_s):
        for role in sorted(chosen):
            stamp = read_outage(campaign_dir, role).value
            if stamp is None:
                continue
            note = f"cleared by {who}" + (f": {truncate(reason, 200)}" if reason else "")
            stamp_outage(campaign_dir, role, stamp.kind, truncate(f"{stamp.detail or ''} [{note}]", 1000),
                         now=now, stamped_by=who, cooldown_s=0.0)
            cleared.append(role)
            details.append(stamp.detail or "")
        for run_id, rec in sorted(list_runs(campaign_dir).records.items()):
            if rec.state is not RunState.queued or rec.parked_role not in chosen or rec.parked_until is None:
                continue
            event = Event(run_id=run_id, kind="cooldown_cleared", from_state="queued", to_state="queued", by=who,
                          detail=f"the {rec.parked_role} cooldown was cleared by the operator"
                                 + (f": {reason}" if reason else ""))
            new = rec.model_copy(update={"parked_until": None, "parked_role": None, "hold_reason": None})
            _write_holding_lease(run_dir(campaign_dir, run_id), rec, new, event)
            released.append(run_id)
        acked = _ack_breaker_for(campaign_dir, details, released, who)
    what = ", ".join(sorted(chosen))
    message = (f"cooldown cleared for {', '.join(cleared) or 'no stamped role'} (asked: {what}); "
               f"{len(released)} parked run(s) released")
    if acked is not None:
        message += f"; the circuit breaker it tripped ({acked.cause}, lane {acked.lane}) is acknowledged"
    return Done(run_id=",".join(released), message=message)
