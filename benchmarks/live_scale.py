#!/usr/bin/env python
"""Does a tick and `sweep status` cost what the LIVE runs cost, not the campaign's size?

For each size N (default 1,000, 10,000 and 100,000) with a live fraction F (default 0.10, so
L = F x N runs are live and the rest ended), this:

1. runs the real `sweep init` (a subprocess, real syncfs, timed whole-process, peak RSS);
2. ends the first N - L runs as a controller would have written them (0.6-1.7 KB of state.json
   with checkpoints, ended a day ago) and drains the campaign, so every tick reads and plans but
   starts no job (an idle tick: what a tick costs when nothing happens);
3. runs one tick in-process through a proxy that COUNTS scheduler calls (the answers are the real
   local backend's), which also builds the ended-runs index; then `collect_status` in-process with
   any scheduler construction counted (there must be none);
4. times, whole process, each repeated (1 unmeasured warm-up, then R runs, median and min):
   - floor(L):  a bare `python` that reads state.json + lease.json of the L live runs with
     os.open/os.read (their paths handed to it in a file): the least any tick must do;
   - floor(N):  the same for all N runs;
   - `sweep tick`, `sweep tick --full` (reads every run), `sweep status`, `sweep status --json`;
   - `sweep --help` and a bare `python -c pass`;
   peak RSS of each from /usr/bin/time (%M);
5. optionally (--signac) builds a signac workspace of the same N jobs (a statepoint each, a job
   document saying whether it ended) and times `python project.py status` of a signac-flow
   FlowProject with one operation whose post-condition reads that document (run with a PATH where
   no squeue/sbatch is found, so flow, like `sweep status`, asks no scheduler).

Usage (repository root, the project's venv):
    .venv/bin/python benchmarks/live_scale.py --sizes 1000 10000
    .venv/bin/python benchmarks/live_scale.py --sizes 100000 --repeats 3 --signac
    .venv/bin/python benchmarks/live_scale.py --sizes 10000 --live-fraction 0.5
Options: --workdir DIR (default a temp dir under /var/tmp), --keep, --json OUT.
signac and signac-flow are not project dependencies: `pip install signac signac-flow` first.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ["PYTHONPATH"] = str(REPO)

import tick_scale as ts  # noqa: E402  (plan, records and the counting proxy are shared)

TIME_BIN = shutil.which("time", path="/usr/bin:/bin")

FLOOR = r"""
import os, sys
paths = open(sys.argv[1]).read().split("\n")
n = 0
for p in paths:
    for f in ("/state.json", "/lease.json"):
        try:
            fd = os.open(p + f, os.O_RDONLY)
        except FileNotFoundError:
            continue
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            n += len(b)
        os.close(fd)
print(n)
"""

SIGNAC_PROJECT = r"""
import flow

class Project(flow.FlowProject):
    pass

@Project.post(lambda job: job.doc.get("ended", False))
@Project.operation
def run(job):
    pass

if __name__ == "__main__":
    Project().main()
