"""`sweep demo`: a whole campaign on this machine, in about a minute.

Builds a small panel of real git repositories (sweep/harbor/samples.py), writes a plan for the
local scheduler backend with the deterministic oracle runtimes, runs `sweep init`, then runs ticks
until every run that can end has ended, printing progress, and shows the status table.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from runstate.models import RunState
from runstate.runs import list_runs

PANEL = [
    # (run id, sample kind, gpus, what the demo shows)
    ("fix-clamp", "verified", 0, "a bug fix with a test: becomes a verified task"),
    ("no-tests", "no_tests", 0, "a PR without tests: blocked (construction_failed)"),
    ("passes-before", "passes_before", 0, "its test already passes before the fix: not verified"),
    ("flaky-test", "flaky", 0, "its test is flaky: the repeat gate refuses it"),
    ("gpu-kernel", "verified", 1, "needs a GPU: held on a machine without one"),
]


def build_panel(root: Path, *, scheduler: dict | None = None, isolation: str = "bwrap") -> Path:
    """Sample repositories + plan.toml under `root`; returns the plan path (reused if present).

    `scheduler` replaces the plan's `[scheduler]` table (default: the local backend), e.g. to run
    the same panel through sbatch: {"backend": "slurm", "lanes": {...}}.
    """
    from sweep.harbor.samples import make_pr_repo
    from sweep.tomlw import dumps
    root = Path(root).resolve()
    plan_path = root / "plan.toml"
    if plan_path.exists():
        return plan_path
    repos = root / "repos"
    repos.mkdir(parents=True, exist_ok=True)
    candidates = []
    for run_id, kind, gpus, _ in PANEL:
        src = make_pr_repo(repos, kind, name=run_id)
        options = {"test_command": src["test_command"]}
        if gpus:
            options["gpus"] = gpus
        candidates.append({"id": run_id, "repo": src["repo"], "base": src["base"], "head": src["head"],
                           "title": src["title"], "body": src["body"], "options": options})
    plan = {"name": "demo", "target_verified": 10, "max_parallel": 2, "max_gpu_parallel": 1,
            "max_attempts": 2,
            "defaults": {"provider": "local", "quality": {"max_repairs": 1, "gate_repeats": 2}},
            "scheduler": scheduler or {"backend": "local"},
            "tick": {"interval_minutes": 1},
            "isolation": isolation,
            "candidates": candidates}
    plan_path.write_text("# The demo campaign's plan (written by `sweep demo`).\n" + dumps(plan))
    return plan_path


def stuck_forever(rec) -> bool:
    """A queued run that no tick on this machine can admit (e.g. it needs more GPUs than exist)."""
    return rec.state is RunState.queued and bool(rec.hold_reason) and rec.hold_reason.startswith("needs ")


def demo_isolation() -> tuple[str, str]:
    """("bwrap", "") where the sandbox works here; else ("none", why). The demo's PRs are sweep's own
    sample repositories, so on a machine without bubblewrap the demo writes `isolation = "none"`
    into its own plan (every report then says so) instead of refusing to show anything."""
    from sweep.providers.local.bwrap import probe_bwrap
    exe, why = probe_bwrap()
    return ("bwrap", "") if exe else ("none", why)


def run_demo(root: Path, *, echo: Callable[[str], None] = print, timeout_s: float = 180,
             pause_s: float = 0.5, isolation: str = "bwrap") -> Path:
    from sweep import textsafe
    from sweep.campaign import init_campaign
    from sweep.tick import run_tick
    raw_echo = echo

    def echo(text: str) -> None:  # type: ignore[no-redef]  # progress lines carry tick errors: escaped
        raw_echo(textsafe.line(text))

    root = Path(root).resolve()
    plan_path = build_panel(root, isolation=isolation)
    campaign = root / "campaign"
    result = init_campaign(plan_path, campaign)
    echo(f"panel: {len(PANEL)} pull requests in real git repositories under {root / 'repos'}")
    for run_id, _, _, what in PANEL:
        echo(f"  {run_id:<14} {what}")
    echo(f"campaign {'created' if result.created else 'reused'} at {campaign} (local backend, oracle runtimes)")
    started = time.monotonic()
    last = None
    while True:
        outcome = run_tick(campaign)
        listing = list_runs(campaign)
        counts: dict[str, int] = {}
        for rec in listing.records.values():
            key = rec.outcome.value if rec.outcome else rec.state.value
            counts[key] = counts.get(key, 0) + 1
        held = [r for r in listing.records.values() if stuck_forever(r)]
        line = " · ".join(f"{k} {counts.get(k, 0)}" for k in
                          ("queued", "active", "verified", "generated_unverified", "blocked"))
        if held:
            line += f"  (held: {', '.join(f'{r.run_id}: {r.hold_reason}' for r in held)})"
        if line != last:
            echo(f"[{time.monotonic() - started:5.1f}s] {line}")
            last = line
        if outcome.report and outcome.report.errors:
            for err in outcome.report.errors:
                echo(f"  tick error: {err}")
        endable = [r for r in listing.records.values() if r.state is not RunState.ended and not stuck_forever(r)]
        if not endable:
            break
        if time.monotonic() - started > timeout_s:
            echo(f"stopping after {timeout_s:.0f}s with {len(endable)} runs unfinished")
            break
        time.sleep(pause_s)
    echo(f"done in {time.monotonic() - started:.1f}s")
    return campaign
