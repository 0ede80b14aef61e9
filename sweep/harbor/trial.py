"""One trial of a task: a starting repository, a solution, the verifier, a reward.

`run_trial` copies the bundle's `environment/repo` (or a solver's finished repository) into a
fresh working directory, applies the solution, runs `tests/test.sh` and reads the reward, exactly
as Harbor would inside the task image, but on this host's toolchain (environment_fidelity="host";
see docs/tasks.md). Both scripts run through the provider with the network off and only the
trial's `repo/` and `logs/` writable, so neither a solution nor a test can touch the bundle.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from runstate.errors import SweepError
from sweep.harbor import layout
from sweep.harbor.bundle import validate_bundle
from sweep.execution import DEFAULT_LIMITS, ExecSpec, Limits, Provider
from sweep.tree import UnsafeTree, copy_tree

DETAIL_LIMIT = 500
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# what the trial or the provider sets itself: a caller's env must not redirect them
_RESERVED_ENV = {"REPO_DIR", "LOGS_DIR", "PATH", "HOME", "TMPDIR", "LANG", "LD_PRELOAD", "LD_LIBRARY_PATH"}


@dataclass
class TrialResult:
    reward: float | None          # None: the trial produced no reward (broken solution or verifier)
    ok: bool                      # the trial ran to a reward
    detail: str
    duration_s: float
    solution: str = ""            # "reference" | "empty" | "path"
    environment_fidelity: str = "host"
    isolation: str = ""
    workdir: str = ""


def read_reward(logs_dir: Path) -> tuple[float | None, str]:
    """The verifier's reward from reward.txt (a number) or reward.json ({"reward": number})."""
    txt = logs_dir / layout.REWARD_RELPATH
    js = logs_dir / layout.REWARD_JSON_RELPATH
    try:
        if txt.is_file():
            return float(txt.read_text().strip()), ""
        if js.is_file():
            value = json.loads(js.read_text())
            value = value.get("reward") if isinstance(value, dict) else value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value), ""
            return None, "reward.json has no numeric reward"
    except (OSError, ValueError) as exc:
        return None, f"unreadable reward: {exc}"
    return None, "the verifier wrote no reward"


def _tail(text: str) -> str:
    text = text.strip()
    return text[-DETAIL_LIMIT:]


def task_timeouts(bundle: Path) -> tuple[float | None, float | None]:
    """(agent timeout_sec, verifier timeout_sec) from task.toml; None where it sets none."""
    import tomllib
    try:
        data = tomllib.loads((bundle / layout.TASK_TOML).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None, None
    out: list[float | None] = []
    for section in ("agent", "verifier"):
        value = data.get(section, {}).get("timeout_sec") if isinstance(data.get(section), dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            out.append(float(value))
        else:
            out.append(None)
    return out[0], out[1]


def run_trial(bundle_dir: str | Path, solution: str | Path, *, provider: Provider, workdir: str | Path,
              timeout_s: float, env: dict[str, str] | None = None, limits: Limits | None = None) -> TrialResult:
    """Run `solution` ("reference", "empty" or a repository Path) against the bundle's tests.

    `env` adds variables to the scripts' environment (which is otherwise built from nothing but
    REPO_DIR, LOGS_DIR and the provider's basics), e.g. the gates' fixed PYTHONHASHSEED per repeat.
    It cannot set REPO_DIR, LOGS_DIR or what the provider builds (PATH, HOME, TMPDIR, LANG).
    `timeout_s` caps the whole trial; within it solve.sh gets the task's agent.timeout_sec and
    test.sh its verifier.timeout_sec (task.toml). `limits` bounds each script (memory, processes,
    file size, writable bytes, transcript); a repository holding a FIFO, device or socket, or more
    bytes than the bound, is refused before anything runs (a trial result, never an exception).
    """
    started = time.monotonic()
    bundle = Path(bundle_dir).resolve()
    work = Path(workdir)
    kind = solution if isinstance(solution, str) else "path"
    if kind not in ("reference", "empty", "path"):
        raise SweepError(f"unknown solution {solution!r}: use 'reference', 'empty' or a Path")

    def result(reward: float | None, detail: str) -> TrialResult:
        return TrialResult(reward=reward, ok=reward is not None, detail=detail[:DETAIL_LIMIT],
                           duration_s=time.monotonic() - started, solution=kind,
                           environment_fidelity=getattr(provider, "environment_fidelity", "host"),
                           isolation=getattr(provider, "isolation", ""), workdir=str(work))

    for name, value in (env or {}).items():
        if not (isinstance(name, str) and _ENV_NAME_RE.match(name) and isinstance(value, str)):
            raise SweepError(f"trial environment variable {name!r} is not NAME=string")
        if name in _RESERVED_ENV:
            raise SweepError(f"a trial's environment may not set {name}")
    problems = validate_bundle(bundle)
    if problems:
        return result(None, "invalid bundle: " + "; ".join(problems[:5]))
    if work.exists() and any(work.iterdir()):
        raise SweepError("the trial workdir must be new or empty", path=work)
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    repo, logs = work / "repo", work / "logs"
    start_repo = bundle / layout.ENV_REPO if kind != "path" else Path(solution)
    if not start_repo.is_dir():
        return result(None, f"no repository to test at {start_repo}")
    limits = limits or DEFAULT_LIMITS
    try:
        copy_tree(start_repo, repo, max_bytes=limits.workspace_bytes)
        copy_tree(bundle / layout.TESTS, work / "tests")
    except UnsafeTree as exc:
        return result(None, f"refused to copy the repository to test: {exc}")
    agent_timeout, verifier_timeout = task_timeouts(bundle)
    (logs / "verifier").mkdir(parents=True)
    (logs / "agent").mkdir()
    env = {**(env or {}), "REPO_DIR": str(repo), "LOGS_DIR": str(logs)}
    deadline = started + timeout_s

    def run(script: Path, name: str, own_timeout: float | None):
        left = max(1.0, deadline - time.monotonic())
        return provider.run(ExecSpec(
            argv=["bash", str(script)], cwd=repo, timeout_s=min(left, own_timeout or left),
            write_paths=(repo, logs), read_paths=(work,), network="none", env=env, limits=limits,
            stdout_path=logs / f"{name}.stdout", stderr_path=logs / f"{name}.stderr"))

    def bound(outcome) -> str:
        hit = getattr(outcome, "limit_hit", None)
        return f" (hit its {hit} bound)" if hit else ""

    if kind == "reference":
        copy_tree(bundle / layout.SOLUTION, work / "solution")
        solved = run(work / layout.SOLVE_SH, "agent/solve", agent_timeout)
        if solved.launch_error or solved.timed_out or solved.rc != 0 or bound(solved):
            why = (solved.launch_error or ("timed out" if solved.timed_out else f"exited {solved.rc}")) + bound(solved)
            return result(None, f"solution/solve.sh {why}: {_tail(solved.stderr_tail or solved.stdout_tail)}")
    tested = run(work / layout.TEST_SH, "verifier/test", verifier_timeout)
    if tested.launch_error or tested.timed_out or bound(tested):
        why = (tested.launch_error or ("timed out" if tested.timed_out else f"exited {tested.rc}")) + bound(tested)
        return result(None, f"tests/test.sh {why}")
    reward, why = read_reward(logs)
    if reward is None:
        return result(None, f"tests/test.sh exited {tested.rc}; {why}: {_tail(tested.stderr_tail)}")
    return result(reward, f"reward {reward:g} (tests/test.sh exited {tested.rc}): {_tail(tested.stdout_tail)}")
