"""Act: carry out the planner's actions. The only part of the tick that writes.

Each action first re-reads the run's record and skips if it changed since the observation (a
controller may have written meanwhile). Admission order is: acquire the lease (O_EXCL, holder tick,
a fresh submission token) -> sbatch -> hand the lease to the job id -> write the active record.
A kill between any two steps is repaired by the next tick: the token is in the lease, in the job
name and in the controller's argv, so an unrecorded job is adopted from the queue, and a lease whose
job never reached the queue is reaped. A failed sbatch releases the lease and is written on the run.
"""
from __future__ import annotations

import secrets
from pathlib import Path

from runstate.errors import SchedulerError, SweepError
from runstate.lease import LeaseLost, acquire_lease, hand_over_lease, reap_lease, release_lease, sweep_tombstones
from runstate.models import EndReason, Event, RunRecord, RunState
from runstate.runs import append_event, load_record, run_dir, save_record
from sweep.models.plan import CampaignFile
from sweep.tick.plan import Adopt, Admit, EndRun, ReapLease, Requeue, SetHold


# A lease operation's tombstone lives for milliseconds; one this old was left by a killed process.
# The tick removes them in the runs it acts on (one listdir each, never a scan of every run).
TOMBSTONE_AGE_S = 120.0


def controller_argv(campaign: CampaignFile, campaign_dir: Path, run_id: str, token: str) -> list[str]:
    base = campaign.settings.tick.controller_command
    if not base:
        from sweep.runtime import controller_command
        base = controller_command(campaign_dir)
    return [*base, "--campaign", str(campaign_dir), "--token", token, run_id]


