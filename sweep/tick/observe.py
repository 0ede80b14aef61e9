"""Observe: the tick's only reads. ONE queue call, then the campaign's files.

The queue is read FIRST, the files after. A record that still says `active` after a queue read that
did not list its job can only belong to a job that was already gone when the queue was read (a dead
job writes nothing), so the planner can judge it dead without racing a controller that is just
writing its ending.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from runstate.files import read_model
from runstate.lease import read_lease_at
from runstate.markers import is_draining, read_outage
from runstate.models import PIPELINE_ROLES, RunState, SpendLedger
from runstate.paths import SPEND_FILE
from runstate.runs import list_runs, runs_root
from sweep.tick.plan import QueueJob, RunView, Snapshot



def read_committed(rdir: Path) -> float:
    loaded = read_model(rdir / SPEND_FILE, SpendLedger)
    return loaded.value.committed_usd if loaded.value is not None else 0.0


def observe(campaign_dir: Path, scheduler) -> tuple[Snapshot, dict]:
    queue = scheduler.queue()
    now = time.time()
    jobs = {jid: QueueJob(jid, info.name, info.gpus) for jid, info in queue.jobs.items()} if queue.known else {}
    listing = list_runs(campaign_dir)
    root = os.fspath(runs_root(campaign_dir))
    runs = {}
    for run_id, rec in listing.records.items():
        lease = read_lease_at(f"{root}/{run_id}/lease.json")
        # only runs that were ever admitted can have spent anything; ended runs carry spent_usd
        committed = (read_committed(Path(root) / run_id)
                     if rec.allocation_usd is not None and rec.state is not RunState.ended else 0.0)
        runs[run_id] = RunView(rec, lease, committed)
    stamps = {}
    for role in PIPELINE_ROLES:
        stamp = read_outage(campaign_dir, role).value
        if stamp is not None:
            stamps[role] = stamp
    from sweep.tick.act import read_ghosts, read_lane_backoff
    ended = ask_end_states(scheduler, vanished_jobs(queue.known, jobs, runs))
    snap = Snapshot(now=now, queue_known=queue.known, queue=jobs, runs=runs,
                    draining=is_draining(campaign_dir), stamps=stamps, capacity=scheduler.capacity(),
                    ghosts_seen=read_ghosts(campaign_dir).jobs, lanes=read_lane_backoff(campaign_dir),
                    corrupt_runs=frozenset(listing.corrupt),
                    end_states=ended.states, accounting=accounting_word(ended),
                    accounting_error=ended.error)
    meta = {"squeue_error": queue.error, "corrupt": listing.corrupt,
            "accounting_jobs": len(ended.states) if ended.asked else 0}
    return snap, meta


def vanished_jobs(queue_known: bool, jobs: dict, runs: dict[str, RunView]) -> list[str]:
    """Job ids of active runs missing from a KNOWN queue with no cause recorded by their controller:
    the jobs the planner can only judge with the scheduler's word on how they ended."""
    if not queue_known:
        return []
    out = []
    for view in runs.values():
        rec = view.record
        if rec.state is RunState.active and rec.job_id and rec.job_id not in jobs:
            pending = rec.pending_interruption or {}
            if pending.get("job_id") != rec.job_id:
                out.append(rec.job_id)
    return out


def ask_end_states(scheduler, job_ids: list[str]):
    """The second, bounded observe step: ONE end-state call for all vanished jobs, only if any."""
    from sweep.scheduler.base import EndStates
    if not job_ids:
        return EndStates()
    ask = getattr(scheduler, "end_states", None)
    if ask is None:
        return EndStates.unavailable(f"the {getattr(scheduler, 'name', '?')} backend records no end states")
    try:
        return ask(job_ids)
    except Exception as exc:   # an unanswered question, never a crashed tick
        return EndStates(asked=True, known=False, error=f"{type(exc).__name__}: {exc}")


def accounting_word(ended) -> str:
    if not ended.asked:
        return "not_asked"
    if not ended.available:
        return "unavailable"
    return "known" if ended.known else "unknown"
