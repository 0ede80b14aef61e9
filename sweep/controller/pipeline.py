"""The controller's phase pipeline (see sweep/controller/__init__.py for the guarantees)."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from runstate.errors import SweepError
from runstate.lease import LeaseLost, LeaseView, hand_over_lease, heartbeat_lease, read_lease, release_lease
from runstate.markers import is_draining, stamp_outage, stamp_provider
from runstate.checkpoints import EvaluateCheckpoint
from runstate.models import Cooldown, EndReason, Outcome, RunRecord, RunState, truncate, validate_run_id
from runstate.phases import PHASE_TABLE, table_of, validate_phase
from runstate.runs import load_record
from sweep import proc
from sweep.campaign import Campaign, load_candidate
from sweep.redact import Redactor
from sweep.controller.budget import Budget
from sweep.controller.context import AttemptFailed, Ctx, Ending, ExitCode, Interrupted, Park

if TYPE_CHECKING:
    from sweep.scheduler.base import SchedulerBackend

RECORD_WAIT_S = 300          # how long a job waits for the tick (or the next tick) to record it

# causes that are not the run's fault: re-queued without an attempt (docs/slurm.md has the table)
INTERRUPTION_CAUSES = ("time_limit", "preempted", "node_fail", "requeued")


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
                heartbeat_lease(self.ctx.paths.dir, token=self.ctx.token, job_id=self.ctx.job_id)
            except LeaseLost as exc:
                self.ctx.lease_lost = True
                self.ctx.stop_reason = f"lease lost: {exc}"
                os.kill(os.getpid(), signal.SIGTERM)     # interrupt the main thread promptly
                return
            except OSError:
                continue    # a flaky mount: try again next interval; the TTL is much longer


# ---- lease hand-over ----------------------------------------------------------------------------

def _hand_over_to_self(rdir: Path, token: str, job_id: str) -> LeaseView | None:
    """Take the lease for this job; the lease as it then is.

    The tick may be handing it over at the same moment (after sbatch, or adopting the job): then
    our hand-over can lose the race, and the lease the tick wrote names this job already.
    """
    try:
        hand_over_lease(rdir, token=token, job_id=job_id)
    except LeaseLost:
        pass
    return read_lease(rdir)


# ---- entry point --------------------------------------------------------------------------------

def run_controller(campaign_dir: Path, run_id: str, token: str, job_id: str | None = None) -> int:
    os.umask(0o077)      # docs/state.md: everything a run writes is private (dirs 0700, files 0600)
    from sweep.frozen import check_runtime
    campaign_dir = Path(campaign_dir).resolve()
    job_id = job_id or os.environ.get("SWEEP_JOB_ID")
    if not job_id:
        raise SweepError("SWEEP_JOB_ID is not set: the controller runs only as a job the tick submitted",
                         hint="use `sweep tick`, not `sweep controller` by hand")
    campaign = Campaign.load(campaign_dir)
    from sweep.credentials import register_known_secrets
    register_known_secrets(campaign.settings)      # every stored text is scrubbed of them from now on
    paths = campaign.run(validate_run_id(run_id))
    rdir = paths.dir
    runtime_sha = check_runtime(campaign.dir)            # refuses a runtime other than the frozen one

    view = read_lease(rdir)
    if view is not None and view.lease is not None and view.lease.token == token and view.lease.job_id is None:
        view = _hand_over_to_self(rdir, token, job_id)          # the tick died before handing over
    if view is None or view.lease is None or view.lease.token != token:
        print(f"{run_id}: the lease is not this submission's (token {token}); exiting without acting")
        return ExitCode.not_holder
    if view.lease.job_id != job_id:
        print(f"{run_id}: the lease is held by job {view.lease.job_id}; exiting without acting")
        return ExitCode.not_holder
    record = _wait_for_record(rdir, job_id, token)
    if record is None:
        release_lease(rdir, token=token)
        print(f"{run_id}: the record never named job {job_id} within {RECORD_WAIT_S}s; gave the lease back")
        return ExitCode.never_recorded

    budget = Budget(rdir, run_id, record.allocation_usd)
    # an evaluation cell (its own phase table, docs/eval.md) has its cell in the manifest, no candidate
    candidate = load_candidate(rdir) if table_of(record.phase) is PHASE_TABLE else None
    ctx = Ctx(campaign, paths, token, job_id, record, budget, candidate)
    uncertain = budget.mark_uncertain()
    if uncertain:
        ctx.event("uncertain", detail=f"operations left open by a killed controller stay reserved: {uncertain}")
    if runtime_sha and record.runtime_sha != runtime_sha:
        ctx.save(runtime_sha=runtime_sha)

    def on_term(signum, frame):
        if ctx.stop_reason is None:
            ctx.stop_signal = signum
            ctx.stop_reason = ("SIGUSR1 (the time-limit warning)" if signum == signal.SIGUSR1
                               else "SIGTERM")
        if ctx.interrupting:
            return              # a second TERM while stopping: the first one is being handled
        ctx.interrupting = True
        # Stop the running session or trial BEFORE unwinding: it leads its own process group, so
        # the TERM sent to this job's group never reached it, and the session's audit (which runs
        # as the exception unwinds) must see a workspace nothing is writing to any more.
        stopped = stop_child_groups()
        if stopped:
            ctx.event("session_stopped", phase=ctx.record.phase,
                      detail=f"{ctx.stop_reason}: stopped process group(s) " + ", ".join(map(str, stopped)))
        raise Interrupted(ctx.stop_reason)

    signal.signal(signal.SIGTERM, on_term)
    # --signal=B:USR1@N: Slurm's warning N s before the time limit (the job script execs this
    # process, so the batch-shell-only signal lands here)
    signal.signal(signal.SIGUSR1, on_term)
    counted = _count_slurm_requeue(ctx)
    if counted is not None:
        return counted
    hb = Heartbeat(ctx, campaign.settings.tick.heartbeat_s)
    hb.start()
    import sweep
    ctx.say(f"job {job_id} starts at phase {record.phase} (attempt {record.attempts + 1}/{record.max_attempts}); "
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
            phases._provider(ctx)      # probe the sandbox at every start: park now, not mid-phase
            while True:
                phase = ctx.record.phase
                if phase != table_of(phase).names[-1] and is_draining(ctx.campaign.dir):
                    return _stop_at_checkpoint(ctx, "drain requested")
                ctx.event("phase_started", phase=phase)
                ctx.say(f"phase {phase}")
                next_phase, checkpoint = phases.runner(phase)(ctx)
                summary = checkpoint.to_json()
                checkpoints = {**ctx.record.checkpoints, phase: {**summary, "at": time.time()}}
                ctx.save(phase=validate_phase(next_phase), checkpoints=checkpoints)
                ctx.event("phase_done", phase=phase, detail=truncate(orjson.dumps(summary).decode(), 400))
        except Ending as end:
            return _end(ctx, end)
        except Park as park:
            return _park(ctx, park)
        except AttemptFailed as failed:
            return _fail(ctx, failed.detail, cause=failed.cause)
        except (Interrupted, LeaseLost):
            raise
        except Exception as exc:
            # a bug or an unforeseen failure: written on the run (type, message, phase) before the
            # job exits, never left for the tick to report as "job vanished"
            import traceback
            phase_name = ctx.record.phase
            what = f"unexpected {type(exc).__name__} in phase {phase_name}: {exc}"
            tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
            ctx.event("phase_error", phase=phase_name, detail=truncate(f"{what}\n{tail}", 1800))
            return _fail(ctx, truncate(what, 500), cause="unexpected_error")
    except Interrupted:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)     # finish the checkpoint undisturbed
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        if ctx.lease_lost:
            ctx.say(f"stopping without writing: {ctx.stop_reason}")
            return ExitCode.lease_lost
        return _stopped_by_signal(ctx)
    except LeaseLost as exc:
        ctx.say(f"stopping without writing: {exc}")
        return ExitCode.lease_lost


def _release(ctx: Ctx) -> None:
    release_lease(ctx.paths.dir, token=ctx.token)


def _note_breaker(ctx: Ctx, cause: str | None, detail: str, *, at_once: bool = False) -> None:
    """Tell the circuit breaker (runstate/breaker.py); it is a safety net, so a failure to write it
    is reported as an event and never stops the ending or the attempt being recorded. `at_once`:
    a park for the campaign's set-up (a configuration error, a failed readiness check of the test
    command on the base checkout) owes nothing to the PR, so one is enough to stop admission."""
    from runstate.breaker import note_result
    settings = ctx.campaign.settings.breaker
    after = min(1, settings.after) if at_once else settings.after
    try:
        trip = note_result(ctx.campaign.dir, lane=ctx.record.lane, run_id=ctx.record.run_id, cause=cause,
                           detail=detail, after=after, causes=settings.causes)
    except OSError as exc:
        ctx.event("breaker_unwritten", detail=f"breaker.json not updated: {exc.strerror or exc}")
        return
    if trip is not None:
        ctx.event("breaker_tripped", detail=f"{trip.cause} in lane {trip.lane}: {trip.count} runs in a row "
                                            f"({', '.join(trip.runs[-5:])}); admission stopped")
        ctx.say(f"circuit breaker tripped: {trip.cause} ({trip.count} runs in a row in lane {trip.lane})")


def _end(ctx: Ctx, end: Ending) -> int:
    from sweep.controller.causes import cause_of_ending
    from sweep.controller.report import write_report
    cause: str | None
    if end.cause is not None:
        cause, cause_detail = end.cause, " ".join(end.detail.split())[:300]
    else:
        cause, cause_detail = cause_of_ending(ctx.paths.dir, end.reason, end.detail, ctx.record.cause)
    cause_detail = Redactor().scrub(cause_detail)
    spent = ctx.budget.committed
    checkpoints = dict(ctx.record.checkpoints)
    # the ending is the last row's checkpoint, whichever phase raised it
    checkpoints[table_of(ctx.record.phase).names[-1]] = {**EvaluateCheckpoint(outcome=end.outcome.value, reason=end.reason).to_json(),
                                          "at": time.time()}
    rec = ctx.save(state=RunState.ended, outcome=end.outcome, reason=end.reason, spent_usd=spent,
                   checkpoints=checkpoints, last_error=None, hold_reason=None, canary_for=None,
                   cause=cause, cause_detail=cause_detail or None)
    if ctx.candidate_file is not None:      # an evaluation cell's report is its result.json
        write_report(ctx, rec, end.detail)
    ctx.event("ended", from_state="active", to_state="ended",
              detail=f"{end.outcome.value}" + (f":{end.reason}" if end.reason else "")
              + (f" [{cause}]" if cause else "") + (f" — {end.detail}" if end.detail else ""))
    _note_breaker(ctx, cause, cause_detail)
    _release(ctx)
    ctx.say(f"ended {end.outcome.value}" + (f" ({end.reason})" if end.reason else ""))
    return ExitCode.ok


def _park(ctx: Ctx, park: Park) -> int:
    park.detail = Redactor().scrub(park.detail)     # the outage stamp is read by every tick and status
    if park.provider is not None:                   # the provider's cooldown: only runs on it wait
        stamp: Cooldown = stamp_provider(ctx.campaign.dir, park.provider, park.kind, park.detail,
                                         stamped_by=f"job:{ctx.job_id}")
    else:
        stamp = stamp_outage(ctx.campaign.dir, park.role, park.kind, park.detail, stamped_by=f"job:{ctx.job_id}")
    for other in park.also:
        if other != park.role:
            stamp_outage(ctx.campaign.dir, other, park.kind, f"(via {park.role}) {park.detail}",
                         stamped_by=f"job:{ctx.job_id}")
    # Parks are free, but not forever: the Nth park of this run for the same role counts an
    # attempt, so a run that trips the same failure every time cannot stall a role indefinitely.
    parks = dict(ctx.record.checkpoints.get("parks") or {})
    count = int(parks.get(park.role, 0)) + 1
    limit = ctx.campaign.settings.parks_per_attempt
    parks[park.role] = 0 if count >= limit else count
    ctx.save(checkpoints={**ctx.record.checkpoints, "parks": parks})
    from sweep.controller.causes import cause_from_text
    cause = cause_from_text(park.detail, {"config": "provider_config", "throttle": "throttle"}.get(park.kind, "outage"))
    if count >= limit:
        return _fail(ctx, f"parked {count} times for role {park.role} (parks_per_attempt = {limit}); "
                          f"counted as an attempt: {park.kind}: {park.detail}", cause=cause)
    where = f"provider {park.provider}" if park.provider else f"role {park.role}"
    # parked_role stays the role it happened in (a provider park is held by the provider's stamp)
    ctx.save(state=RunState.queued, parked_until=stamp.until, parked_role=park.role, canary_for=None,
             last_error=truncate(f"{park.kind} in {where}: {park.detail}", 500),
             cause=cause, cause_detail=truncate(" ".join(park.detail.split()), 300))
    if cause in ctx.campaign.settings.breaker.causes:     # a park for the campaign's set-up: at once
        _note_breaker(ctx, cause, park.detail, at_once=True)
    ctx.event("parked", from_state="active", to_state="queued", phase=ctx.record.phase,
              detail=f"{park.kind} in {where}; cooldown until {stamp.until:.0f}: {park.detail}")
    _release(ctx)
    ctx.say(f"parked: {park.kind} in role {park.role}; not counted as an attempt")
    return ExitCode.ok


def _fail(ctx: Ctx, detail: str, *, cause: str | None = None) -> int:
    from sweep.controller.causes import cause_of_failure
    rec = ctx.record
    attempts = rec.attempts + 1
    cause = cause or cause_of_failure(detail)
    if attempts >= rec.max_attempts:
        return _end(ctx, Ending(Outcome.blocked, EndReason.max_attempted, detail, cause=cause))
    ctx.save(state=RunState.queued, attempts=attempts, canary_for=None, last_error=truncate(detail, 500),
             cause=cause, cause_detail=truncate(" ".join(Redactor().scrub(detail).split()), 300))
    _note_breaker(ctx, cause, detail)
    ctx.event("attempt_failed", from_state="active", to_state="queued", phase=rec.phase,
              detail=f"attempt {attempts}/{rec.max_attempts}: {detail}")
    _release(ctx)
    ctx.say(f"attempt failed ({attempts}/{rec.max_attempts}): {detail}")
    return ExitCode.ok


def _backend(ctx: Ctx) -> SchedulerBackend:
    from sweep.scheduler import backend
    return backend(ctx.campaign.settings.scheduler.backend)


def _restart_count(ctx: Ctx) -> int:
    """How many times the scheduler restarted this controller's own job (the scheduler contract:
    only `ctx.job_id` itself, the job the record and the lease name, matched with this
    submission's token at start; a count from another job, as a scrontab tick had, is never it)."""
    return _backend(ctx).job_restart_count(os.environ, ctx.job_id)


