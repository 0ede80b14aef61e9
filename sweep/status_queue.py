"""Slurm's view in `sweep status`: each live run's job as the last queue snapshot saw it, and wait
reasons replanned at the time status runs.

Status never calls the scheduler: what Slurm said comes from queue.json, the tick's one queue read
(sweep/tick/queue_file.py). The reasons a queued run waits are not copied from the last tick:
its planner (sweep/tick/plan.py, a pure function) is run again on the files as they are now and
that snapshot, so a run that ended since the tick frees its slot at once ("limit reached:
max_parallel 3" next to `active 0` was the last tick's word, up to an interval old).

The files are newer than the snapshot, so two things are read in their favour before planning:
a job the files name as live (an active record, a lease's job) that the snapshot could not have
seen yet is taken as alive (only the tick judges a job dead, with a fresh queue read), and the
job of a run whose record left `active` after the snapshot is taken as gone (its controller wrote
the ending as its last act). Nothing here writes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from runstate.lease import LeaseView, read_lease_at
from runstate.models import QueueFile, RunState

if TYPE_CHECKING:
    from pathlib import Path

    from runstate.runs import RunScan
    from sweep.models.plan import CampaignFile
    from sweep.tick.plan import QueueJob, RunView, Snapshot


class SlurmJobView(TypedDict):
    state: str                       # PENDING, RUNNING, COMPLETING, ...
    reason: str                      # Slurm's reason ("None" once it runs)
    since: float                     # first snapshot that saw it in this state
    for_s: float                     # now - since


class QueueSummary(TypedDict):
    age_s: float | None              # since the snapshot's jobs were read (None: never answered)
    known: bool                      # the last tick's queue call answered
    error: str | None
    jobs: int
    states: dict[str, int]           # jobs per Slurm state


@dataclass
class Replanned:
    reasons: dict[str, str]                  # queued run id -> why it is not running now
    leases: dict[str, LeaseView]             # run id -> lease (status counts the held ones)


def slurm_view(qf: QueueFile | None, job_id: str | None, now: float) -> SlurmJobView | None:
    """The job as the last snapshot saw it; None when it is not in it (submitted after it)."""
    seen = qf.jobs.get(job_id) if qf is not None and job_id else None
    if seen is None:
        return None
    return {"state": seen.state, "reason": seen.reason, "since": seen.since, "for_s": max(0.0, now - seen.since)}


def queue_summary(qf: QueueFile | None, now: float) -> QueueSummary | None:
    if qf is None:
        return None
    states: dict[str, int] = {}
    for job in qf.jobs.values():
        states[job.state] = states.get(job.state, 0) + 1
    return {"age_s": None if qf.taken_at is None else max(0.0, now - qf.taken_at), "known": qf.known,
            "error": qf.error, "jobs": len(qf.jobs), "states": dict(sorted(states.items()))}


def replan(campaign_dir: Path, campaign: CampaignFile, listing: RunScan, qf: QueueFile | None,
           now: float) -> Replanned:
    """Every run's lease, and why each queued run waits, by the tick's planner on the files now."""
    from runstate.breaker import breaker_line
    from runstate.markers import is_draining, read_outage, read_provider_stamps
    from runstate.models import COOLDOWN_KEYS
    from runstate.runs import runs_root
    from sweep.sandbox_marker import read_uncertain
    from sweep.tick.act import read_ghosts, read_lane_backoff
    from sweep.tick.observe import read_committed, recall_settled
    from sweep.tick import plan_settings
    from sweep.tick.plan import RunView, Snapshot, plan_tick
    root = str(runs_root(campaign_dir))
    jobs = _snapshot_jobs(qf)
    recall_settled(listing, jobs, root)     # an indexed ended run with a job in the queue: read it
    leases: dict[str, LeaseView] = {}
    runs: dict[str, RunView] = {}
    for run_id, rec in listing.records.items():
        lease = read_lease_at(f"{root}/{run_id}/lease.json")
        if lease is not None:
            leases[run_id] = lease
        committed = (read_committed(campaign_dir / "runs" / run_id)
                     if rec.allocation_usd is not None and rec.state is not RunState.ended else 0.0)
        runs[run_id] = RunView(rec, lease, committed)
    _favour_the_files(jobs, runs, qf, campaign.job_prefix)
    stamps = {role: st for role in COOLDOWN_KEYS if (st := read_outage(campaign_dir, role).value) is not None}
    settled = listing.settled.values()
    snap = Snapshot(now=now, queue_known=qf.known if qf is not None else True, queue=jobs, runs=runs,
                    draining=is_draining(campaign_dir), breaker=breaker_line(campaign_dir),
                    sandboxes_uncertain=read_uncertain(campaign_dir), stamps=stamps,
                    provider_stamps=read_provider_stamps(campaign_dir),
                    capacity=dict(qf.capacity) if qf is not None else {},
                    ghosts_seen=read_ghosts(campaign_dir).jobs, lanes=read_lane_backoff(campaign_dir),
                    corrupt_runs=frozenset(listing.corrupt),
                    settled_verified=sum(1 for e in settled if e.outcome == "verified"),
                    settled_spent_usd=sum(e.spent_usd for e in settled))
    return Replanned(_reasons(plan_tick(snap, plan_settings(campaign)), snap), leases)


def _snapshot_jobs(qf: QueueFile | None) -> dict[str, QueueJob]:
    from sweep.tick.plan import QueueJob
    if qf is None:
        return {}
    return {job_id: QueueJob(job_id, job.name, job.gpus) for job_id, job in qf.jobs.items()}


def _favour_the_files(jobs: dict[str, QueueJob], runs: dict[str, RunView], qf: QueueFile | None,
                      prefix: str) -> None:
    """Read the queue in favour of the files, which are newer (the module docstring says why)."""
    from sweep.tick.plan import QueueJob
    taken = qf.taken_at if qf is not None and qf.taken_at is not None else 0.0
    for run_id, view in runs.items():
        rec = view.record
        ls = view.lease.lease if view.lease is not None else None
        named = [(rec.job_id, rec.submit_token)] if rec.state is RunState.active else []
        if ls is not None:
            named.append((ls.job_id, ls.token))
        for job_id, token in named:
            if job_id and token and job_id not in jobs:
                jobs[job_id] = QueueJob(job_id, f"{prefix}{token}.{run_id}", rec.gpus)
        if (rec.state is not RunState.active and view.lease is None and rec.job_id in jobs
                and rec.updated > taken):
            del jobs[rec.job_id]


def _reasons(actions: list, snap: Snapshot) -> dict[str, str]:
    from sweep.tick.plan import Admit, EndRun, Waiting
    reasons: dict[str, str] = {}
    for action in actions:
        if isinstance(action, Waiting):
            reasons.update(action.of())
    for action in actions:
        if isinstance(action, Admit):
            backoff = snap.lanes.get(action.lane)
            why = (f" (the canary for {action.canary_for})" if action.canary_for else
                   f" (lane {action.lane}'s probe after its back-off)" if backoff and backoff.failures else "")
            reasons.setdefault(action.run_id, f"free to start: the next tick admits it{why}")
        elif isinstance(action, EndRun) and snap.runs[action.run_id].record.state is RunState.queued:
            reasons.setdefault(action.run_id, f"the next tick ends it: {action.why}")
    return reasons
