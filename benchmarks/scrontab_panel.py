#!/usr/bin/env python
"""A nine-PR panel driven only by scrontab, against the same panel ticked by hand (issue 26).

Two campaigns from one plan on one throwaway Slurm cluster (tests/slurm_cluster.py, cpu and gpu
partitions): nothing ticks `cron` but Slurm's cron (`sweep scrontab --install`: the tick runs as a
scrontab batch job with the login environment Slurm gives it, requeued after every run, so its
later runs carry SLURM_RESTART_COUNT); `manual` is ticked from this process every few seconds.
The panel: five real fixes (two of them asking for a GPU), a PR without tests, one whose tests
pass before the fix, one with a flaky test and one whose tests accept a wrong solution. The
author is the fake agent (command runtime), the other roles are sweep's oracles.

Printed: each PR's ending in both campaigns, the interruptions counted, the wall time until each
campaign had ended every PR, the most live jobs and GPU jobs of each campaign seen in the queue
(sampled every poll), and how often Slurm ran the cron tick. Exit status 0 when every PR ended
the same way in both campaigns with no interruption counted, 1 otherwise.

Needs root and the Debian Slurm packages (what `.ci/run` installs) and a scrontab client (CI's
build in .cache/slurm-bin, or PATH). Takes 5-15 minutes: scrontab runs the tick once a minute.

Usage (from the repository root):
    .venv/bin/python benchmarks/scrontab_panel.py
    .venv/bin/python benchmarks/scrontab_panel.py --timeout-min 40 --keep   # keep the campaigns
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runstate.models import RunState  # noqa: E402
from sweep.campaign import load_campaign  # noqa: E402
from sweep.harbor.samples import make_pr_repo  # noqa: E402
from tests.campaigns import status_json, sweep, write_plan  # noqa: E402
from tests.fakes.runs import agent_options, candidate, local_plan, record  # noqa: E402
from tests.slurm_cluster import SlurmCluster, find_or_build_scrontab, new_cluster_dir, remove_cluster_dir  # noqa: E402

# run id -> (sample kind, GPUs)
PANEL = {
    "pr-fix-1": ("verified", 0), "pr-fix-2": ("verified", 0), "pr-fix-3": ("verified", 0),
    "pr-gpu-1": ("verified", 1), "pr-gpu-2": ("verified", 1),
    "pr-no-tests": ("no_tests", 0), "pr-passes-before": ("passes_before", 0),
    "pr-flaky": ("flaky", 0), "pr-weak-tests": ("weak_tests", 0),
}
MAX_PARALLEL, MAX_GPU = 3, 1


def panel_plan(root: Path) -> dict:
    cands = []
    for run_id, (kind, gpus) in PANEL.items():
        src = make_pr_repo(root / "repos", kind, name=run_id)
        options: dict = {"runtime_options": {"author": agent_options("author", "--repo", src["repo"])}}
        if gpus:
            options["gpus"] = gpus
        cands.append(candidate(run_id, src, **options))
    plan = local_plan(cands, defaults={"runtimes": {"author": "command"}}, max_parallel=MAX_PARALLEL)
    plan["max_gpu_parallel"] = MAX_GPU
    plan["scheduler"] = {"backend": "slurm", "accounting": "jobcomp",
                         "lanes": {"cpu": {"partition": "cpu", "time": "15"},
                                   "gpu": {"partition": "gpu", "time": "15"}}}
    plan["tick"] = {**plan["tick"], "interval_minutes": 1}
    return plan


def not_done(campaign: Path, env: dict) -> int:
    counts = status_json(campaign, env=env)["counts"]
    return counts["queued"] + counts["active"]


def live_jobs(cluster: SlurmCluster, prefix: str) -> tuple[int, int]:
    """(live jobs, live GPU-partition jobs) of the campaign whose job names start with `prefix`."""
    out = cluster.run("squeue", "--me", "-h", "-o", "%j|%P|%T", check=False).stdout
    rows = [line.split("|") for line in out.splitlines() if line.startswith(prefix)]
    live = [r for r in rows if len(r) == 3 and r[2] not in ("COMPLETED", "CANCELLED", "FAILED")]
    return len(live), sum(1 for r in live if r[1] == "gpu")


def endings(campaign: Path) -> dict[str, tuple]:
    out = {}
    for run_id in PANEL:
        rec = record(campaign, run_id)
        out[run_id] = (rec.state.value, rec.outcome.value if rec.outcome else None, rec.reason,
                       rec.interruptions)
    return out


def drive(cluster: SlurmCluster, env: dict, cron: Path, manual: Path, timeout_s: float) -> dict:
    """Tick `manual` by hand while Slurm's cron ticks `cron`; sample both campaigns' queues."""
    prefixes = {name: load_campaign(d).job_prefix for name, d in (("cron", cron), ("manual", manual))}
    peak = {name: [0, 0] for name in prefixes}
    ended_at: dict[str, float] = {}
    t0 = time.monotonic()
    while len(ended_at) < 2:
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"not every PR ended within {timeout_s:.0f} s: "
                               f"cron {not_done(cron, env)}, manual {not_done(manual, env)} left")
        if "manual" not in ended_at:
            sweep("tick", "--campaign", str(manual), env=env)
        for name, prefix in prefixes.items():
            jobs, gpu = live_jobs(cluster, prefix)
            peak[name] = [max(peak[name][0], jobs), max(peak[name][1], gpu)]
        for name, d in (("cron", cron), ("manual", manual)):
            if name not in ended_at and not_done(d, env) == 0:
                ended_at[name] = time.monotonic() - t0
                print(f"  {name}: every PR ended after {ended_at[name]:.0f} s", flush=True)
        time.sleep(5)
    return {"ended_at": ended_at, "peak": peak}


def cron_restarts(cluster: SlurmCluster, campaign: Path) -> int | None:
    name = load_campaign(campaign).tick_job_name
    job = cluster.run("squeue", "--me", "-h", "-n", name, "-o", "%i", check=False).stdout.split()
    if not job:
        return None
    match = re.search(r"Restarts=(\d+)", cluster.run("scontrol", "show", "job", job[0], check=False).stdout)
    return int(match.group(1)) if match else None


def report(cron: Path, manual: Path, figures: dict, restarts: int | None) -> bool:
    a, b = endings(cron), endings(manual)
    print(f"\n{'run':<18} {'kind':<14} {'manual ending':<44} {'scrontab ending':<44}")
    for run_id, (kind, gpus) in PANEL.items():
        show = [f"{e[1]}:{e[2]}" + (f" ({e[3]} interruptions)" if e[3] else "") for e in (b[run_id], a[run_id])]
        print(f"{run_id:<18} {kind + (' +gpu' if gpus else ''):<14} {show[0]:<44} {show[1]:<44}")
    same = a == b and all(e[0] == RunState.ended.value and e[3] == 0 for e in a.values())
    for name in ("manual", "cron"):
        jobs, gpu = figures["peak"][name]
        print(f"{name:>7}: ended every PR in {figures['ended_at'][name]:.0f} s; most live jobs {jobs} "
              f"(max_parallel {MAX_PARALLEL}), most GPU jobs {gpu} (max_gpu_parallel {MAX_GPU})")
    print(f"the cron tick job was run {'?' if restarts is None else restarts + 1} time(s) by Slurm")
    print("same endings, no interruption counted: " + ("yes" if same else "NO"))
    return same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout-min", type=float, default=30.0)
    ap.add_argument("--keep", action="store_true", help="keep the two campaigns (their path is printed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sweep-bench-cron-", dir="/var/tmp"))
    cluster_dir = new_cluster_dir("sweep-bench-cron-")
    cluster = SlurmCluster(cluster_dir)
    scrontab = find_or_build_scrontab()
    try:
        cluster.start()
        env = {"SLURM_CONF": str(cluster.conf), "SWEEP_SCRONTAB": str(scrontab)}
        plan = write_plan(work / "plan.json", panel_plan(work))
        cron, manual = work / "cron", work / "manual"
        for d in (cron, manual):
            sweep("init", str(plan), "--campaign", str(d), env=env)
        print(f"campaigns under {work}; installing the scrontab tick for {cron.name}", flush=True)
        sweep("scrontab", "--install", "--campaign", str(cron), env=env)
        try:
            figures = drive(cluster, env, cron, manual, args.timeout_min * 60)
            restarts = cron_restarts(cluster, cron)
        finally:
            sweep("scrontab", "--remove", "--campaign", str(cron), env=env, check=False)
            cluster.run(str(scrontab), "-r", check=False)
        same = report(cron, manual, figures, restarts)
        (work / "figures.json").write_text(json.dumps({**figures, "same": same}, indent=1))
        return 0 if same else 1
    finally:
        cluster.stop()
        remove_cluster_dir(cluster_dir)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}")


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main())