"""


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s load {ts.loadavg()}] {msg}", file=sys.stderr, flush=True)


T0 = time.monotonic()


def whole_process(argv: list[str], cwd: Path = REPO, env: dict | None = None) -> tuple[float, int]:
    """(wall seconds, peak RSS KB) of one process, timed from here, RSS from /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r") as rss:
        prefix = [TIME_BIN, "-q", "-f", "%M", "-o", rss.name] if TIME_BIN else []
        t = time.perf_counter()
        r = subprocess.run([*prefix, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
        wall = time.perf_counter() - t
        text = rss.read().strip().splitlines()
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()[-2000:]}")
    return wall, int(text[-1]) if text and text[-1].isdigit() else 0


def repeat(argv: list[str], repeats: int, cwd: Path = REPO, env: dict | None = None) -> dict:
    whole_process(argv, cwd, env)                          # warm-up, not measured
    samples = [whole_process(argv, cwd, env) for _ in range(repeats)]
    walls = [w for w, _ in samples]
    return {"median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls),
            "rss_mb": max(r for _, r in samples) / 1024}


def end_runs(cdir: Path, n_ended: int) -> None:
    """Benchmark SET-UP: rewrite the first n_ended state.json files as ended records, in place."""
    from runstate.files import dump_model
    from runstate.models import RunRecord
    now = time.time()
    root = f"{cdir}/runs"
    for i in range(n_ended):
        path = f"{root}/pr-{i:06d}/state.json"
        with open(path, "rb") as f:
            base = RunRecord.model_validate_json(f.read())
        rec = ts.ended_record(base, i, now - 3 * 86400)     # ended days ago: past every window
        with open(path, "wb") as f:
            f.write(dump_model(rec))
        if i % 20000 == 19999:
            log(f"  ended {i + 1}")


def counted_tick_and_status(cdir: Path) -> dict:
    import sweep.scheduler as schedmod
    from sweep.status import collect_status
    from sweep.tick import run_tick
    real = ts.make_real_scheduler(cdir)
    assert run_tick(cdir, scheduler=ts.CountingScheduler(real)).ran      # builds the index
    proxy = ts.CountingScheduler(real)
    out = run_tick(cdir, scheduler=proxy)                                 # the tick that is measured
    assert out.ran, out.message
    report = json.loads((cdir / "tick.json").read_text())
    made = Counter()
    original = schedmod.make_scheduler

    def counting_make(*a, **kw):
        made["make_scheduler"] += 1
        return original(*a, **kw)
    schedmod.make_scheduler = counting_make
    try:
        st = collect_status(cdir)
    finally:
        schedmod.make_scheduler = original
    return {"tick_calls": dict(proxy.calls), "tick_runs_read": report["runs_read"],
            "tick_runs_indexed": report["runs_indexed"], "status_scheduler_made": made["make_scheduler"],
            "status_runs": st.runs, "status_counts": st.counts}


def build_signac(workdir: Path, n: int, n_ended: int) -> Path:
    import signac
    root = workdir / f"signac-{n}"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    project = signac.init_project(str(root))
    for i in range(n):
        job = project.open_job({"i": i}).init()
        if i < n_ended:
            job.doc["ended"] = True
        if i % 20000 == 19999:
            log(f"  signac jobs {i + 1}")
    (root / "project.py").write_text(SIGNAC_PROJECT)
    (root / "no-bin").mkdir()     # flow status runs with PATH=no-bin: no squeue/sbatch found, so it
    return root                   # queries no scheduler, like `sweep status` (0 scheduler calls)


def bench(n: int, live_fraction: float, repeats: int, workdir: Path, signac: bool) -> dict:
    live = max(1, round(n * live_fraction))
    n_ended = n - live
    res: dict = {"n": n, "live": live, "ended": n_ended, "load_before": ts.loadavg()}
    plan = ts.write_plan(workdir / f"plan-{n}.json", n, ts.sample_repo(workdir))
    cdir = workdir / f"campaign-{n}"
    log(f"N={n}: sweep init (subprocess)")
    wall, rss = whole_process([*ts.sweep_argv(), "init", str(plan), "--campaign", str(cdir)])
    res["init"] = {"wall_s": wall, "rss_mb": rss / 1024}
    log(f"N={n}: init {wall:.1f}s, {rss / 1024:.0f} MB; ending {n_ended} runs")
    end_runs(cdir, n_ended)
    subprocess.run([*ts.sweep_argv(), "drain", "--campaign", str(cdir), "--reason", "benchmark"],
                   check=True, capture_output=True)
    time.sleep(1.2)                                   # past the index's racy window
    res["calls"] = counted_tick_and_status(cdir)
    log(f"N={n}: {res['calls']}")

    live_ids = [f"pr-{i:06d}" for i in range(n_ended, n)]
    lists = {}
    for name, ids in (("live", live_ids), ("all", [f"pr-{i:06d}" for i in range(n)])):
        lists[name] = workdir / f"paths-{name}-{n}.txt"
        lists[name].write_text("\n".join(f"{cdir}/runs/{rid}" for rid in ids))
    sweep = ts.sweep_argv()
    c = ["--campaign", str(cdir)]
    figures = {
        "floor(L): read L live runs' state.json + lease.json": [sys.executable, "-c", FLOOR, str(lists["live"])],
        "floor(N): read all N runs' state.json + lease.json": [sys.executable, "-c", FLOOR, str(lists["all"])],
        "sweep tick (idle, index warm)": [*sweep, "tick", *c],
        "sweep tick --full (reads every run)": [*sweep, "tick", "--full", *c],
        "sweep status": [*sweep, "status", *c],
        "sweep status --json": [*sweep, "status", "--json", *c],
    }
    res["figures"] = {}
    for label, argv in figures.items():
        log(f"N={n}: {label}")
        res["figures"][label] = repeat(argv, repeats)
        if label.startswith("sweep tick --full"):
            whole_process([*sweep, "tick", *c])      # leave the index as a normal tick does
    if signac:
        log(f"N={n}: signac workspace of {n} jobs")
        t = time.perf_counter()
        sroot = build_signac(workdir, n, n_ended)
        res["signac_build_s"] = time.perf_counter() - t
        log(f"N={n}: flow status")
        res["figures"]["signac-flow: python project.py status"] = repeat(
            [sys.executable, "project.py", "status"], repeats, cwd=sroot, env={"PATH": str(sroot / "no-bin")})
        shutil.rmtree(sroot, ignore_errors=True)
    res["load_after"] = ts.loadavg()
    return res


def render(results: list[dict], startup: dict) -> str:
    rows = ["| N | L | measurement | median s | min s | peak RSS MB | x floor(L) |",
            "|---:|---:|---|---:|---:|---:|---:|"]
    for label, f in startup.items():
        rows.append(f"| - | - | {label} | {f['median_s']:.3f} | {f['min_s']:.3f} | {f['rss_mb']:.0f} | |")
    for r in results:
        floor = r["figures"]["floor(L): read L live runs' state.json + lease.json"]["median_s"]
        rows.append(f"| {r['n']:,} | {r['live']:,} | `sweep init` (once) | {r['init']['wall_s']:.2f} | | "
                    f"{r['init']['rss_mb']:.0f} | |")
        for label, f in r["figures"].items():
            rows.append(f"| {r['n']:,} | {r['live']:,} | {label} | {f['median_s']:.3f} | {f['min_s']:.3f} | "
                        f"{f['rss_mb']:.0f} | {f['median_s'] / floor:.2f} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--live-fraction", type=float, default=0.10)
    ap.add_argument("--repeats", type=int, help="measured runs per figure (default 5; 3 from 100,000)")
    ap.add_argument("--signac", action="store_true", help="also time signac-flow's status on N jobs")
    ap.add_argument("--signac-max", type=int, default=10**9, help="... only for N up to this")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sweep-live-", dir="/var/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"machine: {ts.machine()}; workdir {workdir}")
    startup = {"`sweep --help`": repeat([*ts.sweep_argv(), "--help"], 10),
               "bare `python -c pass`": repeat([sys.executable, "-c", "pass"], 10)}
    results = []
    try:
        for n in args.sizes:
            repeats = args.repeats or (5 if n < 100_000 else 3)
            results.append(bench(n, args.live_fraction, repeats, workdir, args.signac and n <= args.signac_max))
            if not args.keep:
                shutil.rmtree(workdir / f"campaign-{n}", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nmachine: {ts.machine()}; live fraction {args.live_fraction}; warm page cache, local ext4\n")
    print(render(results, startup))
    for r in results:
        print(f"\nN={r['n']:,}: calls {r['calls']}; load {r['load_before']} -> {r['load_after']}"
              + (f"; signac workspace built in {r['signac_build_s']:.1f}s" if "signac_build_s" in r else ""))
    if args.json:
        args.json.write_text(json.dumps({"machine": ts.machine(), "startup": startup, "results": results},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
