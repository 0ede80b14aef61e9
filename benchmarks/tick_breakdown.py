#!/usr/bin/env python
"""Where the tick's read path spends its time, measured without a profiler.

cProfile inflates pure-Python calls (it made pathlib look like half of a tick), so this script
times the library's own read functions directly, each in a FRESH process (imports done, then ONE
call, as in a real tick: nothing warmed up, a heap holding only what that call builds), the
variants round-robin so that load from other processes falls on all of them alike:

  floor           os.open/os.read of every state.json + lease.json (tick_scale.py (a)), and the
                  same with Python's buffered open() (a')
  list_runs       runstate.list_runs: read + parse + validate every record
  leases          the lease read observe() and status make for every run
  observe         the tick's observe(): one queue call + list_runs + leases + spend
  collect_status  `sweep status` without its interpreter start-up
  ... gc paused   the same call with the cyclic garbage collector disabled around it (a one-shot
                  process over acyclic records: the collector only rescans a growing heap)
  in memory       parsing and validating every state.json already in memory, collector paused:
                  orjson.loads + model_validate, model_validate_json, and validation without the
                  `checkpoints` field, to show what each step costs per run

Usage (from the repository root):
    .venv/bin/python benchmarks/tick_breakdown.py --build 100000      # build a tick_scale.py campaign
    .venv/bin/python benchmarks/tick_breakdown.py --campaign DIR      # or use one kept with --keep
"""
from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(REPO / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)


class gc_paused:
    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


def paused(fn):
    def run():
        with gc_paused():
            return fn()
    return run


def variants(cdir: Path) -> dict[str, tuple[str, object]]:
    """key -> (label, zero-argument callable), built inside the process that times it."""
    import orjson

    import runstate.lease as lease_mod
    import tick_scale
    from runstate.models import RunRecord
    from runstate.runs import iter_run_ids, list_runs
    from sweep.status import collect_status
    from sweep.tick.observe import observe

    root = f"{cdir}/runs"
    ids = iter_run_ids(cdir)
    lazy: dict = {}

    def scheduler():
        if "s" not in lazy:
            lazy["s"] = tick_scale.make_real_scheduler(cdir)
        return lazy["s"]

    def leases():
        read_at = getattr(lease_mod, "read_lease_at", None)     # the string-path reader, if present
        if read_at is not None:
            return [read_at(f"{root}/{i}/lease.json") for i in ids]
        return [lease_mod.read_lease(Path(root) / i) for i in ids]

    def in_memory(make):      # inputs prepared before the clock starts; collector paused
        def prepare():
            raws = [Path(f"{root}/{i}/state.json").read_bytes() for i in ids]
            return paused(make(raws))
        prepare.in_memory = True
        return prepare

    def validate_dicts(strip: bool):
        def make(raws):
            dicts = [orjson.loads(b) for b in raws]
            if strip:
                dicts = [{k: v for k, v in d.items() if k != "checkpoints"} for d in dicts]
            return lambda: [RunRecord.model_validate(d) for d in dicts]
        return make

    return {
        "floor": ("floor: os.open/os.read every state.json + lease.json (tick_scale (a))",
                  lambda: tick_scale.read_floor(cdir)),
        "floor-open": ("floor: the same with buffered open() (tick_scale (a'))",
                       lambda: tick_scale.read_floor(cdir, read=tick_scale.read_bytes_buffered)),
        "list": ("list_runs", lambda: list_runs(cdir)),
        "list-gc": ("list_runs, gc paused", paused(lambda: list_runs(cdir))),
        "leases": ("lease read of every run (as observe/status do)", leases),
        "observe": ("observe", lambda: observe(cdir, scheduler())),
        "observe-gc": ("observe, gc paused", paused(lambda: observe(cdir, scheduler()))),
        "status": ("collect_status (sweep status minus start-up)", lambda: collect_status(cdir)),
        "status-gc": ("collect_status, gc paused", paused(lambda: collect_status(cdir))),
        "mem-orjson": ("in memory: orjson.loads of every state.json",
                       in_memory(lambda raws: lambda: [orjson.loads(b) for b in raws])),
        "mem-validate": ("in memory: RunRecord.model_validate(dict) of every record",
                         in_memory(validate_dicts(strip=False))),
        "mem-validate-bare": ("in memory: the same without the checkpoints field",
                              in_memory(validate_dicts(strip=True))),
        "mem-json": ("in memory: RunRecord.model_validate_json(bytes)",
                     in_memory(lambda raws: lambda: [RunRecord.model_validate_json(b) for b in raws])),
    }


def time_one(cdir: Path, key: str) -> None:
    """Child mode: everything imported, then ONE timed call."""
    _, fn = variants(cdir)[key]
    if getattr(fn, "in_memory", False):
        fn = fn()
    c, t = time.process_time(), time.perf_counter()
    fn()
    print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--campaign", type=Path, help="an existing campaign directory (read only)")
    src.add_argument("--build", type=int, metavar="N", help="build a tick_scale.py campaign of N runs")
    ap.add_argument("--repeats", type=int, default=5, help="rounds (one fresh process per variant per round)")
    ap.add_argument("--only", nargs="+", metavar="KEY", help="time only these variants")
    ap.add_argument("--one", metavar="KEY", help=argparse.SUPPRESS)     # child mode
    args = ap.parse_args()

    import tick_scale
    if args.one:
        time_one(args.campaign.resolve(), args.one)
        return 0

    tmp = None
    if args.build:
        tmp = Path(tempfile.mkdtemp(prefix="sweep-breakdown-"))
        cdir, _ = tick_scale.build_campaign(tmp, args.build, "fast")
        real = tick_scale.make_real_scheduler(cdir)
        real.cancel(list(real.queue().jobs))     # only the files matter here
    else:
        cdir = args.campaign.resolve()
    try:
        table = variants(cdir)
        keys = args.only or list(table)
        n = sum(1 for _ in (cdir / "runs").iterdir())
        print(f"campaign {cdir}: {n} runs; load avg {tick_scale.loadavg()}", file=sys.stderr)
        wall: dict[str, list[float]] = {k: [] for k in keys}
        cpu: dict[str, list[float]] = {k: [] for k in keys}
        for r in range(args.repeats):
            for key in keys:       # round-robin: load from other processes falls on all alike
                out = subprocess.run([sys.executable, __file__, "--one", key, "--campaign", str(cdir)],
                                     capture_output=True, text=True, check=True, cwd=REPO)
                sample = json.loads(out.stdout.strip().splitlines()[-1])
                wall[key].append(sample["wall"])
                cpu[key].append(sample["cpu"])
            print(f"  round {r + 1}/{args.repeats} done; load avg {tick_scale.loadavg()}",
                  file=sys.stderr, flush=True)
        print(f"\n{n:,} runs; each sample is one call in a fresh process; {args.repeats} rounds, "
              f"variants round-robin; load avg {tick_scale.loadavg()}\n")
        print("| what | median ms | min ms | CPU ms (median) | us per run (median) |")
        print("|---|---:|---:|---:|---:|")
        for key in keys:
            med = statistics.median(wall[key])
            print(f"| {table[key][0]} | {1000 * med:.0f} | {1000 * min(wall[key]):.0f} | "
                  f"{1000 * statistics.median(cpu[key]):.0f} | {1e6 * med / n:.1f} |")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
