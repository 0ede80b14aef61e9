"""One trial of a task: a starting repository, a solution, the verifier, a reward.

`run_trial` copies the bundle's `environment/repo` (or a solver's finished repository) into a
fresh working directory, applies the solution, runs `tests/test.sh` and scores the run, as Harbor
would inside the task image, but on this host's toolchain (environment_fidelity="host"; see
docs/tasks.md). Both scripts run through the provider with the network off and only the trial's
`repo/` and `logs/` writable, so neither a solution nor a test can touch the bundle.

With a `harness` (every trial the controller runs: sweep/harbor/harness.py) the script is sweep's
whatever the bundle holds, a solver's planted test files are gone before it runs, and the reward
is computed here from what the runner printed (captured by the provider outside the writable
paths, in `observed/`) and reported, the recorded ids and the exit status: reward.txt and
reward.json, which the tests could write, are not read. A caller that gives none gets the harness
the bundle names (`bundle_harness`); only a bundle that is not in sweep's layout has its verifier's
own reward file read.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path

from runstate.errors import SweepError
from sweep.harbor import layout
from sweep.harbor.bundle import validate_bundle
from sweep.harbor.harness import Harness
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
    results: dict[str, str] | None = None    # the runner's per-test results (with a harness)
    results_problem: str | None = None       # why there are none
    # the signal (TERM, KILL, INT, HUP) that ended solve.sh or test.sh, or the runner under it,
    # that sweep did not send (not the trial's timeout, a bound, a stop): the job's scancel or a
    # node's shutdown reaching the trial before the controller. Says nothing about the task.
    killed_by: int | None = None


# the signals a job's end (scancel, a node's shutdown, a ^C) sends; a test's own crash (SEGV, ABRT)
# is none of these and stays the test's verdict
OUTSIDE_KILLS = frozenset({signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP})


def outside_kill(outcome) -> int | None:
    """The outside signal that ended a script's run, or None. Death by the signal itself (no
    sandbox), or the 128+N exit a shell or bwrap reports for a child that died by it; never when
    sweep ended the run itself: its timeout, a bound it enforced, a stop of its own."""
    if outcome.launch_error or outcome.timed_out or getattr(outcome, "stopped", None) or _bound(outcome):
        return None
    sig = outcome.signal
    if sig is None and outcome.rc is not None and 128 < outcome.rc <= 128 + 64:
        sig = outcome.rc - 128
    return sig if sig in OUTSIDE_KILLS else None


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
              timeout_s: float, env: dict[str, str] | None = None, limits: Limits | None = None,
              harness: Harness | None = None) -> TrialResult:
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

    def result(reward: float | None, detail: str, results: dict[str, str] | None = None,
               problem: str | None = None) -> TrialResult:
        return TrialResult(reward=reward, ok=reward is not None, detail=detail[:DETAIL_LIMIT],
                           duration_s=time.monotonic() - started, solution=kind,
                           environment_fidelity=getattr(provider, "environment_fidelity", "host"),
                           isolation=getattr(provider, "isolation", ""), workdir=str(work),
                           results=results, results_problem=problem)

    _check_env(env)
    problems = validate_bundle(bundle)
    if problems:
        return result(None, "invalid bundle: " + "; ".join(problems[:5]))
    harness = harness or bundle_harness(bundle)
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
    observed = _prepare(bundle, work, harness, kind)
    agent_timeout, verifier_timeout = task_timeouts(bundle)
    env = {**(env or {}), "REPO_DIR": str(repo), "LOGS_DIR": str(logs)}
    deadline = started + timeout_s

    def run(script: Path, name: str, own_timeout: float | None, out_dir: Path | None = None):
        left = max(1.0, deadline - time.monotonic())
        out = (out_dir / Path(name).name) if out_dir is not None else logs / name
        # the fixed view of a task container (layout.py): nothing of the host's paths is shown
        return provider.run(ExecSpec(
            argv=["bash", str(script)], cwd=repo, timeout_s=min(left, own_timeout or left),
            write_paths=(repo, logs), read_paths=tuple(p for p in (work / "tests", work / "solution") if p.exists()),
            network="none", env=env, limits=limits, view=trial_view(work),
            stdout_path=out.with_name(out.name + ".stdout"), stderr_path=out.with_name(out.name + ".stderr")))

    if kind == "reference":
        copy_tree(bundle / layout.SOLUTION, work / "solution")
        solved = run(work / layout.SOLVE_SH, "agent/solve", agent_timeout)
        if solved.launch_error or solved.timed_out or solved.rc != 0 or _bound(solved):
            why = (solved.launch_error or ("timed out" if solved.timed_out else f"exited {solved.rc}")) + _bound(solved)
            return replace(result(None, f"solution/solve.sh {why}: {_tail(solved.stderr_tail or solved.stdout_tail)}"),
                           killed_by=outside_kill(solved))
        if harness is not None:
            shutil.rmtree(work / "solution")      # the tests cannot tell the reference run by it
    tested = run(work / layout.TEST_SH, "verifier/test", verifier_timeout, observed if harness else None)
    return replace(_verdict(tested, harness, work, limits, result, logs, provider), killed_by=outside_kill(tested))


def _verdict(tested, harness: Harness | None, work: Path, limits: Limits, result, logs: Path,
             provider: Provider) -> TrialResult:
    """The trial's result from test.sh's run."""
    if tested.launch_error or tested.timed_out or _bound(tested):
        why = (tested.launch_error or ("timed out" if tested.timed_out else f"exited {tested.rc}")) + _bound(tested)
        return result(None, f"tests/test.sh {why}")
    if harness is not None:
        return _scored(harness, work, tested.rc, limits, result, _tail(tested.stdout_tail), provider)
    reward, why = read_reward(logs)
    if reward is None:
        return result(None, f"tests/test.sh exited {tested.rc}; {why}: {_tail(tested.stderr_tail)}")
    return result(reward, f"reward {reward:g} (tests/test.sh exited {tested.rc}): {_tail(tested.stdout_tail)}")


def trial_view(work: Path) -> tuple[tuple[Path, str], ...]:
    """Where a trial's sandbox shows its parts: the paths of a Harbor task container (the
    Dockerfile's WORKDIR /app, /tests, /solution, /logs), whatever the campaign's path."""
    return ((work / "repo", "/app"), (work / "tests", "/tests"), (work / "solution", "/solution"),
            (work / "logs", "/logs"))


def _bound(outcome) -> str:
    hit = getattr(outcome, "limit_hit", None)
    return f" (hit its {hit} bound)" if hit else ""


def _check_env(env: dict[str, str] | None) -> None:
    for name, value in (env or {}).items():
        if not (isinstance(name, str) and _ENV_NAME_RE.match(name) and isinstance(value, str)):
            raise SweepError(f"trial environment variable {name!r} is not NAME=string")
        if name in _RESERVED_ENV:
            raise SweepError(f"a trial's environment may not set {name}")


def _prepare(bundle: Path, work: Path, harness: Harness | None, kind: str) -> Path:
    """sweep's harness over the trial's tests/, a solver's test tree put back, the log and capture
    directories; returns where the provider captures test.sh's output (not shown inside the sandbox)."""
    if harness is not None:
        from sweep.harbor.harness import install, restore_test_tree
        install(work / "tests", harness)          # sweep's verifier runs, whatever the bundle's says
        if kind == "path":
            restore_test_tree(work / "repo", bundle / layout.ENV_REPO)
    (work / "observed").mkdir()
    (work / "logs" / "verifier").mkdir(parents=True)
    (work / "logs" / "agent").mkdir()
    return work / "observed"


