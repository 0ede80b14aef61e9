#!/usr/bin/env python
"""The demo panel's gate phase on two checkouts of sweep, side by side (issue 26's panel figure).

`sweep demo` is run alternately by this checkout and by `--against CHECKOUT` (another checkout
with its own `.venv`, e.g. round 1's: `git worktree add ../sweep-r1 47fdbf3`), `--runs` times
each; for every demo the gates phase time of each run is read from its events and the trials from
its gates evidence (`gate_overhead.gate_phase_times`). Both run with the caller's PATH less any
version manager's shim directory (pyenv's `shims/`): a checkout that does not skip shims itself
(round 1) would otherwise pay ~0.2 s a `python3` start in every trial, and the figure would
compare shims, not gates. Prints, per checkout, the medians of: the
gates phase summed over the demo's runs, that sum per trial, fix-clamp's gates alone and the whole
demo's wall time; and the 1-minute load average range while it ran.

Usage (from the repository root, with the project's venv):
    .venv/bin/python benchmarks/gate_panel.py --against ../sweep-r1 --runs 8
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from gate_overhead import gate_phase_times  # noqa: E402

ENV = {**os.environ, "PATH": os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                             if Path(p).name != "shims")}


def one_demo(checkout: Path, where: Path) -> dict:
    shutil.rmtree(where, ignore_errors=True)
    t0 = time.monotonic()
    subprocess.run([str(checkout / ".venv" / "bin" / "sweep"), "demo", str(where)], check=True,
                   capture_output=True, cwd=checkout, env=ENV)
    wall = time.monotonic() - t0
    runs = gate_phase_times(where / "campaign")
    gates = sum(t for _, t, _ in runs)
    trials = sum(n for _, _, n in runs)
    return {"gates": gates, "trials": trials, "per_trial": gates / trials if trials else 0.0,
            "fix": sum(t for rid, t, _ in runs if rid == "fix-clamp"), "demo": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", required=True, type=Path, help="another checkout of sweep with its own .venv")
    ap.add_argument("--runs", type=int, default=6, help="demos per checkout (alternated)")
    args = ap.parse_args()
    codes = {"this": REPO, "against": args.against.resolve()}
    out: dict[str, list[dict]] = {name: [] for name in codes}
    loads = []
    with tempfile.TemporaryDirectory(prefix="sweep-gate-panel-", dir="/var/tmp") as tmp:
        for i in range(args.runs):
            for name in (list(codes) if i % 2 == 0 else list(codes)[::-1]):
                got = one_demo(codes[name], Path(tmp) / name)
                out[name].append(got)
                loads.append(os.getloadavg()[0])
                print(f"{name:>7}: gates {got['gates']:.2f} s over {got['trials']} trials, "
                      f"fix-clamp {got['fix']:.2f} s, demo {got['demo']:.1f} s", flush=True)
    print(f"load (1 min) {min(loads):.1f}-{max(loads):.1f}; medians of {args.runs} demos each:")
    for name, rows in out.items():
        med = {k: statistics.median(r[k] for r in rows) for k in ("gates", "trials", "per_trial", "fix", "demo")}
        print(f"{name:>7} ({codes[name]}): gates {med['gates']:.3f} s ({med['trials']:.0f} trials), "
              f"{med['per_trial']:.3f} s/trial, fix-clamp {med['fix']:.3f} s, demo {med['demo']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
