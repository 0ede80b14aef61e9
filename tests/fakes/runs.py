"""Test plumbing shared by the controller tests (not a fake): plans whose roles are played by the
fake agent, and ways to watch a run from its files and its local job without ticking.

Every wait is bounded and polls a condition; nothing sleeps for a fixed time.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

from runstate import load_record, run_dir

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tests" / "fakes" / "agent.py"


def agent_options(role: str, *extra: str) -> dict:
    """`command` runtime options that run tests/fakes/agent.py as `role`.

    The template passes {tools}, {max_turns} and {cost_cap_usd} because the shipped manifests
    restrict tools and cap turns and cost: a command that could not honour them is refused."""
    options = {"argv": [sys.executable, str(AGENT), role, "--workspace", "{workspace}", "--prompt", "{prompt_file}",
                        "--output", "{output_file}", "--tools", "{tools}", "--max-turns", "{max_turns}",
                        "--cost-cap", "{cost_cap_usd}", *extra]}
    # the sandbox shows only what is declared: the directories of `--mode-file=/var/tmp/x/mode` and
    # `--hold-while=...` (a directory, so that deleting the flag on the host shows inside)
    dirs = sorted({str(Path(e.split("=", 1)[1]).parent) for e in extra
                   if e.startswith("--") and "=/" in e})
    if dirs:
        options["read_paths"] = dirs
    return options


def local_plan(candidates: list[dict], *, defaults: dict | None = None, max_parallel: int = 2,
               max_attempts: int = 3, cpu_slots: int | None = None, **settings) -> dict:
    scheduler: dict = {"backend": "local"}
    if cpu_slots:
        scheduler["local"] = {"cpu_slots": cpu_slots}
    defaults = dict(defaults or {})
    # the fake solver changes nothing (its rollouts score 0): these plans say rollouts are evidence
    # only, unless a test's own quality table says otherwise (tests/test_quality_*.py do)
    quality = {"max_repairs": 0, "allow_unsolved": True, **defaults.pop("quality", {})}
    plan = {"name": "t", "target_verified": 100, "max_parallel": max_parallel, "max_attempts": max_attempts,
            "defaults": {"quality": quality, **defaults},
            "scheduler": scheduler, "tick": {"submit_grace_s": 0}, "candidates": candidates}
    plan.update(settings)
    return plan


def candidate(run_id: str, src: dict, **options) -> dict:
    return {"id": run_id, "repo": src["repo"], "base": src["base"], "head": src["head"],
            "options": {"test_command": src["test_command"], **options}}


def wait_until(what: str, check: Callable[[], object], timeout: float = 60, poll: float = 0.05):
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(poll)


def events(campaign: Path, run_id: str) -> list[dict]:
    path = run_dir(campaign, run_id) / "events.jsonl"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue            # a torn last line of a killed writer
    return out


def count(evs: list[dict], kind: str, phase: str | None = None) -> int:
    return sum(1 for e in evs if e["kind"] == kind and (phase is None or e.get("phase") == phase))


def record(campaign: Path, run_id: str):
    return load_record(run_dir(campaign, run_id)).value


def local_job(campaign: Path, job_id: str) -> dict | None:
    """The local backend's record of a job (argv, pid, ...), while the job is still listed."""
    try:
        return json.loads((campaign / "local-jobs" / "jobs" / f"{job_id}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def proc_state(pid: int) -> str | None:
    """The state letter of `pid` (R, S, Z, ...), or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()[0]


def gone(pid: int) -> bool:
    return proc_state(pid) in (None, "Z", "X")


def processes_with(marker: str) -> dict[int, int]:
    """pid -> process group of every live (non-zombie) process whose command line holds `marker`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if marker.encode() in cmdline and fields[0] not in ("Z", "X"):
            found[int(entry)] = int(fields[2])
    return found


def group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in process group `pgid`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def files_containing(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            try:
                if not path.is_symlink() and needle in path.read_bytes():
                    hits.append(path)
            except OSError:
                continue
    return hits


def processes_under(directory: Path) -> dict[int, str]:
    """pid -> cwd of every live (non-zombie) process working inside `directory` (the run's
    sessions and trials work in runs/<id>/work/...; seen from the host even inside bubblewrap)."""
    root = str(Path(directory).resolve())
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if (cwd == root or cwd.startswith(root + "/")) and not gone(int(entry)):
            found[int(entry)] = cwd
    return found
