#!/usr/bin/env python
"""How long `sweep demo` takes, end to end, in a fresh temporary directory each time.

`sweep demo DIR` builds its panel of real git repositories, runs `sweep init`, then ticks (local
backend, oracle runtimes, a 0.5 s pause between ticks) until every run that can end has ended. This
script runs it as a user would (the `sweep` console script, a subprocess), several times, and prints
the wall time, the demo's own "done in" figure (the tick loop alone), the runs and their outcomes
(from `sweep status --json`), and the user+system CPU time of the demo and of every process it
waited for (its local controller jobs included).

Usage (from the repository root):
    .venv/bin/python benchmarks/demo_time.py               # 3 repetitions
    .venv/bin/python benchmarks/demo_time.py --repeats 5
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sweep_argv() -> list[str]:
    script = Path(sys.executable).with_name("sweep")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sweep"]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_demo(timeout: float) -> dict:
    root = Path(tempfile.mkdtemp(prefix="sweep-demo-bench-"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        cpu0 = children_cpu()
        t = time.perf_counter()
        r = subprocess.run([*sweep_argv(), "demo", str(root / "demo"), "--timeout", str(int(timeout))],
                           capture_output=True, text=True, env=env, cwd=root, stdin=subprocess.DEVNULL,
                           timeout=timeout + 60)
        wall = time.perf_counter() - t
        cpu = children_cpu() - cpu0     # the demo process and every job it waited for
        if r.returncode != 0:
            raise RuntimeError(f"sweep demo exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        loop = re.search(r"^done in ([0-9.]+)s$", r.stdout, re.M)
        st = json.loads(subprocess.run([*sweep_argv(), "status", "--json", "--campaign",
                                        str(root / "demo" / "campaign")], capture_output=True,
                                       text=True, env=env, check=True).stdout)
        return {"wall_s": wall, "loop_s": float(loop.group(1)) if loop else None, "cpu_s": cpu,
                "runs": st["runs"], "counts": st["counts"], "outcomes": st["outcomes"],
                "held": [h["run_id"] for h in st["held"]]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=180)
    args = ap.parse_args()
    rows = []
    for i in range(args.repeats):
        row = one_demo(args.timeout)
        rows.append(row)
        print(f"[{i + 1}/{args.repeats}] wall {row['wall_s']:.2f}s, tick loop {row['loop_s']}s, "
              f"CPU {row['cpu_s']:.2f}s; {row['runs']} runs {row['outcomes']}, held {row['held']}",
              file=sys.stderr, flush=True)

    def fig(key: str) -> str:
        vals = [r[key] for r in rows if r[key] is not None]
        return f"{statistics.median(vals):.2f} s (min {min(vals):.2f}, max {max(vals):.2f})"

    print(f"\n`sweep demo`, {args.repeats} repetitions, each in a fresh temp directory, {os.cpu_count()} CPUs")
    print(f"  runs in the panel:            {rows[0]['runs']} (outcomes {rows[0]['outcomes']}, "
          f"held {rows[0]['held']})")
    print(f"  wall time, end to end:        {fig('wall_s')}")
    print(f"  tick loop (demo's 'done in'): {fig('loop_s')}")
    print(f"  CPU, user+sys (waited-for):   {fig('cpu_s')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
