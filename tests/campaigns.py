"""Helpers that write plans and run the real CLI (`python -m sweep`) in subprocesses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAYLOAD = REPO / "tests" / "payload_controller.py"


def ctrl_c_default() -> None:
    """`preexec_fn` of a child a test sends SIGINT to. A shell that started this suite in the
    background (`cmd &`) made SIGINT ignored, an ignored signal survives exec, and Python started
    with SIGINT ignored never raises KeyboardInterrupt: the child would sleep through its Ctrl-C."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def payload_repo(n: int) -> str:
    """A real git repository with `main` and branches fix-0 .. fix-(n-1) (init checks that every
    candidate's repository and refs exist). One per test process, refs added as needed."""
    root = Path(tempfile.gettempdir()) / f"sweep-payload-repo-{os.getpid()}"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    if not (root / ".git").exists():
        root.mkdir(parents=True, exist_ok=True)
        for cmd in (["git", "init", "-q", "-b", "main"],
                    ["git", "commit", "-q", "--allow-empty", "-m", "payload base"]):
            subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True)
    sha = subprocess.run(["git", "rev-parse", "main"], cwd=root, env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    updates = "".join(f"update refs/heads/fix-{i} {sha}\n" for i in range(n))
    if updates:
        subprocess.run(["git", "update-ref", "--stdin"], cwd=root, env=env, check=True,
                       capture_output=True, input=updates.encode())
    return str(root)


def payload_plan(n: int, *, gpus: dict[int, int] | None = None, backend: str = "local",
                 target: int = 100, max_parallel: int = 2, max_gpu_parallel: int = 2,
                 max_attempts: int = 3, extra: dict | None = None, scheduler: dict | None = None,
                 tick: dict | None = None) -> dict:
    gpus = gpus or {}
    repo = payload_repo(n)
    cands = []
    for i in range(n):
        c = {"id": f"pr-{i:03d}", "repo": repo, "base": "main", "head": f"fix-{i}"}
        if gpus.get(i):
            c["options"] = {"gpus": gpus[i]}
        cands.append(c)
    plan = {"name": "t", "target_verified": target, "max_parallel": max_parallel,
            "max_gpu_parallel": max_gpu_parallel, "max_attempts": max_attempts, "candidates": cands,
            "scheduler": {"backend": backend, **(scheduler or {})},
            "tick": {"controller_command": [sys.executable, str(PAYLOAD)], "submit_grace_s": 0,
                     **(tick or {})}}
    plan.update(extra or {})
    return plan


def write_plan(path: Path, plan: dict) -> Path:
    path.write_text(json.dumps(plan))
    return path


def sweep(*args: str, env: dict | None = None, timeout: float = 120, check: bool = True,
          cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    r = subprocess.run([sys.executable, "-m", "sweep", *args], capture_output=True, text=True,
                       timeout=timeout, env=full_env, cwd=cwd or REPO, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError(f"sweep {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def status_json(campaign: Path, env: dict | None = None) -> dict:
    return json.loads(sweep("status", "--json", "--campaign", str(campaign), env=env).stdout)


def _tick_saw_nothing_left(campaign: Path) -> bool:
    """Whether the tick just run saw no run that is not ended (its tick.json counts: one file read
    instead of a `sweep status` process per poll)."""
    try:
        counts = json.loads((Path(campaign) / "tick.json").read_text())["counts"]
    except (OSError, ValueError, KeyError):
        return False
    return not any(n for key, n in counts.items() if key.split(":", 1)[0] in ("queued", "active"))


def _what_a_tick_acts_on(campaign: Path, seen: dict) -> tuple:
    """What a tick decides on that only another process changes: which runs hold a lease and
    which have ended. Read in this process (a stat per run, state.json parsed only when its mtime
    moved): a phase change inside a run is not a reason to tick."""
    leased, ended = [], []
    try:
        entries = sorted(os.scandir(Path(campaign) / "runs"), key=lambda e: e.name)
    except OSError:
        return ()
    for entry in entries:
        state_file = os.path.join(entry.path, "state.json")
        try:
            mtime = os.stat(state_file).st_mtime_ns
        except OSError:
            mtime = None
        if seen.get(state_file, (None,))[0] != mtime:
            try:
                state = json.loads(Path(state_file).read_text()).get("state")
            except (OSError, ValueError, AttributeError):
                state = None
            seen[state_file] = (mtime, state)
        if seen[state_file][1] == "ended":
            ended.append(entry.name)
        if os.path.lexists(os.path.join(entry.path, "lease.json")):
            leased.append(entry.name)
    return tuple(leased), tuple(ended)


def tick_until_done(campaign: Path, *, env: dict | None = None, timeout: float = 120,
                    on_tick=None, pause: float = 0.3, max_pause: float = 3.0) -> dict:
    """Tick until nothing is queued or active; the final `sweep status --json`.

    Between ticks it waits, watching the campaign's files from this process, until a run's lease
    appears or goes or a run ends (what the next tick acts on), at least `pause` and at most
    `max_pause` seconds (the bound covers what only time changes: a stale lease, a cooldown, a
    retry's backoff). Each tick is a Python process: polling at a fixed short interval cost more
    CPU than the campaigns themselves on a 2-core CI machine."""
    deadline = time.monotonic() + timeout
    seen: dict = {}
    while time.monotonic() < deadline:
        before = _what_a_tick_acts_on(campaign, seen)      # a change during the tick wakes the next one
        sweep("tick", "--campaign", str(campaign), env=env)
        if on_tick or _tick_saw_nothing_left(campaign):
            st = status_json(campaign, env=env)
            if on_tick:
                on_tick(st)
            if st["counts"]["queued"] == 0 and st["counts"]["active"] == 0:
                return st
        time.sleep(pause)
        wake = min(deadline, time.monotonic() + max_pause - pause)
        while time.monotonic() < wake and _what_a_tick_acts_on(campaign, seen) == before:
            time.sleep(0.1)
    raise AssertionError(f"campaign did not finish in {timeout}s: {status_json(campaign, env=env)}")


def demo_copy(tmp_path_factory, name: str = "demo") -> Path:
    """A copy of the demo (`sweep demo`: its repositories, plan and ended campaign) for tests that
    only read the campaign or change files inside their copy. The demo itself runs once per test
    session (xdist workers share the session's base directory, under a lock); each caller gets its
    own copy. Tests that re-run runs (retry, controllers) build their own demo: the runs' records
    name the original's paths."""
    import shutil

    from filelock import FileLock
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-demo"
    with FileLock(str(shared) + ".lock"):
        if not (shared / "built").exists():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            sweep("demo", str(shared / "demo"), timeout=300)
            (shared / "built").write_text("")
    dest = tmp_path_factory.mktemp(name) / "demo"
    shutil.copytree(shared / "demo", dest, symlinks=True)
    return dest
