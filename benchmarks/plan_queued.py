"""`python benchmarks/plan_queued.py [--queued N] [--active A] [--repeats R] [--profile]`

The tick's planner alone (`plan_tick`, pure: no I/O) on an in-memory snapshot of N queued runs
and A active ones whose jobs are alive (max_parallel = A, so every queued run waits with a
reason), as a tick sees a big campaign early on. Prints the median, min and max seconds of R
calls (the collector paused, as the tick runs it), and with --profile the top of a cProfile of
one call.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runstate.models import RunRecord, RunState  # noqa: E402
from sweep.tick.plan import PlanSettings, QueueJob, RunView, Snapshot, plan_tick  # noqa: E402


def build(queued: int, active: int) -> tuple[Snapshot, PlanSettings]:
    now = time.time()
    runs: dict[str, RunView] = {}
    queue: dict[str, QueueJob] = {}
    for i in range(active):
        rid = f"pr-{i:06d}"
        job = str(1000 + i)
        rec = RunRecord(run_id=rid, panel_index=i, state=RunState.active, job_id=job, submit_token=f"t{i}",
                        allocation_usd=1.0)
        runs[rid] = RunView(rec)
        queue[job] = QueueJob(job, f"sw.c.t{i}.{rid}")
    for i in range(active, active + queued):
        rid = f"pr-{i:06d}"
        gpus = 1 if i % 100 == 0 else 0
        runs[rid] = RunView(RunRecord(run_id=rid, panel_index=i, gpus=gpus, lane="gpu" if gpus else "cpu"))
    snap = Snapshot(now=now, queue_known=True, queue=queue, runs=runs)
    cfg = PlanSettings(target_verified=10**9, max_parallel=active, max_gpu_parallel=2, max_spend_usd=1e6,
                       lease_ttl_s=300, submit_grace_s=120)
    return snap, cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queued", type=int, default=100_000)
    ap.add_argument("--active", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    snap, cfg = build(args.queued, args.active)
    gc.collect()
    gc.disable()
    plan_tick(snap, cfg)                      # warm-up, not measured
    samples = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        actions = plan_tick(snap, cfg)
        samples.append(time.perf_counter() - t0)
    waiting = sum(len(v) for a in actions if type(a).__name__ == "Waiting" for v in a.reasons.values())
    print(f"plan_tick, {args.queued:,} queued + {args.active} active: median {statistics.median(samples):.3f} s, "
          f"min {min(samples):.3f} s, max {max(samples):.3f} s ({args.repeats} calls; "
          f"{len(actions)} actions, {waiting:,} runs waiting with a reason)")
    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        plan_tick(snap, cfg)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