def establish_stop_cause(ctx: Ctx):
    """Why the scheduler is stopping this job, as far as one bounded question can tell.

    SIGUSR1 is the time-limit warning, unless the scheduler says the job is being preempted: a
    site with `SlurmctldParameters=preempt_send_user_signal` sends the job's --signal at the
    preemption instead of waiting out the partition's GraceTime (on a lane with requeue = "slurm"
    the run then waits for its requeued job, as after a SIGTERM). For SIGTERM, the scheduler
    contract's `job_stop_cause`: under Slurm ONE `scontrol show job` (bounded), for the local
    backend a cancel. On a lane marked `preemptible` an unanswered question counts as a
    preemption; otherwise an unknown cause is an attempt.
    """
    from sweep.scheduler.base import StopCause
    cause = _backend(ctx).job_stop_cause(ctx.job_id, _restart_count(ctx), os.environ)
    _, lane = ctx.campaign.settings.scheduler.lanes.for_gpus(ctx.record.gpus)
    if ctx.stop_signal == signal.SIGUSR1:
        if cause.cause in ("preempted", "requeued"):
            return StopCause("preempted", f"SIGUSR1 at the preemption (preempt_send_user_signal): {cause.detail}",
                             requeued=cause.requeued or lane.requeue == "slurm")
        return StopCause("time_limit", "SIGUSR1: the time-limit warning (--signal=B:USR1)")
    if cause.cause == "unknown":
        if lane.preemptible:
            return StopCause("preempted", f"{cause.detail}; taken as a preemption on a preemptible lane")
    return cause


