"""`sweep tick`: observe -> plan -> act, once, then exit. See docs/tick.md.

One tick at a time: a second tick finds the lock held and exits 0 at once. The lock is a kernel
file lock (flock), released when the holder dies however it dies, and a tick arms an alarm that
ends it after `tick.max_runtime_s`, so a hung tick never blocks the next one for longer than that.
"""
from __future__ import annotations

import gc
import os
import signal
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from runstate.files import write_model_atomic
from runstate.models import RunState, TickReport
from runstate.paths import LOCK_FILE as LOCK_FILE, TICK_FILE as TICK_FILE, CampaignPaths
from sweep.campaign import Campaign

if TYPE_CHECKING:
    from sweep.models.plan import CampaignFile
    from sweep.scheduler.base import Scheduler
    from sweep.tick.plan import PlanSettings



@dataclass
class TickOutcome:
    ran: bool
    report: TickReport | None
    message: str


def run_tick(campaign_dir: Path, *, scheduler: Scheduler | None = None, full: bool = False) -> TickOutcome:
    from filelock import FileLock, Timeout

    campaign = Campaign.load(campaign_dir)             # unusable campaign -> ConfigError, exit != 0
    campaign_dir = campaign.dir
    lock = FileLock(str(campaign.paths.tick_lock), timeout=0, mode=0o600)   # docs/state.md: files 0600
    try:
        lock.acquire()
    except Timeout:
        return TickOutcome(False, None, "another tick is running; nothing to do")
    max_runtime = int(campaign.settings.tick.max_runtime_s)
    old = signal.signal(signal.SIGALRM, _overran)
    signal.alarm(max_runtime)
    collecting = gc.isenabled()
    gc.disable()     # a one-shot pass over acyclic records: the collector would only rescan them
    try:
        report = _tick(campaign, scheduler or campaign.scheduler(), full)
    finally:
        if collecting:
            gc.enable()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        lock.release()
    return TickOutcome(True, report, summarize(report))


def _overran(signum: int, frame: FrameType | None) -> NoReturn:  # pragma: no cover - exercised by a subprocess test
    raise SystemExit("sweep tick: exceeded tick.max_runtime_s; exiting so the next tick can run")


def _tick(campaign: Campaign, scheduler: Scheduler, full: bool = False) -> TickReport:
    from sweep.tick.act import Actor
    from sweep.tick.observe import observe, remember_endings
    from sweep.tick.plan import plan_tick

    started = time.time()
    t0 = time.monotonic()
    campaign_dir = campaign.dir
    snap, meta = observe(campaign_dir, scheduler, full=full)
    s = campaign.settings
    reconciled = None
    if snap.sandboxes_uncertain and snap.queue_known:
        # admission is stopped for orphaned remote sandboxes: settle them now, from this tick's
        # queue (no second squeue), bounded in time (sweep/tick/reconcile.py)
        from sweep.tick.reconcile import budget_of, reconcile_in_tick
        reconciled = reconcile_in_tick(campaign_dir, campaign.file.campaign_id, set(snap.queue),
                                       budget_of(s.tick.reconcile_budget_s, s.tick.max_runtime_s))
        if reconciled.cleared:
            snap = replace(snap, sandboxes_uncertain=None)
    actions = plan_tick(snap, plan_settings(campaign.file))
    actor = Actor(campaign, scheduler, lanes=snap.lanes)
    if reconciled is not None and reconciled.ran:
        actor.done.append({"kind": "reconcile", "run_id": "",
                           "detail": f"{reconciled.detail} ({reconciled.duration_s:.1f} s)"})
    if reconciled is not None and reconciled.error:
        actor.errors.append(reconciled.error)
    for action in actions:
        actor.apply(action)
    actor.finish(snap)
    counts: dict[str, int] = {}
    for view in snap.runs.values():
        rec = view.record
        ended_as = rec.outcome.value if rec.outcome is not None else "?"     # ended: always set (invariant)
        key = rec.state.value if rec.state is not RunState.ended else f"ended:{ended_as}"
        counts[key] = counts.get(key, 0) + 1
    scan = meta["scan"]
    for ending in scan.settled.values():
        key = f"ended:{ending.outcome}"
        counts[key] = counts.get(key, 0) + 1
    if meta["corrupt"]:
        counts["corrupt"] = len(meta["corrupt"])
    index_error = remember_endings(campaign_dir, scan, snap, full=full)
    if index_error:
        actor.errors.append(index_error)
    from sweep.tick.queue_file import write_queue_file
    queue_error = write_queue_file(campaign_dir, meta["queue"], snap.now, snap.capacity)
    if queue_error:
        actor.errors.append(queue_error)
    finished = time.time()
    report = TickReport(started_at=started, finished_at=finished, duration_s=time.monotonic() - t0,
                        host=f"{socket.gethostname()}.{os.getpid()}", squeue_known=snap.queue_known,
                        squeue_error=meta["squeue_error"], squeue_jobs=len(snap.queue),
                        runs_read=len(snap.runs) + len(meta["corrupt"]), runs_indexed=len(scan.settled),
                        corrupt=[f"{rid}: {why}" for rid, why in sorted(meta["corrupt"].items())][:100],
                        actions=actor.done, errors=actor.errors, draining=snap.draining, counts=counts,
                        waiting=actor.waiting, ghosts=actor.ghosts,
                        accounting=snap.accounting, accounting_error=snap.accounting_error,
                        accounting_jobs=meta.get("accounting_jobs", 0))
    write_model_atomic(CampaignPaths(campaign_dir).tick_report, report)
    return report


def plan_settings(campaign: CampaignFile) -> PlanSettings:
    """The planner's settings from the frozen plan: the tick and `sweep status` (which plans the
    wait reasons again when it runs) must plan with the same ones."""
    from sweep.tick.plan import PlanSettings
    s = campaign.settings
    return PlanSettings(target_verified=s.target_verified, max_parallel=s.max_parallel,
                        max_gpu_parallel=s.max_gpu_parallel, max_spend_usd=s.max_spend_usd,
                        lease_ttl_s=s.tick.lease_ttl_s, submit_grace_s=s.tick.submit_grace_s,
                        uncertain_submit_s=s.tick.uncertain_submit_s, ghost_grace_s=s.tick.ghost_grace_s,
                        prior_verified=len(campaign.priors))


def summarize(report: TickReport) -> str:
    kinds: dict[str, int] = {}
    for a in report.actions:
        kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
    did = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "nothing to do"
    queue = f"queue: {report.squeue_jobs} jobs" if report.squeue_known else \
        f"queue UNKNOWN ({report.squeue_error}); no run judged dead"
    text = f"tick {report.duration_s:.2f}s; {queue}; {did}"
    if report.accounting in ("unknown", "unavailable"):
        text += f"; accounting {report.accounting} ({report.accounting_error})"
    if report.draining:
        text += "; draining (no admissions)"
    if report.ghosts:
        text += f"; {len(report.ghosts)} ghost job(s) counted against the limits"
    waiting = sum(len(v) for v in report.waiting.values())
    if waiting and not kinds.get("admit"):
        top = max(report.waiting.items(), key=lambda kv: len(kv[1]))
        text += f"; {waiting} run(s) waiting (e.g. {len(top[1])}: {top[0]})"
    if report.errors:
        text += f"; {len(report.errors)} error(s): " + "; ".join(report.errors[:3])
    return text
