#!/usr/bin/env python
"""What issue 16's two extra Slurm questions cost, on a throwaway test cluster.

- the tick's ONE accounting call for every job that vanished on that tick
  (`sacct -c -X -n -P --jobs=ID,ID,... --format=JobID,State`, what `accounting = "jobcomp"` runs),
  for 1, 10 and N ended jobs in one call; and the same call on a cluster without accounting
  storage (`sacct` without -c: it fails at once with "accounting storage is disabled");
- the controller's ONE `scontrol show job ID` when SIGTERM arrives (a running job).

Each figure is the median wall time of `--repeats` calls through sweep's own client
(sweep/scheduler/slurm/accounting.py), i.e. a subprocess per call. Needs root and the Debian
Slurm packages (the cluster of tests/slurm_cluster.py with preempt=True).

Usage (from the repository root):
    .venv/bin/python benchmarks/accounting_calls.py               # 50 ended jobs, 20 repeats
    .venv/bin/python benchmarks/accounting_calls.py --jobs 200 --repeats 30
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sweep.scheduler.slurm.accounting import end_states, stop_cause  # noqa: E402
from tests.slurm_cluster import SlurmCluster, new_cluster_dir, remove_cluster_dir, wait_for  # noqa: E402


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    d = new_cluster_dir("sweep-bench-acct-")
    cluster = SlurmCluster(d, preempt=True)
    try:
        cluster.start()
        env = cluster.env
        ended = [cluster.run("sbatch", "--parsable", "-p", "cpu", "-o", "/dev/null", "--wrap", "true").stdout.strip()
                 for _ in range(args.jobs)]
        wait_for(lambda: not cluster.run("squeue", "-h", "-o", "%i").stdout.strip(), 120, "the jobs to end")
        running = cluster.run("sbatch", "--parsable", "-p", "cpu", "-o", "/dev/null",
                              "--wrap", "sleep 300").stdout.strip()
        wait_for(lambda: cluster.run("squeue", "-h", "-j", running, "-o", "%T").stdout.strip() == "RUNNING",
                 30, "the running job")
        answer = end_states(ended, source="jobcomp", env=env)
        assert answer.known and len(answer.states) == len(ended), answer
        print(f"Slurm test cluster, {args.repeats} calls each, median wall time per call:")
        for n in sorted({1, min(10, len(ended)), len(ended)}):
            ms = median_ms(lambda n=n: end_states(ended[:n], source="jobcomp", env=env), args.repeats)
            print(f"  sacct -c for {n:>4} vanished job(s), one call: {ms:7.1f} ms")
        ms = median_ms(lambda: end_states(ended, source="sacct", env=env), args.repeats)
        print(f"  sacct without accounting storage (fails):   {ms:7.1f} ms")
        ms = median_ms(lambda: stop_cause(running, 0, env=env), args.repeats)
        print(f"  scontrol show job (the controller at SIGTERM): {ms:5.1f} ms")
        cluster.run("scancel", running, check=False)
    finally:
        cluster.stop()
        remove_cluster_dir(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