class Actor:
    def __init__(self, campaign_dir: Path, campaign: CampaignFile, scheduler):
        self.dir = campaign_dir
        self.campaign = campaign
        self.scheduler = scheduler
        self.done: list[dict] = []
        self.errors: list[str] = []

    def _fresh(self, action) -> RunRecord | None:
        rec = load_record(run_dir(self.dir, action.run_id)).value
        if rec is None or rec != action.expected:
            self.done.append({"kind": "skipped", "run_id": action.run_id,
                              "detail": f"{action.kind}: record changed since observed"})
            return None
        return rec

    def _event(self, run_id: str, kind: str, **kw) -> None:
        append_event(run_dir(self.dir, run_id), Event(run_id=run_id, kind=kind, by="tick", **kw))

    def apply(self, action) -> None:
        try:
            getattr(self, f"_do_{action.kind}")(action)
        except SweepError as exc:
            self.errors.append(f"{action.run_id}: {action.kind}: {exc}")
        except OSError as exc:   # one unwritable run must not stop the tick
            self.errors.append(f"{action.run_id}: {action.kind}: {exc}")

    def _do_reaplease(self, a: ReapLease) -> None:
        ok = reap_lease(run_dir(self.dir, a.run_id), a.view)
        sweep_tombstones(run_dir(self.dir, a.run_id), TOMBSTONE_AGE_S)
        self.done.append({"kind": "reap", "run_id": a.run_id, "detail": a.why if ok else "lease changed; kept"})
        if ok:
            self._event(a.run_id, "lease_reaped", detail=a.why)

    def _take_back(self, a: Requeue | EndRun) -> tuple[RunRecord, Path] | None:
        """The run's record if unchanged since observed, with the dead holder's lease reaped."""
        rec = self._fresh(a)
        if rec is None:
            return None
        rdir = run_dir(self.dir, a.run_id)
        if a.lease is not None:
            reap_lease(rdir, a.lease)
        sweep_tombstones(rdir, TOMBSTONE_AGE_S)
        return rec, rdir

    def _do_requeue(self, a: Requeue) -> None:
        taken = self._take_back(a)
        if taken is None:
            return
        rec, rdir = taken
        new = rec.model_copy(update={"state": RunState.queued, "attempts": rec.attempts + 1,
                                     "canary_for": None, "last_error": a.why})
        save_record(rdir, new)
        self._event(a.run_id, "requeued", from_state="active", to_state="queued", phase=rec.phase.value,
                    detail=f"{a.why}; attempts {new.attempts}/{new.max_attempts}")
        self.done.append({"kind": "requeue", "run_id": a.run_id, "detail": a.why})

    def _do_endrun(self, a: EndRun) -> None:
        taken = self._take_back(a)
        if taken is None:
            return
        rec, rdir = taken
        attempts = rec.attempts + 1 if a.reason == EndReason.max_attempted else rec.attempts
        new = rec.model_copy(update={"state": RunState.ended, "outcome": a.outcome, "reason": a.reason,
                                     "attempts": attempts, "canary_for": None, "hold_reason": None,
                                     "last_error": a.why})
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
                                     "hold_reason": None, "last_error": None})
        save_record(rdir, new)
        self._event(a.run_id, "adopted", from_state="queued", to_state="active",
                    detail=f"job {a.job_id} was submitted by a tick that died before recording it")
        self.done.append({"kind": "adopt", "run_id": a.run_id, "detail": f"job {a.job_id}"})

    def _do_sethold(self, a: SetHold) -> None:
        rec = self._fresh(a)
        if rec is None:
            return
        save_record(run_dir(self.dir, a.run_id), rec.model_copy(update={"hold_reason": a.reason}))
        self.done.append({"kind": "hold", "run_id": a.run_id, "detail": a.reason or "cleared"})

    def _do_admit(self, a: Admit) -> None:
        from sweep.scheduler.base import JobSpec
        rec = self._fresh(a)
        if rec is None:
            return
        rdir = run_dir(self.dir, a.run_id)
        sweep_tombstones(rdir, TOMBSTONE_AGE_S)
        token = secrets.token_hex(6)
        if acquire_lease(rdir, run_id=a.run_id, token=token, holder="tick") is None:
            self.done.append({"kind": "skipped", "run_id": a.run_id, "detail": "lease already held"})
            return
        logs = rdir / "logs"
        job = JobSpec(name=f"{self.campaign.job_prefix}{token}.{a.run_id}",
                      argv=controller_argv(self.campaign, self.dir, a.run_id, token),
                      workdir=rdir, stdout=logs / "controller.out", stderr=logs / "controller.err",
                      gpus=a.gpus, env={"SWEEP_CAMPAIGN": str(self.dir)},
                      script_path=logs / f"job-{token}.sbatch")
        try:
            job_id = self.scheduler.submit(job)
        except SchedulerError as exc:
            release_lease(rdir, token=token)
            message = f"sbatch failed: {exc}"
            save_record(rdir, rec.model_copy(update={"last_error": message[:1000]}))
            self._event(a.run_id, "submit_failed", detail=message)
            self.errors.append(f"{a.run_id}: {message}")
            self.done.append({"kind": "submit_failed", "run_id": a.run_id, "detail": message[:300]})
            return
        try:
            hand_over_lease(rdir, token=token, job_id=job_id)
        except LeaseLost as exc:
            self.errors.append(f"{a.run_id}: hand-over to job {job_id} failed: {exc}")
        new = rec.model_copy(update={
            "state": RunState.active, "job_id": job_id, "submit_token": token, "lane": a.lane,
            "gpus": a.gpus, "allocation_usd": a.allocation_usd, "canary_for": a.canary_for,
            "hold_reason": None, "last_error": None, "parked_until": None, "parked_role": None})
        save_record(rdir, new)
        self._event(a.run_id, "admitted", from_state="queued", to_state="active", phase=rec.phase.value,
                    detail=f"job {job_id} on lane {a.lane}" + (f" ({a.gpus} GPU)" if a.gpus else "")
                    + (f", allocation {a.allocation_usd:.2f} USD" if a.allocation_usd is not None else "")
                    + (f", canary for {a.canary_for}" if a.canary_for else ""))
        self.done.append({"kind": "admit", "run_id": a.run_id, "detail": f"job {job_id} lane {a.lane}"})
