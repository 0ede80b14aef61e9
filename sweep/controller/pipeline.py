"""The controller's phase pipeline (see sweep/controller/__init__.py for the guarantees)."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import orjson

from runstate.errors import SweepError
from runstate.lease import LeaseLost, hand_over_lease, heartbeat_lease, read_lease, release_lease
from runstate.markers import is_draining, stamp_outage
from runstate.models import EndReason, Outcome, Phase, RunRecord, RunState, truncate
from runstate.runs import load_record, run_dir
from sweep import proc
from sweep.campaign import load_campaign, load_candidate
from sweep.redact import Redactor
from sweep.controller.budget import Budget
from sweep.controller.context import AttemptFailed, Ctx, Ending, ExitCode, Interrupted, Park

RECORD_WAIT_S = 300          # how long a job waits for the tick (or the next tick) to record it


# ---- the controller's child process groups ----------------------------------------------------

CHILD_TERM_GRACE_S = 2.0     # well inside the local backend's 5 s and Slurm's KillWait (30 s)


def stop_child_groups(grace_s: float = CHILD_TERM_GRACE_S) -> list[int]:
    """TERM, then KILL, the process groups of this controller's sessions and trials (sweep.proc)."""
    return proc.stop_child_groups(grace_s)


# ---- lease heartbeat ----------------------------------------------------------------------------

class Heartbeat(threading.Thread):
    def __init__(self, ctx: Ctx, interval_s: float):
        super().__init__(daemon=True, name="sweep-heartbeat")
        self.ctx = ctx
        self.interval = interval_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                heartbeat_lease(self.ctx.rdir, token=self.ctx.token, job_id=self.ctx.job_id)
            except LeaseLost as exc:
                self.ctx.lease_lost = True
                self.ctx.stop_reason = f"lease lost: {exc}"
                os.kill(os.getpid(), signal.SIGTERM)     # interrupt the main thread promptly
                return
            except OSError:
                continue    # a flaky mount: try again next interval; the TTL is much longer


# ---- entry point --------------------------------------------------------------------------------

def run_controller(campaign_dir: Path, run_id: str, token: str, job_id: str | None = None) -> int:
    from sweep.frozen import check_runtime
    campaign_dir = Path(campaign_dir).resolve()
    job_id = job_id or os.environ.get("SWEEP_JOB_ID")
    if not job_id:
        raise SweepError("SWEEP_JOB_ID is not set: the controller runs only as a job the tick submitted",
                         hint="use `sweep tick`, not `sweep controller` by hand")
    campaign = load_campaign(campaign_dir)
    from sweep.credentials import register_known_secrets
    register_known_secrets(campaign.settings)      # every stored text is scrubbed of them from now on
    rdir = run_dir(campaign_dir, run_id)
    runtime_sha = check_runtime(campaign_dir)            # refuses a runtime other than the frozen one

    view = read_lease(rdir)
    if view is None or view.lease is None or view.lease.token != token:
        print(f"{run_id}: the lease is not this submission's (token {token}); exiting without acting")
        return ExitCode.not_holder
    if view.lease.job_id is None:
        hand_over_lease(rdir, token=token, job_id=job_id)       # the tick died before handing over
    elif view.lease.job_id != job_id:
        print(f"{run_id}: the lease is held by job {view.lease.job_id}; exiting without acting")
        return ExitCode.not_holder
    record = _wait_for_record(rdir, job_id, token)
    if record is None:
        release_lease(rdir, token=token)
        print(f"{run_id}: the record never named job {job_id} within {RECORD_WAIT_S}s; gave the lease back")
        return ExitCode.never_recorded

    budget = Budget(rdir, run_id, record.allocation_usd)
    ctx = Ctx(campaign_dir, campaign, rdir, run_id, token, job_id, record, budget, load_candidate(rdir))
    uncertain = budget.mark_uncertain()
    if uncertain:
        ctx.event("uncertain", detail=f"operations left open by a killed controller stay reserved: {uncertain}")
    if runtime_sha and record.runtime_sha != runtime_sha:
        ctx.save(runtime_sha=runtime_sha)

    def on_term(signum, frame):
        if ctx.stop_reason is None:
            ctx.stop_reason = "SIGTERM"
        if ctx.interrupting:
            return              # a second TERM while stopping: the first one is being handled
        ctx.interrupting = True
        # Stop the running session or trial BEFORE unwinding: it leads its own process group, so
        # the TERM sent to this job's group never reached it, and the session's audit (which runs
        # as the exception unwinds) must see a workspace nothing is writing to any more.
        stopped = stop_child_groups()
        if stopped:
            ctx.event("session_stopped", phase=ctx.record.phase.value,
                      detail=f"{ctx.stop_reason}: stopped process group(s) " + ", ".join(map(str, stopped)))
        raise Interrupted(ctx.stop_reason)

    signal.signal(signal.SIGTERM, on_term)
    hb = Heartbeat(ctx, campaign.settings.tick.heartbeat_s)
    hb.start()
    import sweep
    ctx.say(f"job {job_id} starts at phase {record.phase.value} (attempt {record.attempts + 1}/{record.max_attempts}); "
            f"runtime {runtime_sha[:16] if runtime_sha else 'not frozen'}, sweep from {Path(sweep.__file__).parent}")
    try:
        return _run_phases(ctx)
    finally:
        hb.stopped.set()


