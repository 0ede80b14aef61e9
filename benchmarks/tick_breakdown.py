#!/usr/bin/env python
"""Where the tick's read path spends its time, and what the recommended fixes would save.

cProfile inflates pure-Python calls (pathlib most of all), so this script attributes time the
other way round: it times, without a profiler, the library's own functions against small
prototypes that differ from them in ONE respect each, and checks that every prototype returns
exactly the same records. The difference between the two is what that respect costs.

  current   runstate.list_runs / read_lease / tick observe() / sweep.status.collect_status
  F1        the same reads with str paths built by f-strings instead of pathlib.Path objects
  F2        the current code with the cyclic garbage collector paused while the records are read
  F1+F2     both
  F4        os.open/os.read instead of the buffered open() in read_bytes
  F3        (in memory) pydantic's own JSON parser, RunRecord.model_validate_json, instead of
            orjson.loads + RunRecord.model_validate

Usage (from the repository root):
    .venv/bin/python benchmarks/tick_breakdown.py --campaign DIR       # a campaign kept by tick_scale.py --keep
    .venv/bin/python benchmarks/tick_breakdown.py --build 100000       # build one like tick_scale.py does
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(REPO / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)


def timed(label: str, fn, repeats: int, rows: list) -> object:
    result = fn()                              # warm-up, and the result for the equality checks
    wall, cpu = [], []
    for _ in range(repeats):
        c, t = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    rows.append((label, statistics.median(wall), min(wall), statistics.median(cpu)))
    print(f"  {label:<62} median {1000 * statistics.median(wall):8.1f} ms  min {1000 * min(wall):8.1f}"
          f"  cpu {1000 * statistics.median(cpu):8.1f}", file=sys.stderr, flush=True)
    return result


class gc_paused:
    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


# ---- prototypes: the library's code with one change each ---------------------------------------

def read_bytes_str(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def list_runs_str(campaign: Path, read=read_bytes_str):
    """runstate.runs.list_runs, with str paths (F1); `read=tick_scale.read_bytes_os` adds F4."""
    from runstate.files import parse_model
    from runstate.models import RunRecord
    from runstate.runs import RunListing, iter_run_ids
    listing = RunListing()
    root = f"{os.fspath(campaign)}/runs"
    for run_id in iter_run_ids(campaign):
        path = f"{root}/{run_id}/state.json"
        try:
            raw = read(path)
        except OSError as exc:
            listing.corrupt[run_id] = f"unreadable: {exc.strerror or exc}"
            continue
        if raw is None:
            continue
        loaded = parse_model(path, raw, RunRecord)
        if loaded.value is not None and loaded.value.run_id != run_id:
            listing.corrupt[run_id] = f"run_id {loaded.value.run_id!r} does not match its directory"
        elif loaded.value is None:
            listing.corrupt[run_id] = loaded.problem or "unreadable"
        else:
            listing.records[run_id] = loaded.value
    return listing


def read_lease_str(rdir: str):
    """runstate.lease.read_lease, with a str path (F1)."""
    from runstate.files import parse_model
    from runstate.lease import LeaseView
    from runstate.models import Lease
    path = f"{rdir}/lease.json"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    loaded = parse_model(path, raw, Lease)
    return LeaseView(path, raw, loaded.value, loaded.problem, st.st_mtime)


def observe_str(campaign_dir: Path, scheduler):
    """sweep.tick.observe.observe, with str paths (F1). Same reads, same snapshot."""
    from runstate.markers import is_draining, read_outage
    from runstate.models import RunState
    from sweep.tick.observe import ROLES, read_committed
    from sweep.tick.plan import QueueJob, RunView, Snapshot
    queue = scheduler.queue()
    now = time.time()
    jobs = {jid: QueueJob(jid, info.name, info.gpus) for jid, info in queue.jobs.items()} if queue.known else {}
    listing = list_runs_str(campaign_dir)
    root = f"{os.fspath(campaign_dir)}/runs"
    runs = {}
    for run_id, rec in listing.records.items():
        rdir = f"{root}/{run_id}"
        lease = read_lease_str(rdir)
        committed = read_committed(Path(rdir)) if rec.allocation_usd is not None and rec.state is not RunState.ended else 0.0
        runs[run_id] = RunView(rec, lease, committed)
    stamps = {}
    for role in ROLES:
        stamp = read_outage(campaign_dir, role).value
        if stamp is not None:
            stamps[role] = stamp
    snap = Snapshot(now=now, queue_known=queue.known, queue=jobs, runs=runs,
                    draining=is_draining(campaign_dir), stamps=stamps, capacity=scheduler.capacity())
    return snap, {"squeue_error": queue.error, "corrupt": listing.corrupt}


def same_snapshot(a, b) -> bool:
    if a.runs.keys() != b.runs.keys():
        return False
    for rid, va in a.runs.items():
        vb = b.runs[rid]
        if va.record != vb.record or va.committed_usd != vb.committed_usd:
            return False
        if (va.lease is None) != (vb.lease is None):
            return False
        if va.lease is not None and (va.lease.raw != vb.lease.raw or va.lease.lease != vb.lease.lease):
            return False
    return a.queue == b.queue and a.draining == b.draining and a.capacity == b.capacity


# ---- main --------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--campaign", type=Path, help="an existing campaign directory (read only)")
    src.add_argument("--build", type=int, metavar="N", help="build a tick_scale.py campaign of N runs")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import orjson

    from runstate.lease import read_lease
    from runstate.models import RunRecord
    from runstate.runs import iter_run_ids, list_runs
    from sweep.status import collect_status
    from sweep.tick.observe import observe
    import tick_scale

    tmp = None
    if args.build:
        tmp = Path(tempfile.mkdtemp(prefix="sweep-breakdown-"))
        cdir, _ = tick_scale.build_campaign(tmp, args.build, "fast")
    else:
        cdir = args.campaign.resolve()
    scheduler = tick_scale.CountingScheduler(tick_scale.make_real_scheduler(cdir))
    try:
        ids = iter_run_ids(cdir)
        print(f"campaign {cdir}: {len(ids)} runs; load avg {tick_scale.loadavg()}", file=sys.stderr)
        rows: list = []
        r = args.repeats
        timed("floor: os.open/os.read every state.json + lease.json (tick_scale (a))",
              lambda: tick_scale.read_floor(cdir), r, rows)
        timed("floor: the same with buffered open() (tick_scale (a'))",
              lambda: tick_scale.read_floor(cdir, read=tick_scale.read_bytes_buffered), r, rows)
        cur = timed("list_runs: current", lambda: list_runs(cdir), r, rows)
        f1 = timed("list_runs: F1 str paths", lambda: list_runs_str(cdir), r, rows)

        def f2_list():
            with gc_paused():
                return list_runs(cdir)
        f2 = timed("list_runs: F2 gc paused", f2_list, r, rows)

        def f12_list():
            with gc_paused():
                return list_runs_str(cdir)
        f12 = timed("list_runs: F1+F2", f12_list, r, rows)

        def f124_list():
            with gc_paused():
                return list_runs_str(cdir, read=tick_scale.read_bytes_os)
        f124 = timed("list_runs: F1+F2+F4 (os.open/os.read)", f124_list, r, rows)
        assert cur.records == f1.records == f2.records == f12.records == f124.records
        assert cur.corrupt == f1.corrupt == f124.corrupt

        root = cdir / "runs"
        timed("read_lease x every run: current", lambda: [read_lease(root / i) for i in ids], r, rows)
        timed("read_lease x every run: F1 str paths", lambda: [read_lease_str(f"{root}/{i}") for i in ids], r, rows)

        o_cur = timed("observe: current", lambda: observe(cdir, scheduler)[0], r, rows)

        def f12_obs():
            with gc_paused():
                return observe_str(cdir, scheduler)[0]
        o_new = timed("observe: F1+F2", f12_obs, r, rows)
        assert same_snapshot(o_cur, o_new), "the prototype observe() must see exactly what observe() sees"

        timed("collect_status (sweep status minus start-up): current", lambda: collect_status(cdir), r, rows)

        def f2_status():
            with gc_paused():
                return collect_status(cdir)
        timed("collect_status: F2 gc paused", f2_status, r, rows)

        # in memory, with the collector paused so that only the parsing itself is timed
        raws = [Path(f"{root}/{i}/state.json").read_bytes() for i in ids]
        dicts = [orjson.loads(b) for b in raws]
        bare = [{k: v for k, v in d.items() if k != "checkpoints"} for d in dicts]

        def paused(fn):
            def run():
                with gc_paused():
                    return fn()
            return run
        timed("in memory: orjson.loads of every state.json", paused(lambda: [orjson.loads(b) for b in raws]), r, rows)
        timed("in memory: RunRecord.model_validate(dict) of every record",
              paused(lambda: [RunRecord.model_validate(d) for d in dicts]), r, rows)
        timed("in memory: the same without the checkpoints key",
              paused(lambda: [RunRecord.model_validate(d) for d in bare]), r, rows)
        timed("in memory: F3 RunRecord.model_validate_json(bytes)",
              paused(lambda: [RunRecord.model_validate_json(b) for b in raws]), r, rows)
        def pathlib_ops():
            for i in ids:      # what list_runs + observe do per run: 4 Path(...) and 4 '/'
                d = root / i
                Path(Path(d) / "state.json")
                Path(d).name
                Path(root / i) / "lease.json"
        timed("in memory: pathlib alone, 4 Path() + 4 '/' per run as in observe()", paused(pathlib_ops), r, rows)

        n = len(ids)
        print(f"\n{n:,} runs, {args.repeats} repeats after 1 warm-up, load avg {tick_scale.loadavg()}\n")
        print("| what | median ms | min ms | CPU ms | us per run |")
        print("|---|---:|---:|---:|---:|")
        for label, med, mn, cpu in rows:
            print(f"| {label} | {1000 * med:.0f} | {1000 * mn:.0f} | {1000 * cpu:.0f} | {1e6 * med / n:.1f} |")
    finally:
        if tmp is not None:
            real = tick_scale.make_real_scheduler(cdir)
            real.cancel(list(real.queue().jobs))
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
