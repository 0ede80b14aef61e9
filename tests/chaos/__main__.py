"""`python -m tests.chaos [--seed N] [--kills K] [--runs R] [--minutes M] [--out FILE]`

Starts its own throwaway Slurm cluster (tests/slurm_cluster.py), runs rounds of a real campaign
under injected faults until K kills were injected (or M minutes passed), prints the figures as
JSON and exits 1 if any invariant was violated.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.harness import Chaos
from tests.slurm_cluster import SlurmCluster, missing_requirements, new_cluster_dir, remove_cluster_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: drawn and printed)")
    ap.add_argument("--kills", type=int, default=100, help="stop after this many injected kills")
    ap.add_argument("--runs", type=int, default=30, help="runs per round (one fresh campaign a round)")
    ap.add_argument("--max-parallel", type=int, default=6, help="the campaign's max_parallel")
    ap.add_argument("--kill-rate", type=float, default=0.5,
                    help="probability that a fault is NOT followed by a full tick")
    ap.add_argument("--round-faults", type=int, default=None, help="faults injected per round")
    ap.add_argument("--minutes", type=float, default=None, help="stop injecting after this long")
    ap.add_argument("--workdir", default=None, help="where the campaigns go (default: a temp dir)")
    ap.add_argument("--out", default=None, help="also write the figures (JSON) here")
    args = ap.parse_args(argv)
    # a TERM (e.g. `kill PID`) unwinds like Ctrl-C, so the cluster below is always stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    reason = missing_requirements()
    if reason:
        print(f"chaos: the Slurm test cluster is unavailable: {reason}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"chaos: seed {seed}", flush=True)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sweep-chaos-", dir="/var/tmp"))
    cdir = new_cluster_dir("sweep-chaos-slurm-")
    cluster = SlurmCluster(cdir)
    cluster.start()
    out = Path(args.out) if args.out else None

    def log(text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)
    try:
        chaos = Chaos(cluster, workdir, seed, runs=args.runs, kills=args.kills,
                      round_faults=args.round_faults, max_parallel=args.max_parallel,
                      max_gpu_parallel=min(2, args.max_parallel), kill_rate=args.kill_rate,
                      deadline_s=args.minutes * 60 if args.minutes else None, log=log)
        try:
            fig = chaos.run()
        finally:
            if out:
                out.write_text(json.dumps(chaos.fig.as_dict(), indent=2))
    finally:
        cluster.stop()
        remove_cluster_dir(cdir)
    print(json.dumps(fig.as_dict(), indent=2), flush=True)
    return 1 if fig.violations else 0


if __name__ == "__main__":
    sys.exit(main())
