"""Act: carry out the planner's actions. The only part of the tick that writes.

Each action first re-reads the run's record and skips if it changed since the observation (a
controller may have written meanwhile). An admission is, in this order:

1. repair lease strays a killed lease operation left (restore, never lose, a lease);
2. acquire the lease (O_EXCL, holder tick, a fresh submission token);
3. write the queued record marked `submitting` (token + time) — from here on, a kill leaves a
   lease and a record that say a submission may be in flight;
4. sbatch, whose outcome is one of three:
   - accepted (a job id): append the `admitted` event, hand the lease to the job, write the
     active record. A kill anywhere in there leaves the tick-held lease with the token (or a
     tombstone the next tick restores), and the job in the queue under the token's name: the
     next tick adopts it;
   - refused (Slurm said no): release the lease, clear the mark, write Slurm's message on the run
     and back the lane off (exponential, bounded): nothing was submitted;
   - uncertain (timeout, socket error, no answer): keep the lease and the mark; later ticks look
     for the token in the queue and adopt the job, or give the submission up after
     `tick.uncertain_submit_s` (then a job that still turns up is a ghost: cancelled).
Ghost jobs are cancelled in one scancel after the other actions. Every action's outcome goes in
tick.json; every run the tick does not admit has its reason there too.
"""
from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runstate.errors import SchedulerError, SubmissionUncertain, SweepError
from runstate.files import make_private_dir, read_model, write_model_atomic
from runstate.lease import (LeaseLost, acquire_lease, hand_over_lease, reap_lease, release_lease,
                            tidy_lease_strays)
from runstate.models import (EndReason, TickAction, Event, GhostsFile, LaneBackoff, LaneBackoffFile, RunRecord, RunState)
from runstate.paths import GHOSTS_FILE, LANE_BACKOFF_FILE, LOGS_DIR, CampaignPaths, RunPaths
from runstate.runs import append_event, load_record, run_dir, save_record
from sweep.campaign import Campaign
from sweep.tick.plan import (Adopt, Admit, CancelGhost, EndRun, GiveUpSubmission, Interrupt, NoteGhosts,
                             ReapLease, Requeue, SetHold, Waiting)

if TYPE_CHECKING:
    from sweep.models.plan import PlanSettings
    from sweep.scheduler.base import Scheduler
    from sweep.tick.plan import Action, Snapshot

STRAY_WINDOW_S = 2 * 3600     # ended runs are checked for lease strays this long after their ending


def read_lane_backoff(campaign_dir: Path) -> dict[str, LaneBackoff]:
    loaded = read_model(CampaignPaths(campaign_dir).lane_backoff, LaneBackoffFile)
    return dict(loaded.value.lanes) if loaded.value is not None else {}


def read_ghosts(campaign_dir: Path) -> GhostsFile:
    loaded = read_model(CampaignPaths(campaign_dir).ghosts, GhostsFile)
    return loaded.value if loaded.value is not None else GhostsFile()


def next_backoff(failures: int, base_s: float, max_s: float) -> float:
    """Seconds a lane waits after its `failures`-th refusal in a row: base, 2 base, 4 base, ... <= max."""
    return float(min(max_s, base_s * (2 ** max(0, min(failures, 40) - 1))))


def controller_argv(campaign: Campaign, run_id: str, token: str) -> list[str]:
    base = campaign.settings.tick.controller_command
    if not base:
        from sweep.runtime import controller_command
        base = controller_command(campaign.dir)
    return [*base, "--campaign", str(campaign.dir), "--token", token, run_id]


def job_environment(settings: PlanSettings, campaign_dir: Path) -> dict[str, str]:
    """What sweep sets in a controller job (over the tick's variables passed by name, pass_env):
    with a declared `[environment]`, its PATH and variables, the same whether the tick runs from
    a shell or from scrontab; and SWEEP_CAMPAIGN."""
    env = settings.environment.job_variables() if settings.environment is not None else {}
    return {**env, "SWEEP_CAMPAIGN": str(campaign_dir)}