def _wait_for_record(rdir: Path, job_id: str, token: str) -> RunRecord | None:
    deadline = time.monotonic() + RECORD_WAIT_S
    while True:
        rec = load_record(rdir).value
        if rec is not None and rec.state is RunState.active and rec.job_id == job_id:
            return rec
        view = read_lease(rdir)
        if view is None or view.lease is None or view.lease.token != token:
            return None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def _run_phases(ctx: Ctx) -> int:
    from sweep.controller import phases
    try:
        try:
            while True:
                phase = ctx.record.phase
                if phase is not Phase.evaluate and is_draining(ctx.campaign_dir):
                    return _stop_at_checkpoint(ctx, "drain requested")
                ctx.event("phase_started", phase=phase.value)
                ctx.say(f"phase {phase.value}")
                next_phase, summary = phases.RUNNERS[phase](ctx)
                checkpoints = {**ctx.record.checkpoints, phase.value: {**summary, "at": time.time()}}
                ctx.save(phase=next_phase, checkpoints=checkpoints)
                ctx.event("phase_done", phase=phase.value, detail=truncate(orjson.dumps(summary).decode(), 400))
        except Ending as end:
            return _end(ctx, end)
        except Park as park:
            return _park(ctx, park)
        except AttemptFailed as failed:
            return _fail(ctx, failed.detail)
    except Interrupted:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)     # finish the checkpoint undisturbed
        if ctx.lease_lost:
            ctx.say(f"stopping without writing: {ctx.stop_reason}")
            return ExitCode.lease_lost
        return _fail(ctx, f"interrupted by {ctx.stop_reason} during phase {ctx.record.phase.value}")
    except LeaseLost as exc:
        ctx.say(f"stopping without writing: {exc}")
        return ExitCode.lease_lost


def _release(ctx: Ctx) -> None:
    release_lease(ctx.rdir, token=ctx.token)


def _end(ctx: Ctx, end: Ending) -> int:
    from sweep.controller.report import write_report
    spent = ctx.budget.committed
    checkpoints = dict(ctx.record.checkpoints)
    checkpoints["evaluate"] = {"outcome": end.outcome.value, "reason": end.reason, "at": time.time()}
    rec = ctx.save(state=RunState.ended, outcome=end.outcome, reason=end.reason, spent_usd=spent,
                   checkpoints=checkpoints, last_error=None, hold_reason=None, canary_for=None)
    write_report(ctx, rec, end.detail)
    ctx.event("ended", from_state="active", to_state="ended",
              detail=f"{end.outcome.value}" + (f":{end.reason}" if end.reason else "")
              + (f" — {end.detail}" if end.detail else ""))
    _release(ctx)
    ctx.say(f"ended {end.outcome.value}" + (f" ({end.reason})" if end.reason else ""))
    return ExitCode.ok


def _park(ctx: Ctx, park: Park) -> int:
    park.detail = Redactor().scrub(park.detail)     # the outage stamp is read by every tick and status
    stamp = stamp_outage(ctx.campaign_dir, park.role, park.kind, park.detail, stamped_by=f"job:{ctx.job_id}")
    for other in park.also:
        if other != park.role:
            stamp_outage(ctx.campaign_dir, other, park.kind, f"(via {park.role}) {park.detail}",
                         stamped_by=f"job:{ctx.job_id}")
    # Parks are free, but not forever: the Nth park of this run for the same role counts an
    # attempt, so a run that trips the same failure every time cannot stall a role indefinitely.
    parks = dict(ctx.record.checkpoints.get("parks") or {})
    count = int(parks.get(park.role, 0)) + 1
    limit = getattr(ctx.campaign.settings, "parks_per_attempt", 3)
    parks[park.role] = 0 if count >= limit else count
    ctx.save(checkpoints={**ctx.record.checkpoints, "parks": parks})
    if count >= limit:
        return _fail(ctx, f"parked {count} times for role {park.role} (parks_per_attempt = {limit}); "
                          f"counted as an attempt: {park.kind}: {park.detail}")
    ctx.save(state=RunState.queued, parked_until=stamp.until, parked_role=park.role, canary_for=None,
             last_error=truncate(f"{park.kind} in role {park.role}: {park.detail}", 500))
    ctx.event("parked", from_state="active", to_state="queued", phase=ctx.record.phase.value,
              detail=f"{park.kind} in {park.role}; cooldown until {stamp.until:.0f}: {park.detail}")
    _release(ctx)
    ctx.say(f"parked: {park.kind} in role {park.role}; not counted as an attempt")
    return ExitCode.ok


def _fail(ctx: Ctx, detail: str) -> int:
    rec = ctx.record
    attempts = rec.attempts + 1
    if attempts >= rec.max_attempts:
        return _end(ctx, Ending(Outcome.blocked, EndReason.max_attempted, detail))
    ctx.save(state=RunState.queued, attempts=attempts, canary_for=None, last_error=truncate(detail, 500))
    ctx.event("attempt_failed", from_state="active", to_state="queued", phase=rec.phase.value,
              detail=f"attempt {attempts}/{rec.max_attempts}: {detail}")
    _release(ctx)
    ctx.say(f"attempt failed ({attempts}/{rec.max_attempts}): {detail}")
    return ExitCode.ok


def _stop_at_checkpoint(ctx: Ctx, why: str) -> int:
    ctx.save(state=RunState.queued, canary_for=None)
    ctx.event("stopped", from_state="active", to_state="queued", phase=ctx.record.phase.value, detail=why)
    _release(ctx)
    ctx.say(f"stopped at checkpoint before phase {ctx.record.phase.value}: {why}")
    return ExitCode.ok
