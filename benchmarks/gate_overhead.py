#!/usr/bin/env python
"""What a gate trial costs over the bare test command, side by side on one bundle (issue 26, item 5).

1. The panel: `sweep demo DIR` (or `--demo DIR`, a demo already run) ends with a verified task
   bundle (`runs/fix-clamp/task`). The panel's gate phase time is read from every run's events
   (`phase_started` .. `phase_done` of phase `gates`, summed over the runs and their revisions),
   with the number of trials each gates phase ran (2 x gate_repeats + 2 selected runs).
2. On that bundle, interleaved, `--repeats` times each:
   - a trial as the gates run it: `sweep.harbor.trial.run_trial(bundle, "reference" | "empty")`
     through the local provider (bwrap unless `--isolation none`), the bundle's own harness,
     PYTHONHASHSEED fixed, a fresh work directory each time;
   - the bare test command (`tests/test_command.txt`) run with subprocess in a copy of the same
     repository with the PR's test files installed, and for "reference" the solution applied:
     the floor any verifier pays.
   Prints median / min / max wall seconds of each, sweep's overhead per trial (trial - bare) and the
   issue's target for it: at most 0.3 s + 10 % of the bare command.

Usage (from the repository root, with the project's venv):
    .venv/bin/python benchmarks/gate_overhead.py                       # builds a demo in a temp dir
    .venv/bin/python benchmarks/gate_overhead.py --demo /var/tmp/demo --repeats 10 --isolation none
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def gate_phase_times(campaign: Path) -> list[tuple[str, float]]:
    """(run id, seconds in the gates phase) for every run that ran it, from events.jsonl."""
    out = []
    for events in sorted((campaign / "runs").glob("*/events.jsonl")):
        started, total = None, 0.0
        for line in events.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("phase") != "gates":
                continue
            if e.get("kind") == "phase_started":
                started = e["ts"]
            elif e.get("kind") == "phase_done" and started is not None:
                total += e["ts"] - started
                started = None
        if total:
            out.append((events.parent.name, total))
    return out


def bare_repo(bundle: Path, dest: Path, reference: bool) -> Path:
    """The bundle's repository with its test files installed (and the fix applied for reference)."""
    from sweep.harbor import layout
    repo = dest / "repo"
    shutil.copytree(bundle / layout.ENV_REPO, repo, symlinks=True)
    for rel in (bundle / layout.TEST_FILES).read_text().split("\n"):
        if rel:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(bundle / layout.TEST_FILES_DIR / rel, repo / rel)
    if reference:
        subprocess.run(["bash", str(bundle / layout.SOLVE_SH)], check=True, capture_output=True,
                       env={**os.environ, "REPO_DIR": str(repo)})
    return repo


def time_bare(bundle: Path, repo: Path) -> float:
    from sweep.harbor import layout
    argv = [a for a in (bundle / layout.TEST_COMMAND).read_text().split("\n") if a]
    t0 = time.monotonic()
    subprocess.run(argv, cwd=repo, capture_output=True, env={**os.environ, "PYTHONHASHSEED": "1"})
    return time.monotonic() - t0


def time_trial(bundle: Path, kind: str, provider, work: Path) -> tuple[float, float | None]:
    from sweep.harbor.trial import bundle_harness, run_trial
    t0 = time.monotonic()
    result = run_trial(bundle, kind, provider=provider, workdir=work, timeout_s=300,
                       env={"PYTHONHASHSEED": "1"}, harness=bundle_harness(bundle))
    wall = time.monotonic() - t0
    shutil.rmtree(work, ignore_errors=True)
    return wall, result.reward


def stats(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.3f} {min(xs):7.3f} {max(xs):7.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", type=Path, help="a directory `sweep demo` already ran in")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--isolation", choices=("bwrap", "none"), default="bwrap")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gate-overhead-", dir="/var/tmp"))
    demo = args.demo
    if demo is None:
        demo = tmp / "demo"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "sweep", "demo", str(demo)], check=True, capture_output=True)
        print(f"sweep demo: {time.monotonic() - t0:.1f} s")
    campaign = demo / "campaign"
    phases = gate_phase_times(campaign)
    print(f"panel gate phase time: {sum(t for _, t in phases):.2f} s over {len(phases)} runs "
          + ", ".join(f"{rid} {t:.2f} s" for rid, t in phases))
    bundle = campaign / "runs" / "fix-clamp" / "task"
    from sweep.providers.local import LocalProvider
    provider = LocalProvider(isolation=args.isolation)
    print(f"bundle {bundle}, isolation {args.isolation}, {args.repeats} repeats, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'':<28} {'median':>7} {'min':>7} {'max':>7}   (seconds)")
    for kind in ("reference", "empty"):
        repo = bare_repo(bundle, tmp / f"bare-{kind}", kind == "reference")
        trials, bares, rewards = [], [], set()
        for i in range(args.repeats):          # interleaved: the load moves both alike
            wall, reward = time_trial(bundle, kind, provider, tmp / f"trial-{kind}-{i}")
            trials.append(wall)
            rewards.add(reward)
            bares.append(time_bare(bundle, repo))
        overhead = [t - b for t, b in zip(trials, bares, strict=True)]
        target = 0.3 + 0.1 * statistics.median(bares)
        print(f"{kind + ': trial':<28} {stats(trials)}   reward {sorted(rewards, key=str)}")
        print(f"{kind + ': bare test command':<28} {stats(bares)}")
        verdict = "meets" if statistics.median(overhead) <= target else "MISSES"
        print(f"{kind + ': overhead':<28} {stats(overhead)}   target <= {target:.3f}: {verdict}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
