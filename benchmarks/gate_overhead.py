#!/usr/bin/env python
"""What a gate trial costs over the bare test command, side by side on one bundle (issue 26, item 5).

1. The panel: `sweep demo DIR` (or `--demo DIR`, a demo already run) ends with a verified task
   bundle (`runs/fix-clamp/task`). The panel's gate phase time is read from every run's events
   (`phase_started` .. `phase_done` of phase `gates`, summed over the runs and their revisions),
   with the number of trials each gates phase ran (from its evidence: 2 x gate_repeats, plus the
   2 runs of the `selected` gate when FAIL_TO_PASS was recorded).
2. On that bundle, interleaved, `--repeats` times each:
   - a trial as the gates run it: `sweep.harbor.trial.run_trial(bundle, "reference" | "empty")`
     through the local provider (bwrap unless `--isolation none`), the bundle's own harness,
     PYTHONHASHSEED fixed, a fresh work directory each time; with the time of each sandboxed
     script (solve.sh, test.sh) and what is left (sweep's own work around them);
   - the bare test command (`tests/test_command.txt`) run with subprocess in a copy of the same
     repository with the PR's test files installed, and for "reference" the solution applied:
     the floor any verifier pays. Its program is the one the trial's sandbox resolves (`command -v`
     through the same provider): with a version manager's shims first on PATH (pyenv), the shell's
     `python3` is a shim that costs ~0.2 s a start, which the sandbox does not use;
   - with `--against CHECKOUT` (another checkout of sweep with its own `.venv`, e.g. round 1's:
     `git worktree add ../sweep-r1 47fdbf3`), the same trial by that checkout's code on the same
     bundle, alternating with this one's (a worker process of this script run by its venv).
   Prints median / min / max wall seconds of each, sweep's overhead per trial (trial - bare) and the
   issue's target for it: at most 0.3 s + 10 % of the bare command.

Usage (from the repository root, with the project's venv):
    .venv/bin/python benchmarks/gate_overhead.py                       # builds a demo in a temp dir
    .venv/bin/python benchmarks/gate_overhead.py --demo /var/tmp/demo --repeats 10 --isolation none
    .venv/bin/python benchmarks/gate_overhead.py --demo /var/tmp/demo --against ../sweep-r1
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
KINDS = ("reference", "empty")


def gate_phase_times(campaign: Path) -> list[tuple[str, float, int]]:
    """(run id, seconds in the gates phase, trials its gates ran) for every run that ran it."""
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
        trials = 0
        for evidence in events.parent.glob("evidence/gates-r*.json"):
            gates = json.loads(evidence.read_text()).get("gates", {})
            trials += sum(len(gates.get(kind, {}).get("rewards", [])) for kind in KINDS)
            trials += len(gates.get("selected", {}).get("rewards", []))
        if total:
            out.append((events.parent.name, total, trials))
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


def bare_argv(bundle: Path, provider) -> list[str]:
    """The bundle's test command with its program as the trial's sandbox resolves it."""
    from sweep.harbor import layout
    from sweep.readiness import resolve_program
    argv = [a for a in (bundle / layout.TEST_COMMAND).read_text().split("\n") if a]
    if "/" not in argv[0]:
        argv[0] = resolve_program(provider, argv[0], bundle) or argv[0]
    return argv


def time_bare(argv: list[str], repo: Path) -> float:
    t0 = time.monotonic()
    subprocess.run(argv, cwd=repo, capture_output=True, env={**os.environ, "PYTHONHASHSEED": "1"})
    return time.monotonic() - t0


def time_trial(bundle: Path, kind: str, provider, work: Path) -> tuple[float, float | None]:
    """One trial as the gates run it (round 1's run_trial had no harness nor limits argument)."""
    import inspect

    from sweep.harbor import trial as trial_mod
    extra = {}
    if "harness" in inspect.signature(trial_mod.run_trial).parameters:
        extra["harness"] = trial_mod.bundle_harness(bundle)
    t0 = time.monotonic()
    result = trial_mod.run_trial(bundle, kind, provider=provider, workdir=work, timeout_s=300,
                                 env={"PYTHONHASHSEED": "1"}, **extra)
    wall = time.monotonic() - t0
    shutil.rmtree(work, ignore_errors=True)
    return wall, result.reward


class TimedProvider:
    """The local provider, with the wall time of each run by script name (solve.sh, test.sh)."""

    def __init__(self, provider) -> None:
        self.inner = provider
        self.runs: dict[str, list[float]] = {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, spec):
        t0 = time.monotonic()
        try:
            return self.inner.run(spec)
        finally:
            self.runs.setdefault(Path(spec.argv[-1]).name, []).append(time.monotonic() - t0)


def worker(bundle: Path, isolation: str) -> int:
    """`--worker`: trials of this interpreter's sweep, one per KIND line on stdin, one JSON line each."""
    from sweep.providers.local import LocalProvider
    provider = LocalProvider(isolation=isolation)
    tmp = Path(tempfile.mkdtemp(prefix="gate-worker-", dir="/var/tmp"))
    print(json.dumps({"isolation": provider.isolation}), flush=True)
    for n, line in enumerate(sys.stdin):
        wall, reward = time_trial(bundle, line.strip(), provider, tmp / f"t{n}")
        print(json.dumps({"wall": wall, "reward": reward}), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def start_worker(checkout: Path, bundle: Path, isolation: str) -> subprocess.Popen:
    python = checkout / ".venv" / "bin" / "python"
    proc = subprocess.Popen([str(python), str(Path(__file__).resolve()), "--worker", str(bundle), isolation],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=checkout,
                            env={**os.environ, "PYTHONPATH": str(checkout)})
    assert proc.stdout is not None
    json.loads(proc.stdout.readline())
    return proc


def ask(proc: subprocess.Popen, kind: str) -> tuple[float, float | None]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(kind + "\n")
    proc.stdin.flush()
    got = json.loads(proc.stdout.readline())
    return got["wall"], got["reward"]


def stats(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.3f} {min(xs):7.3f} {max(xs):7.3f}"


def measure(bundle: Path, kind: str, args, provider, other, tmp: Path) -> list[str]:
    """Interleaved trials (this code's, the other checkout's) and bare runs of one kind; the report lines."""
    repo = bare_repo(bundle, tmp / f"bare-{kind}", kind == "reference")
    argv = bare_argv(bundle, provider.inner)
    provider.runs.clear()
    trials, bares, theirs, rewards = [], [], [], set()
    for i in range(args.repeats):          # interleaved: the load moves all alike
        wall, reward = time_trial(bundle, kind, provider, tmp / f"trial-{kind}-{i}")
        trials.append(wall)
        rewards.add(reward)
        bares.append(time_bare(argv, repo))
        if other is not None:
            wall, reward = ask(other, kind)
            theirs.append(wall)
            rewards.add(reward)
    overhead = [t - b for t, b in zip(trials, bares, strict=True)]
    target = 0.3 + 0.1 * statistics.median(bares)
    verdict = "meets" if statistics.median(overhead) <= target else "MISSES"
    lines = [f"{kind + ': trial':<28} {stats(trials)}   reward {sorted(rewards, key=str)}"]
    for script, walls in sorted(provider.runs.items()):
        lines.append(f"{'  of it: ' + script:<28} {stats(walls)}")
    scripts = [sum(w) / args.repeats for w in provider.runs.values()]
    lines.append(f"{'  of it: the rest (sweep)':<28} {statistics.median(trials) - sum(scripts):7.3f}   (median trial "
                 "- mean script runs)")
    lines.append(f"{kind + ': bare test command':<28} {stats(bares)}   ({' '.join(argv)})")
    lines.append(f"{kind + ': overhead':<28} {stats(overhead)}   target <= {target:.3f}: {verdict}")
    if theirs:
        lines.append(f"{kind + ': --against trial':<28} {stats(theirs)}   this / that (median) "
                     f"{statistics.median(trials) / statistics.median(theirs):.2f}")
    return lines


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        return worker(Path(sys.argv[2]), sys.argv[3])
    sys.path.insert(0, str(REPO))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", type=Path, help="a directory `sweep demo` already ran in")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--isolation", choices=("bwrap", "none"), default="bwrap")
    ap.add_argument("--against", type=Path, help="another checkout of sweep (with .venv) to time alternately")
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
    print(f"panel gate phase time: {sum(t for _, t, _ in phases):.2f} s over {len(phases)} runs, "
          f"{sum(n for _, _, n in phases)} trials: " + ", ".join(f"{rid} {t:.2f} s ({n})" for rid, t, n in phases))
    bundle = campaign / "runs" / "fix-clamp" / "task"
    from sweep.providers.local import LocalProvider
    provider = TimedProvider(LocalProvider(isolation=args.isolation))
    other = start_worker(args.against.resolve(), bundle, args.isolation) if args.against else None
    print(f"bundle {bundle}, isolation {args.isolation}, {args.repeats} repeats, "
          f"load average {os.getloadavg()[0]:.1f}" + (f", against {args.against}" if other else ""))
    print(f"{'':<28} {'median':>7} {'min':>7} {'max':>7}   (seconds)")
    for kind in KINDS:
        print("\n".join(measure(bundle, kind, args, provider, other, tmp)))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    if other is not None:
        assert other.stdin is not None
        other.stdin.close()
        other.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