class Actor:
    def __init__(self, campaign: Campaign, scheduler: Scheduler, lanes: dict[str, LaneBackoff] | None = None):
        self.handle = campaign
        self.dir = campaign.dir
        self.campaign = campaign.file
        self.scheduler = scheduler
        self.done: list[TickAction] = []
        self.errors: list[str] = []
        self.waiting: dict[str, list[str]] = {}        # reason -> runs
        self.ghosts: list[dict[str, Any]] = []
        self.lanes: dict[str, LaneBackoff] = dict(lanes or {})
        self._lanes_changed = False
        self._refused_lanes: dict[str, str] = {}       # lane -> message, refused during this tick
        self._sandboxes_uncertain: str | None = None    # raised during this tick (plan predates it)
        self._ghosts_to_cancel: list[CancelGhost] = []
        self._ghost_memory: GhostsFile | None = None
        self._pass_env_names: tuple[str, ...] | None = None

    def _pass_env(self) -> tuple[str, ...]:
        """The tick's variables every controller job gets, by name (sweep/tick/jobenv.py)."""
        if self._pass_env_names is None:
            import os
            from sweep.tick.jobenv import job_pass_env
            self._pass_env_names = job_pass_env(self.campaign.settings, os.environ)
        return self._pass_env_names

    def _fresh(self, action: Any) -> RunRecord | None:
        rec = load_record(run_dir(self.dir, action.run_id)).value
        if rec is None or rec != action.expected:
            self.done.append({"kind": "skipped", "run_id": action.run_id,
                              "detail": f"{action.kind}: record changed since observed"})
            return None
        return rec

    def _event(self, run_id: str, kind: str, **kw: Any) -> None:
        append_event(run_dir(self.dir, run_id), Event(run_id=run_id, kind=kind, by="tick", **kw))

    def apply(self, action: Action) -> None:
        try:
            getattr(self, f"_do_{action.kind}")(action)
        except SweepError as exc:
            self.errors.append(f"{action.run_id}: {action.kind}: {exc}")
        except OSError as exc:   # one unwritable run must not stop the tick
            self.errors.append(f"{action.run_id}: {action.kind}: {exc}")

    # -- no-write actions ----------------------------------------------------------------------
    def _do_waiting(self, a: Waiting) -> None:
        for reason, ids in a.reasons.items():
            self.waiting.setdefault(reason, []).extend(ids)

    def _do_noteghosts(self, a: NoteGhosts) -> None:
        memory = read_ghosts(self.dir)
        memory.jobs = dict(a.jobs)
        self._ghost_memory = memory
        self.ghosts = [{"job_id": jid, "name": g.name, "first_seen": g.first_seen, "gpus": g.gpus}
                       for jid, g in sorted(a.jobs.items())]

    def _do_cancelghost(self, a: CancelGhost) -> None:
        self._ghosts_to_cancel.append(a)

    # -- run actions ---------------------------------------------------------------------------
    def _do_reaplease(self, a: ReapLease) -> None:
        ok = reap_lease(run_dir(self.dir, a.run_id), a.view)
        tidy_lease_strays(run_dir(self.dir, a.run_id), keep_lease=False)   # the lease's fate is decided
        self.done.append({"kind": "reap", "run_id": a.run_id, "detail": a.why if ok else "lease changed; kept"})
        if ok:
            self._event(a.run_id, "lease_reaped", detail=a.why)
            self._flag_open_sandboxes(a.run_id)

    def _do_giveupsubmission(self, a: GiveUpSubmission) -> None:
        rec = self._fresh(a)
        if rec is None:
            return
        rdir = run_dir(self.dir, a.run_id)
        if not reap_lease(rdir, a.view):
            self.done.append({"kind": "skipped", "run_id": a.run_id, "detail": "give up: lease changed; kept"})
            return
        save_record(rdir, rec.model_copy(update={"submitting_since": None, "last_error": a.why}))
        self._event(a.run_id, "submission_given_up", detail=a.why)
        self.done.append({"kind": "give_up", "run_id": a.run_id, "detail": a.why})

    def _take_back(self, a: Requeue | Interrupt | EndRun) -> tuple[RunRecord, Path] | None:
        """The run's record if unchanged since observed, with the dead holder's lease reaped."""
        rec = self._fresh(a)
        if rec is None:
            return None
        rdir = run_dir(self.dir, a.run_id)
        if a.lease is not None:
            reap_lease(rdir, a.lease)
        tidy_lease_strays(rdir, keep_lease=False)
        self._flag_open_sandboxes(a.run_id)
        return rec, rdir

    def _flag_open_sandboxes(self, run_id: str) -> None:
        """A dead controller's remote sandboxes may live on: stop admission until `sweep reconcile`."""
        from sweep.providers.receipts import has_open_receipts
        from sweep.sandbox_marker import mark_uncertain
        if has_open_receipts(run_dir(self.dir, run_id)):
            why = f"run {run_id}'s controller died with open sandbox receipts"
            mark_uncertain(self.dir, why)
            self._sandboxes_uncertain = why

    def _do_requeue(self, a: Requeue) -> None:
        taken = self._take_back(a)
        if taken is None:
            return
        rec, rdir = taken
        new = rec.model_copy(update={"state": RunState.queued, "attempts": rec.attempts + 1,
                                     "canary_for": None, "last_error": a.why})
        save_record(rdir, new)
        self._event(a.run_id, "requeued", from_state="active", to_state="queued", phase=rec.phase,
                    detail=f"{a.why}; attempts {new.attempts}/{new.max_attempts}")
        self.done.append({"kind": "requeue", "run_id": a.run_id, "detail": a.why})

    def _do_interrupt(self, a: Interrupt) -> None:
        taken = self._take_back(a)
        if taken is None:
            return
        rec, rdir = taken
        new = rec.model_copy(update={"state": RunState.queued, "canary_for": None, "last_error": a.why,
                                     **rec.interrupted(a.cause)})
        save_record(rdir, new)
        self._event(a.run_id, "interrupted", from_state="active", to_state="queued", phase=rec.phase,
                    detail=f"{a.cause}: {a.why}; not counted as an attempt; interruptions "
                           f"{new.interruptions}/{new.max_interruptions}")
        self.done.append({"kind": "interrupt", "run_id": a.run_id, "detail": f"{a.cause}: {a.why}"})

    def _do_endrun(self, a: EndRun) -> None:
        taken = self._take_back(a)
        if taken is None:
            return
        rec, rdir = taken
        attempts = rec.attempts + 1 if a.reason == EndReason.max_attempted else rec.attempts
        counted = rec.interrupted(a.cause) if a.reason == EndReason.max_interrupted and a.cause else {}
        # the tick ends a run only for these: its job vanished one time too many, too many
        # interruptions, a spending cap (runstate/causes.py)
        cause = {EndReason.max_attempted: "job_vanished", EndReason.max_interrupted: "interrupted",
                 EndReason.budget_exhausted: "budget"}.get(a.reason, str(a.reason))
        new = rec.model_copy(update={"state": RunState.ended, "outcome": a.outcome, "reason": a.reason,
                                     "attempts": attempts, "canary_for": None, "hold_reason": None,
                                     "last_error": a.why, "submitting_since": None,
                                     "cause": cause, "cause_detail": (a.why or "")[:300] or None, **counted})
        save_record(rdir, new)
        self._event(a.run_id, "ended", from_state=rec.state.value, to_state="ended",
                    detail=f"{a.outcome.value}:{a.reason}: {a.why}")
        self.done.append({"kind": "end", "run_id": a.run_id, "detail": f"{a.outcome.value}:{a.reason}"})

    def _do_adopt(self, a: Adopt) -> None:
        rec = self._fresh(a)
        if rec is None:
            return
        rdir = run_dir(self.dir, a.run_id)
        if a.hand_over:
            try:
                hand_over_lease(rdir, token=a.token, job_id=a.job_id)
            except LeaseLost:
                pass      # the controller took it over itself (same token): fine
        new = rec.model_copy(update={"state": RunState.active, "job_id": a.job_id, "submit_token": a.token,
                                     "hold_reason": None, "last_error": None, "submitting_since": None})
        save_record(rdir, new)
        self._event(a.run_id, "adopted", from_state="queued", to_state="active",
                    detail=f"job {a.job_id} (token {a.token}) was submitted by a tick that did not record it")
        self.done.append({"kind": "adopt", "run_id": a.run_id, "detail": f"job {a.job_id}"})

    def _do_sethold(self, a: SetHold) -> None:
        rec = self._fresh(a)
        if rec is None:
            return
        save_record(run_dir(self.dir, a.run_id), rec.model_copy(update={"hold_reason": a.reason}))
        self.done.append({"kind": "hold", "run_id": a.run_id, "detail": a.reason or "cleared"})

    def _do_admit(self, a: Admit) -> None:
        from sweep.scheduler.base import JobSpec
        if a.lane in self._refused_lanes:
            # the lane refused a submission a moment ago: the other lanes go on, this one waits
            self.waiting.setdefault(f"lane {a.lane} refused a submission this tick: "
                                    f"{self._refused_lanes[a.lane]}", []).append(a.run_id)
            return
        if self._sandboxes_uncertain is not None:
            # raised by this very tick, after the plan was made: the plan's admissions wait too
            self.waiting.setdefault(f"remote sandboxes uncertain ({self._sandboxes_uncertain}): no admissions "
                                    "until `sweep reconcile`", []).append(a.run_id)
            return
        rec = self._fresh(a)
        if rec is None:
            return
        rdir = run_dir(self.dir, a.run_id)
        tidied, in_flight = tidy_lease_strays(rdir, keep_lease=True)
        if tidied:
            self._event(a.run_id, "lease_strays", detail=tidied)
        if in_flight or (tidied and "restored" in tidied):
            # a lease operation was cut short (or is running): the restored lease is judged next tick
            self.done.append({"kind": "skipped", "run_id": a.run_id,
                              "detail": tidied or "a lease operation is in flight"})
            return
        # logs/ is made at the run's first submission, not by init; before the lease, so that a
        # failure here (an OSError: the action is reported, the tick goes on) leaves nothing behind
        make_private_dir(rdir / LOGS_DIR)
        token = secrets.token_hex(6)
        if acquire_lease(rdir, run_id=a.run_id, token=token, holder="tick") is None:
            self.done.append({"kind": "skipped", "run_id": a.run_id, "detail": "lease already held"})
            return
        marked = save_record(rdir, rec.model_copy(update={
            "submit_token": token, "submitting_since": time.time(), "lane": a.lane, "gpus": a.gpus}))
        paths = RunPaths.at(rdir)
        job = JobSpec(name=f"{self.campaign.job_prefix}{token}.{a.run_id}",
                      argv=controller_argv(self.handle, a.run_id, token),
                      workdir=rdir, stdout=paths.controller_out, stderr=paths.controller_err,
                      gpus=a.gpus, env=job_environment(self.campaign.settings, self.dir),
                      script_path=paths.job_script(token), pass_env=self._pass_env())
        try:
            job_id = self.scheduler.submit(job)
        except SubmissionUncertain as exc:
            message = f"sbatch uncertain: {exc}"
            save_record(rdir, marked.model_copy(update={"last_error": message}))
            self._event(a.run_id, "submit_uncertain", detail=message)
            self.errors.append(f"{a.run_id}: {message}")
            self.done.append({"kind": "submit_uncertain", "run_id": a.run_id, "detail": message})
            return
        except SchedulerError as exc:
            release_lease(rdir, token=token)
            message = f"sbatch failed: {exc}"
            save_record(rdir, marked.model_copy(update={"last_error": message, "submitting_since": None,
                                                        "submit_token": rec.submit_token}))
            self._event(a.run_id, "submit_failed", detail=message)
            self.errors.append(f"{a.run_id}: {message}")
            self.done.append({"kind": "submit_failed", "run_id": a.run_id, "detail": message})
            self._lane_refused(a.lane, str(exc))
            return
        # the event first: a kill after it still leaves the lease + the job, which the next tick adopts
        self._event(a.run_id, "admitted", from_state="queued", to_state="active", phase=rec.phase,
                    detail=f"job {job_id} (token {token}) on lane {a.lane}" + (f" ({a.gpus} GPU)" if a.gpus else "")
                    + (f", allocation {a.allocation_usd:.2f} USD" if a.allocation_usd is not None else "")
                    + (f", canary for {a.canary_for}" if a.canary_for else ""))
        try:
            hand_over_lease(rdir, token=token, job_id=job_id)
        except LeaseLost as exc:
            self.errors.append(f"{a.run_id}: hand-over to job {job_id} failed: {exc}")
        new = marked.model_copy(update={
            "state": RunState.active, "job_id": job_id, "submit_token": token, "lane": a.lane,
            "gpus": a.gpus, "allocation_usd": a.allocation_usd, "canary_for": a.canary_for,
            "hold_reason": None, "last_error": None, "parked_until": None, "parked_role": None,
            "submitting_since": None})
        save_record(rdir, new)
        self._lane_accepted(a.lane)
        self.done.append({"kind": "admit", "run_id": a.run_id, "detail": f"job {job_id} lane {a.lane}"})

    # -- lanes ---------------------------------------------------------------------------------
    def _lane_refused(self, lane: str, message: str) -> None:
        t = self.campaign.settings.tick
        now = time.time()
        prior = self.lanes.get(lane) or LaneBackoff()
        failures = prior.failures + 1
        self.lanes[lane] = LaneBackoff(failures=failures, message=message,
                                       until=now + next_backoff(failures, t.lane_backoff_s, t.lane_backoff_max_s),
                                       since=prior.since if prior.failures else now)
        self._refused_lanes[lane] = message
        self._lanes_changed = True

    def _lane_accepted(self, lane: str) -> None:
        if lane in self.lanes:
            del self.lanes[lane]
            self._lanes_changed = True

    # -- after the actions ---------------------------------------------------------------------
    def finish(self, snap: Snapshot) -> None:
        """One scancel for the ghosts, the tick's memory files, and lease strays of recent runs."""
        if self._ghosts_to_cancel:
            self._cancel_ghosts()
        if self._ghost_memory is not None:
            try:
                write_model_atomic(self.handle.paths.ghosts, self._ghost_memory)
            except OSError as exc:
                self.errors.append(f"{GHOSTS_FILE}: {exc}")
        if self._lanes_changed:
            try:
                write_model_atomic(self.handle.paths.lane_backoff, LaneBackoffFile(lanes=self.lanes))
            except OSError as exc:
                self.errors.append(f"{LANE_BACKOFF_FILE}: {exc}")
        for run_id, view in snap.runs.items():
            rec = view.record
            if rec.submit_token is None:
                continue        # never admitted: no lease operation ever ran there
            if rec.state is RunState.ended and snap.now - rec.updated > STRAY_WINDOW_S:
                continue
            try:
                tidied, _ = tidy_lease_strays(run_dir(self.dir, run_id), keep_lease=rec.state is not RunState.ended)
            except OSError as exc:
                self.errors.append(f"{run_id}: lease strays: {exc}")
                continue
            if tidied:
                self._event(run_id, "lease_strays", detail=tidied)
                self.done.append({"kind": "strays", "run_id": run_id, "detail": tidied})

    def _cancel_ghosts(self) -> None:
        ghosts = self._ghosts_to_cancel
        ids = [g.job_id for g in ghosts]
        try:
            self.scheduler.cancel(ids)
        except SchedulerError as exc:
            self.errors.append(f"cancelling ghost jobs {', '.join(ids)}: {exc}")
            return
        now = time.time()
        memory = self._ghost_memory or read_ghosts(self.dir)
        for g in ghosts:
            why = (f"ghost job {g.job_id} ({g.name}): no lease or record knows its token; "
                   f"seen since {now - g.first_seen:.0f}s; cancelled")
            self.done.append({"kind": "cancel_ghost", "run_id": g.run_id, "detail": why})
            memory.cancelled = (memory.cancelled + [{"job_id": g.job_id, "name": g.name, "at": now}])[-100:]
            if g.run_id:
                try:
                    if run_dir(self.dir, g.run_id).is_dir():
                        self._event(g.run_id, "ghost_cancelled", detail=why)
                except (ValueError, OSError):
                    pass
        self._ghost_memory = memory