def _stopped_by_signal(ctx: Ctx) -> int:
    """The checkpoint after SIGTERM/SIGUSR1: an interruption (no attempt) or an attempt."""
    cause = establish_stop_cause(ctx)
    phase = ctx.record.phase
    ctx.say(f"stopped by {ctx.stop_reason}: {cause.cause} ({cause.detail})")
    if cause.requeued:
        # Slurm reruns this same job id: keep the run active and the lease held for it, and leave
        # the cause for the rerun (or for the tick, should the requeued job vanish instead)
        ctx.save(pending_interruption={"job_id": ctx.job_id, "cause": cause.cause,
                                       "detail": cause.detail, "at": time.time()})
        ctx.event("interrupted", from_state="active", to_state="active", phase=phase,
                  detail=f"{cause.cause}: {cause.detail}; the run waits for its requeued job {ctx.job_id}")
        return ExitCode.ok
    if cause.cause in INTERRUPTION_CAUSES:
        return _interrupt(ctx, cause.cause, f"{ctx.stop_reason} during phase {phase}: {cause.detail}")
    return _fail(ctx, f"interrupted by {ctx.stop_reason} during phase {phase} ({cause.detail})")


def _interrupt(ctx: Ctx, cause: str, detail: str) -> int:
    """Back to queued at the same phase without spending an attempt, or max_interrupted."""
    rec = ctx.record
    counted = rec.interrupted(cause)
    if counted["interruptions"] >= rec.max_interruptions:
        ctx.save(**counted)
        return _end(ctx, Ending(Outcome.blocked, EndReason.max_interrupted,
                                f"{cause}: {detail} (interruption {counted['interruptions']} of "
                                f"{rec.max_interruptions})"))
    ctx.save(state=RunState.queued, canary_for=None, last_error=truncate(f"{cause}: {detail}", 500), **counted)
    ctx.event("interrupted", from_state="active", to_state="queued", phase=rec.phase,
              detail=f"{cause}: {detail}; not counted as an attempt; interruptions "
                     f"{counted['interruptions']}/{rec.max_interruptions}")
    _release(ctx)
    ctx.say(f"interrupted ({cause}); not counted as an attempt "
            f"({counted['interruptions']}/{rec.max_interruptions})")
    return ExitCode.ok


