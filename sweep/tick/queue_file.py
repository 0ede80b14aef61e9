"""queue.json: the tick's one queue read, kept for `sweep status` (docs/state.md).

Status must never call the scheduler (only the tick does), yet the operator needs Slurm's view of
each live run: a job held PENDING for `ReqNodeNotAvail` looks exactly like a running one in the
run's own files. So the tick writes what its squeue said, each job with the time it was first seen
in its present state, and status reads that. A crash before the write leaves the previous file,
older by one tick, and status shows its age.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runstate.files import read_model, write_model_atomic
from runstate.models import QueueFile, SeenJob
from runstate.paths import CampaignPaths

if TYPE_CHECKING:
    from sweep.scheduler.base import QueueSnapshot


def read_queue_file(campaign_dir: Path) -> QueueFile | None:
    """The last tick's queue read, or None (no tick yet, or an unreadable file: status says so)."""
    return read_model(CampaignPaths(campaign_dir).queue, QueueFile).value


def next_queue_file(previous: QueueFile | None, queue: QueueSnapshot, now: float,
                    capacity: dict[str, int | None]) -> QueueFile:
    """The file after a queue read at `now`: a job keeps its `since` while its state is the one
    the previous read saw; an UNKNOWN read keeps the previous jobs and their time of reading."""
    if not queue.known:
        return QueueFile(asked_at=now, known=False, error=queue.error,
                         taken_at=previous.taken_at if previous else None,
                         jobs=dict(previous.jobs) if previous else {}, capacity=capacity)
    before = previous.jobs if previous is not None else {}
    jobs = {}
    for job_id, info in queue.jobs.items():
        seen = before.get(job_id)
        since = seen.since if seen is not None and seen.state == info.state else now
        jobs[job_id] = SeenJob(name=info.name, state=info.state, reason=info.reason,
                               partition=info.partition, gpus=info.gpus, since=since)
    return QueueFile(asked_at=now, known=True, taken_at=now, jobs=jobs, capacity=capacity)


def write_queue_file(campaign_dir: Path, queue: QueueSnapshot, now: float,
                     capacity: dict[str, int | None]) -> str | None:
    """Replace queue.json after this tick's read; an error to report, never raised (status only
    loses a fresher view: the tick's own work does not depend on this file)."""
    try:
        write_model_atomic(CampaignPaths(campaign_dir).queue,
                           next_queue_file(read_queue_file(campaign_dir), queue, now, capacity))
    except OSError as exc:
        return f"queue.json not written ({exc.strerror or exc}); status shows an older queue"
    return None
