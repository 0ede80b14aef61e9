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


def tick_until_done(campaign: Path, *, env: dict | None = None, timeout: float = 120,
                    on_tick=None, pause: float = 0.3) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sweep("tick", "--campaign", str(campaign), env=env)
        st = status_json(campaign, env=env)
        if on_tick:
            on_tick(st)
        if st["counts"]["queued"] == 0 and st["counts"]["active"] == 0:
            return st
        time.sleep(pause)
    raise AssertionError(f"campaign did not finish in {timeout}s: {status_json(campaign, env=env)}")


def give_role_the_openai_family(campaign: Path, role: str) -> None:
    """The operator gives a role OpenAI's key family, so codex can play it (the campaign's copy of
    the manifest decides what a session sees)."""
    manifest = Path(campaign) / "roles" / f"{role}.toml"
    manifest.write_text(manifest.read_text().replace('key_family = "anthropic"', 'key_family = "openai"'))