def _count_slurm_requeue(ctx: Ctx) -> int | None:
    """A job Slurm requeued itself (SLURM_RESTART_COUNT above what the record counted) is an
    interruption of the run: count each restart once, with the cause its controller recorded
    when it was stopped (or `requeued` if it died without a word, e.g. its node failed).
    Returns an exit code when that ends the run (max_interrupted), else None."""
    restarts = _restart_count(ctx)
    rec = ctx.record
    if restarts <= rec.slurm_restarts:
        return None
    pending = rec.pending_interruption or {}
    cause = str(pending.get("cause") or "requeued") if pending.get("job_id") == ctx.job_id else "requeued"
    new = rec.interrupted(cause)
    extra = restarts - rec.slurm_restarts - 1        # restarts nobody recorded (killed outright)
    if extra:
        new["interruptions"] += extra
        new["interrupted_by"]["requeued"] = new["interrupted_by"].get("requeued", 0) + extra
    detail = f"Slurm requeued job {ctx.job_id} (SLURM_RESTART_COUNT={restarts}; {cause})"
    ctx.save(slurm_restarts=restarts, **new)
    ctx.event("interrupted", from_state="active", to_state="active", phase=rec.phase,
              detail=f"{detail}; not counted as an attempt; interruptions "
                     f"{new['interruptions']}/{rec.max_interruptions}")
    if new["interruptions"] >= rec.max_interruptions:
        return _end(ctx, Ending(Outcome.blocked, EndReason.max_interrupted,
                                f"{detail} (interruption {new['interruptions']} of {rec.max_interruptions})"))
    return None


def _stop_at_checkpoint(ctx: Ctx, why: str) -> int:
    ctx.save(state=RunState.queued, canary_for=None)
    ctx.event("stopped", from_state="active", to_state="queued", phase=ctx.record.phase, detail=why)
    _release(ctx)
    ctx.say(f"stopped at checkpoint before phase {ctx.record.phase}: {why}")
    return ExitCode.ok