def bundle_harness(bundle: Path) -> Harness | None:
    """The harness a bundle in sweep's layout names itself (its test command, runner.txt,
    test_workdir.txt and, in an export, test_ids.txt), for a caller that gives none; the controller always gives the plan's.
    None: not sweep's layout."""
    from sweep.harbor.harness import RUNNER_FILE, TEST_IDS, resolve
    from sweep.harbor.runners import UnknownRunner
    try:
        argv = (bundle / layout.TEST_COMMAND).read_text(encoding="utf-8").splitlines()
        name = (bundle / RUNNER_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    workdir_file = bundle / layout.TEST_WORKDIR
    workdir = None
    if workdir_file.is_file() and not workdir_file.is_symlink():
        workdir = workdir_file.read_text(encoding="utf-8", errors="replace").strip() or None
    try:
        harness = resolve(argv, name or None, workdir)
    except (UnknownRunner, ValueError):
        return None
    ids = bundle / TEST_IDS
    if ids.is_file() and not ids.is_symlink():
        harness = harness.selecting(ids.read_text(encoding="utf-8", errors="replace").splitlines())
    return harness


def _scored(harness: Harness, work: Path, rc: int | None, limits: Limits, result, tail: str,
            provider: Provider) -> TrialResult:
    """The reward from what the harness observed: the captured output, the report directory, the exit."""
    from sweep.harbor.harness import REPORT_RELDIR, read_reports, score
    from sweep.harbor.runners import Observed
    from sweep.harbor.runners.base import MAX_OUTPUT_BYTES
    transcript = work / "observed" / "test.stdout"
    try:
        with open(transcript, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - MAX_OUTPUT_BYTES))
            output = fh.read(MAX_OUTPUT_BYTES)
        # the human copy of the output, next to the logs as before (written here, after the run)
        shutil.copyfile(transcript, work / "logs" / "verifier" / "test-output.txt")
    except OSError:
        output = b""
    shown = getattr(provider, "sandbox_path_of", None)
    repo_dir = shown(trial_view(work), work / "repo") if shown is not None else str(work / "repo")
    observed = Observed(output=output, reports=read_reports(work / "logs" / REPORT_RELDIR), repo_dir=repo_dir)
    scored = score(harness, observed, rc, file_bytes=limits.file_bytes)
    shown = "none" if scored.reward is None else format(scored.reward, "g")
    return result(scored.reward, f"reward {shown} ({scored.detail[:200]}): {tail}", scored.results, scored.problem)
