"""Observe: the tick's only reads. ONE queue call, then the campaign's files.

The queue is read FIRST, the files after. A record that still says `active` after a queue read that
did not list its job can only belong to a job that was already gone when the queue was read (a dead
job writes nothing), so the planner can judge it dead without racing a controller that is just
writing its ending.

Ended runs that the ended-runs index vouches for (runstate/index.py: a stat(2) confirms their
state.json is the file the ending was read from) are not read at all: the snapshot carries their
count of verified runs and their final spend, which is all the planner needs of them, unless a
job of theirs is in the queue (`recall_settled`: then they are read, so their own controller is
recognised and never taken for a ghost). After the
tick has acted, `remember_endings` adds the endings it read from files to the index.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runstate.files import read_model
from runstate.lease import read_lease_at
from runstate.breaker import breaker_line
from runstate.markers import is_draining, read_outage, read_provider_stamps
from sweep.sandbox_marker import read_uncertain
from runstate.models import COOLDOWN_KEYS, RunState, SpendLedger
from runstate.paths import SPEND_FILE, STATE_FILE
from runstate.runs import RunScan, read_record_ident, runs_root, scan_runs
from sweep.tick.plan import QueueJob, RunView, Snapshot

if TYPE_CHECKING:
    from runstate.index import Ending
    from sweep.scheduler.base import EndStates, Scheduler



def read_committed(rdir: Path) -> float:
    loaded = read_model(rdir / SPEND_FILE, SpendLedger)
    return loaded.value.committed_usd if loaded.value is not None else 0.0


def observe(campaign_dir: Path, scheduler: Scheduler, *, full: bool = False) -> tuple[Snapshot, dict[str, Any]]:
    queue = scheduler.queue()
    now = time.time()
    jobs = {jid: QueueJob(jid, info.name, info.gpus) for jid, info in queue.jobs.items()} if queue.known else {}
    scan = scan_runs(campaign_dir, use_index=not full)
    root = os.fspath(runs_root(campaign_dir))
    recall_settled(scan, jobs, root)
    runs = {}
    for run_id, rec in scan.records.items():
        lease = read_lease_at(f"{root}/{run_id}/lease.json")
        # only runs that were ever admitted can have spent anything; ended runs carry spent_usd
        committed = (read_committed(Path(root) / run_id)
                     if rec.allocation_usd is not None and rec.state is not RunState.ended else 0.0)
        runs[run_id] = RunView(rec, lease, committed)
    stamps = {}
    for role in COOLDOWN_KEYS:
        stamp = read_outage(campaign_dir, role).value
        if stamp is not None:
            stamps[role] = stamp
    settled_verified = 0
    settled_spent = 0.0
    for ending in scan.settled.values():
        settled_spent += ending.spent_usd
        if ending.outcome == "verified":
            settled_verified += 1
    from sweep.tick.act import read_ghosts, read_lane_backoff
    ended = ask_end_states(scheduler, vanished_jobs(queue.known, jobs, runs))
    snap = Snapshot(now=now, queue_known=queue.known, queue=jobs, runs=runs,
                    draining=is_draining(campaign_dir), breaker=breaker_line(campaign_dir),
                    sandboxes_uncertain=read_uncertain(campaign_dir),
                    stamps=stamps, provider_stamps=read_provider_stamps(campaign_dir), capacity=scheduler.capacity(),
                    ghosts_seen=read_ghosts(campaign_dir).jobs, lanes=read_lane_backoff(campaign_dir),
                    corrupt_runs=frozenset(scan.corrupt),
                    end_states=ended.states, accounting=accounting_word(ended),
                    accounting_error=ended.error,
                    settled_verified=settled_verified, settled_spent_usd=settled_spent)
    meta = {"squeue_error": queue.error, "corrupt": scan.corrupt, "queue": queue,
            "accounting_jobs": len(ended.states) if ended.asked else 0, "scan": scan}
    return snap, meta


def recall_settled(scan: RunScan, jobs: dict[str, QueueJob], root: str) -> list[str]:
    """Read from its files every indexed ended run that has a job in the (known) queue.

    The index only takes a run whose controller job had left a queue read before its files, but a
    job can come back under the same id (Slurm requeues it: `scontrol requeue`, a node failure of a
    requeueable job). Without its record the planner could not tell the run's own controller from a
    ghost and would scancel it; with the record it is recognised, keeps its slot while it lives and
    is left to exit (the controller refuses to act for an ended run). A job of the run with another
    token or id is still a ghost. Costs one read per such job (zero on a quiet queue). Returns the
    run ids read."""
    if not jobs or not scan.settled:
        return []
    from sweep.tick.plan import run_of_job_name
    recalled = []
    for job in jobs.values():
        run_id = run_of_job_name(job.name)
        if run_id is None or run_id not in scan.settled:
            continue
        loaded, ident = read_record_ident(f"{root}/{run_id}/{STATE_FILE}", run_id)
        if loaded.value is None:
            if loaded.missing:
                continue          # the run directory went away: its job is a ghost
            scan.corrupt[run_id] = loaded.problem or "unreadable"
        else:
            scan.records[run_id] = loaded.value
            if ident is not None:
                scan.idents[run_id] = ident
        del scan.settled[run_id]
        recalled.append(run_id)
    return recalled


def vanished_jobs(queue_known: bool, jobs: dict[str, QueueJob], runs: dict[str, RunView]) -> list[str]:
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


def ask_end_states(scheduler: Scheduler, job_ids: list[str]) -> EndStates:
    """The second, bounded observe step: ONE end-state call for all vanished jobs, only if any."""
    from sweep.scheduler.base import EndStates
    if not job_ids:
        return EndStates()
    try:
        return scheduler.end_states(job_ids)
    except Exception as exc:   # an unanswered question, never a crashed tick
        return EndStates(asked=True, known=False, error=f"{type(exc).__name__}: {exc}")


def accounting_word(ended: EndStates) -> str:
    if not ended.asked:
        return "not_asked"
    if not ended.available:
        return "unavailable"
    return "known" if ended.known else "unknown"


def new_endings(scan: RunScan, snap: Snapshot) -> list[Ending]:
    """Endings read from files this tick that can be indexed: the run ended, holds no lease, its
    controller job is absent from a queue read successfully before the files (so nothing alive can
    write to it or re-create its lease), it ended more than STRAY_WINDOW_S ago (until then the
    actor still tidies its lease leftovers, which needs it in the snapshot), and its state.json did
    not change within RACY_NS."""
    from runstate.index import Ending, is_racy
    from runstate.models import quality_summary
    from sweep.tick.act import STRAY_WINDOW_S
    if not snap.queue_known:
        return []
    out = []
    for run_id, rec in scan.records.items():
        if rec.state is not RunState.ended:
            continue
        view = snap.runs.get(run_id)
        ident = scan.idents.get(run_id)
        if view is None or view.lease is not None or ident is None or is_racy(ident, scan.started_ns):
            continue
        if (rec.job_id is not None and rec.job_id in snap.queue) or snap.now - rec.updated <= STRAY_WINDOW_S:
            continue
        outcome = rec.outcome.value if rec.outcome is not None else ""   # ended: always set (invariant)
        out.append(Ending(run_id, ident, outcome, rec.reason, float(rec.spent_usd), rec.lane, rec.cause,
                          quality_summary(rec.checkpoints)))
    return out


def remember_endings(campaign_dir: Path, scan: RunScan, snap: Snapshot, *, full: bool = False) -> str | None:
    """Bring the ended-runs index up to date with what this tick read: append the new endings and
    forget the entries that no longer hold, or rewrite the file when it was missing, torn, garbage,
    bloated, or the tick was `--full`. Returns an error to report, never raises: the index is a
    cache, and a tick that cannot write it has still done its work."""
    from runstate.index import append_index, write_index
    new = new_endings(scan, snap)
    try:
        if full or scan.index is None or scan.index.needs_rewrite or len(scan.stale) > 1000:
            entries = dict(scan.settled)
            entries.update((e.run_id, e) for e in new)
            write_index(campaign_dir, entries)
        else:
            append_index(campaign_dir, new, scan.stale)
    except OSError as exc:
        return f"ended-runs index not updated ({exc.strerror or exc}); runs are read from their files"
    return None
