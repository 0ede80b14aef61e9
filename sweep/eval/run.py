"""`sweep eval run`: the cells without a result, in manifest order, one at a time (docs/eval.md).

One cell: its task checked against the digest the manifest froze, a fresh workspace holding only
the task's starting repository (never its tests or solution), the arm's solver session in the
sandbox, then sweep's verifier (the task's harness, sweep/harbor/trial.py) on the repository the
session left, whose reward is the cell's. result.json is written last and atomically.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from runstate.atomic import write_atomic
from runstate.errors import StateError
from sweep.eval.cells import TRIAL_TIMEOUT_S, CellResult, Frozen, dump_json, arm_options, load_eval, read_result
from sweep.eval.harbor_job import write_job
from sweep.eval.manifest import Cell

LOCK = "runner.lock"


def _take_lock(out: Path) -> Path:
    """runner.lock, O_EXCL with our pid; a lock whose holder is gone is taken over."""
    lock = out / LOCK
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or "0")
                os.kill(pid, 0)
            except (ValueError, ProcessLookupError, FileNotFoundError):
                lock.unlink(missing_ok=True)       # its holder died: a killed runner
                continue
            except PermissionError:
                pass
            raise StateError(f"another `sweep eval run` (pid {pid}) is running this evaluation", path=lock) from None
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return lock
    raise StateError("could not take the runner lock", path=lock)


def run_pending(out: Path, *, limit: int | None = None) -> tuple[int, int]:
    """(cells run now, cells already done). Stops after `limit` cells when given."""
    frozen, manifest = load_eval(out)
    lock = _take_lock(out)
    ran = done = 0
    try:
        write_job(out, frozen, manifest)          # what a runner killed after a cell's result left out
        for cell in manifest.cells:
            if read_result(out, cell.cell_id) is not None:
                done += 1
                continue
            if limit is not None and ran >= limit:
                break
            result = run_cell(out, frozen, cell)
            write_atomic(out / "cells" / cell.cell_id / "result.json", dump_json(result.model_dump(mode="json")))
            write_job(out, frozen, manifest, cell=cell)
            shutil.rmtree(out / "cells" / cell.cell_id / "work", ignore_errors=True)
            ran += 1
    finally:
        lock.unlink(missing_ok=True)
    return ran, done


def _ended(frozen: Frozen, cell: Cell, started: float, reward: float | None, detail: str, **kw) -> CellResult:
    arm = next(a for a in frozen.plan.arms if a.name == cell.arm)
    return CellResult(cell_id=cell.cell_id, task_id=cell.task_id, arm=cell.arm, repeat=cell.repeat, digest=cell.digest,
                      manifest_sha256=frozen.manifest_sha256, reward=reward, solved=reward == 1.0,
                      detail=detail[:500], runtime=arm.runtime, model=arm.model, wall_s=time.monotonic() - started,
                      ended_at=time.time(), **kw)


def run_cell(out: Path, frozen: Frozen, cell: Cell) -> CellResult:
    from roles import load_manifest
    from sweep.harbor import layout
    from sweep.harbor.digest import harbor_digest
    from sweep.harbor.trial import bundle_harness, run_trial
    from sweep.providers import get_provider
    from sweep.runtimes import SessionRequest, run_session
    from sweep.tree import copy_tree
    started = time.monotonic()
    arm = next(a for a in frozen.plan.arms if a.name == cell.arm)
    task = Path(frozen.dataset_dir) / cell.task_id
    if not task.is_dir() or harbor_digest(task) != cell.digest:
        return _ended(frozen, cell, started, None, f"task {cell.task_id} is not the content the manifest froze "
                                                   f"({cell.digest}): the dataset changed")
    cdir = out / "cells" / cell.cell_id
    work = cdir / "work"
    shutil.rmtree(work, ignore_errors=True)          # what a killed runner left
    shutil.rmtree(cdir / "sessions", ignore_errors=True)
    copy_tree(task / layout.ENV_REPO, work / "ws" / "repo")
    spec = load_manifest(out / "roles" / "solver.toml")
    spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={
        "walltime_s": arm.budget.wall_s, "max_turns": arm.budget.max_turns, "cost_cap_usd": arm.budget.max_usd})})
    instruction = (task / layout.INSTRUCTION).read_text(errors="replace")
    prompt = instruction + (f"\n\n{arm.instructions}" if arm.instructions else "")
    limits = frozen.plan.limits
    provider = get_provider("local", isolation=frozen.plan.isolation)
    req = SessionRequest(role=spec, manifest_sha256=frozen.solver_manifest_sha256, runtime=arm.runtime,
                         runtime_options=arm_options(arm), workspace=work / "ws", session_dir=cdir / "sessions" / "0001-solver",
                         prompt=prompt, inputs={}, limits=limits.for_role(spec.limits.overrides()).to_limits(),
                         cost_limit_usd=arm.budget.max_usd)
    session_started = time.time()
    session = run_session(req, provider)
    kw = dict(session_status=session.status, failure_class=session.failure_class, cost_usd=session.cost_usd,
              turns=session.turns, session_s=session.duration_s, session_started_at=session_started)
    if not session.ok:
        # the session ended without finishing (its bound, a crash): the task was not solved
        return _ended(frozen, cell, started, 0.0, f"solver session {session.status}: {session.reason or ''} "
                                                  f"{session.evidence[:200]}", **kw)
    trial_started = time.time()
    trial = run_trial(task, work / "ws" / "repo", provider=provider, workdir=work / "trial", timeout_s=TRIAL_TIMEOUT_S,
                      limits=limits.to_limits(), harness=bundle_harness(task))
    reward = 0.0 if trial.reward is None else trial.reward
    return _ended(frozen, cell, started, reward, trial.detail, trial_s=trial.duration_s, trial_started_at=trial_started, **kw)
