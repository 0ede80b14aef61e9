"""`sweep eval run`: the cells without a result, in manifest order, one at a time (docs/eval.md).

One cell: its task checked against the digest the manifest froze, a fresh workspace holding only
the task's starting repository (never its tests or solution), the arm's solver session in the
sandbox, with `gate_feedback = N` up to N verifier cycles whose failures go to a new session on the
same workspace, then sweep's verifier (the task's harness, sweep/harbor/trial.py) on the repository the
last session left, whose reward is the cell's. result.json is written last and atomically.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runstate.atomic import write_atomic
from runstate.errors import StateError
from sweep.eval.cells import (TRIAL_TIMEOUT_S, CellResult, Frozen, arm_family, arm_options, arm_spec, dump_json,
                              load_eval, read_result)
from sweep.eval import spend
from sweep.eval.harbor_job import write_job
from sweep.eval.manifest import Cell
from sweep.eval.plan import Arm

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


def run_pending(out: Path, *, limit: int | None = None) -> tuple[int, int, str | None]:
    """(cells run now, cells already done, why the runner stopped early or None). Stops after `limit`
    cells when given, before a cell whose envelope the plan's max_spend_usd cannot cover, and after a
    cell whose session failed on its model endpoint (left without a result)."""
    from sweep.credentials import register_known_secrets
    frozen, manifest = load_eval(out)
    register_known_secrets(frozen.plan)      # every text a session stores is scrubbed of them
    _check_secrets(out, frozen)
    lock = _take_lock(out)
    ran = done = 0
    stopped = None
    try:
        write_job(out, frozen, manifest)          # what a runner killed after a cell's result left out
        for cell in manifest.cells:
            if read_result(out, cell.cell_id) is not None:
                done += 1
                continue
            if limit is not None and ran >= limit:
                break
            stopped, rid = _reserve(out, frozen, cell)
            if stopped:
                break
            result = run_cell(out, frozen, cell)
            stopped = _not_the_agents_fault(result)
            if stopped is None:
                write_atomic(out / "cells" / cell.cell_id / "result.json", dump_json(result.model_dump(mode="json")))
            if rid is not None:
                envelope = _arm(frozen, cell).budget.max_usd or 0.0
                spend.settle(out, rid, envelope if result.cost_usd is None else result.cost_usd)
            if stopped is not None:
                shutil.rmtree(out / "cells" / cell.cell_id / "work", ignore_errors=True)
                break
            write_job(out, frozen, manifest, cell=cell)
            shutil.rmtree(out / "cells" / cell.cell_id / "work", ignore_errors=True)
            ran += 1
    finally:
        lock.unlink(missing_ok=True)
    return ran, done, stopped


def _check_secrets(out: Path, frozen: Frozen) -> None:
    """Every arm's secret readable now (its file still 0600 and yours, its variable set here), or a
    ConfigError naming the plan field before any cell starts or reserves anything."""
    from roles import load_manifest
    from sweep.credentials import session_secrets
    spec = load_manifest(out / "roles" / "solver.toml")
    for arm in frozen.plan.arms:
        family = arm_family(arm_spec(spec, arm), arm)
        if family is not None:
            session_secrets(frozen.plan, family)


UNSCORED = ("outage", "throttle", "config")


def _not_the_agents_fault(result: CellResult) -> str | None:
    """Why the cell gets no result now: its session failed on its model endpoint (down, throttled, a
    bad key or billing), which says nothing about the arm, so it is not scored 0; the runner stops
    and the next `sweep eval run` runs the cell again. None: the cell is scored."""
    if result.failure_class not in UNSCORED:
        return None
    return (f"cell {result.cell_id} (arm {result.arm}): its solver session failed on its model endpoint "
            f"({result.failure_class}): {result.detail[:300]}; the cell is not scored, and the next "
            "`sweep eval run` runs it again")


def _arm(frozen: Frozen, cell: Cell) -> Arm:
    return next(a for a in frozen.plan.arms if a.name == cell.arm)


def _reserve(out: Path, frozen: Frozen, cell: Cell) -> tuple[str | None, str | None]:
    """(why the cell may not start, the id of its reservation in the spend ledger): under the plan's
    max_spend_usd, an arm's cell reserves its whole max_usd envelope before it starts."""
    cap, envelope = frozen.plan.max_spend_usd, _arm(frozen, cell).budget.max_usd
    if cap is None or envelope is None:
        return None, None
    so_far = spend.spent(out)
    if so_far + envelope > cap + 1e-9:
        return (f"max_spend_usd {cap:g} reached: {so_far:.4f} USD spent or reserved, and cell {cell.cell_id} "
                f"(arm {cell.arm}) would reserve {envelope:g}"), None
    return None, spend.reserve(out, cell.cell_id, envelope)


def _ended(frozen: Frozen, cell: Cell, started: float, reward: float | None, detail: str, **kw) -> CellResult:
    arm = next(a for a in frozen.plan.arms if a.name == cell.arm)
    return CellResult(cell_id=cell.cell_id, task_id=cell.task_id, arm=cell.arm, repeat=cell.repeat, digest=cell.digest,
                      manifest_sha256=frozen.manifest_sha256, reward=reward, solved=reward == 1.0,
                      detail=detail[:500], runtime=arm.runtime, model=arm.model, wall_s=time.monotonic() - started,
                      ended_at=time.time(), **kw)


@dataclass
class _Ctx:
    """What a cell's sessions and verifier runs share."""
    cdir: Path
    task: Path
    arm: Arm
    spec: Any
    provider: Any
    limits: Any
    manifest_sha256: str
    base_prompt: str
    secrets: dict


def _session(ctx: _Ctx, n: int, kind: str, prompt: str, cost_limit: float | None) -> tuple[Any, float]:
    """One solver session in the cell's workspace, as sessions/NNNN-<kind>, which may spend `cost_limit`;
    (its result, when it started)."""
    from sweep.runtimes import SessionRequest, run_session
    req = SessionRequest(role=ctx.spec, manifest_sha256=ctx.manifest_sha256, runtime=ctx.arm.runtime,
                         runtime_options=arm_options(ctx.arm), workspace=ctx.cdir / "work" / "ws",
                         session_dir=ctx.cdir / "sessions" / f"{n:04d}-{kind}", prompt=prompt, inputs={},
                         limits=ctx.limits.for_role(ctx.spec.limits.overrides()).to_limits(),
                         cost_limit_usd=cost_limit, secrets=dict(ctx.secrets))
    started = time.time()
    return run_session(req, ctx.provider), started


def _verify(ctx: _Ctx, name: str) -> Any:
    """The task's verifier on a copy of the repository the sessions left (the workspace is untouched)."""
    from sweep.harbor.trial import bundle_harness, run_trial
    return run_trial(ctx.task, ctx.cdir / "work" / "ws" / "repo", provider=ctx.provider,
                     workdir=ctx.cdir / "work" / name, timeout_s=TRIAL_TIMEOUT_S, limits=ctx.limits.to_limits(),
                     harness=bundle_harness(ctx.task))


def feedback_prompt(base: str, cycle: int, trial: Any) -> str:
    """The next session's prompt: the task as before, then what the verifier reported (its failures)."""
    failing = sorted(t for t, status in (trial.results or {}).items() if status not in ("passed", "pass", "ok"))
    lines = [base, "", f"## Verifier feedback (cycle {cycle})", "",
             "The task's verifier ran on the repository as you left it, and it did not pass "
             f"(reward {0.0 if trial.reward is None else trial.reward:g}). It reported:", "", trial.detail.strip()]
    if failing:
        lines += ["", "Failing tests:"] + [f"- {t}" for t in failing[:50]]
    lines += ["", "Continue from the repository as it is now, and fix what fails."]
    return "\n".join(lines)


def _with_feedback(ctx: _Ctx, session: Any) -> tuple[Any, list[dict], list[Any]]:
    """Up to the arm's gate_feedback cycles: the verifier, and its failures handed to a new session
    on the same workspace; stops when a check passes or a session does not end ok.
    (the last session, the cycles' records, every session)."""
    cycles: list[dict] = []
    sessions = [session]
    for cycle in range(1, ctx.arm.gate_feedback + 1):
        if not session.ok:
            break
        check = _verify(ctx, f"feedback-{cycle}")
        record: dict[str, Any] = {"cycle": cycle, "reward": check.reward, "detail": check.detail[:500],
                                  "verifier_s": check.duration_s, "fed_back": check.reward != 1.0}
        cycles.append(record)
        if check.reward == 1.0:
            break               # nothing to feed back: the final run decides
        left = _envelope_left(ctx.arm.budget.max_usd, [s.cost_usd for s in sessions])
        if left is not None and left <= 0:
            record.update(fed_back=False, stopped="budget_spent")
            break
        session, started = _session(ctx, cycle + 1, "feedback", feedback_prompt(ctx.base_prompt, cycle, check), left)
        sessions.append(session)
        record.update(session_status=session.status, session_s=session.duration_s, session_started_at=started,
                      cost_usd=session.cost_usd, turns=session.turns)
    return session, cycles, sessions


def _envelope_left(max_usd: float | None, spent: list[float | None]) -> float | None:
    """What the cell's budget envelope (the arm's max_usd, over all its sessions) has left; a session
    whose cost is unknown counts as having spent the whole envelope. None: no envelope."""
    if max_usd is None:
        return None
    if any(c is None for c in spent):
        return 0.0
    return max_usd - sum(c for c in spent if c is not None)


def _total(values: list) -> Any:
    """A sum that stays unknown (None) when any part is."""
    return None if any(v is None for v in values) else sum(values)


def _provenance(sessions: list[Any]) -> dict[str, Any]:
    """What the runtimes reported of the sessions: the CLI's version, the model it says it ran, the
    token counts its stream gave (summed per kind), and the cost the wire relay metered (summed; None
    unless every session was metered)."""
    reports = [s.report or {} for s in sessions]
    metered = [r.get("metered_cost_usd") for r in reports]
    tokens: dict[str, int] = {}
    for usage in (r.get("usage") for r in reports):
        for key, n in (usage.items() if isinstance(usage, dict) else ()):
            if isinstance(n, int) and not isinstance(n, bool):
                tokens[key] = tokens.get(key, 0) + n
    return {"tokens": tokens or None,
            "cli_version": next((r["cli_version"] for r in reports if r.get("cli_version")), None),
            "model_reported": next((r["model"] for r in reports if r.get("model")), None),
            "metered_cost_usd": _total(metered) if all(isinstance(m, (int, float)) for m in metered) else None}


def run_cell(out: Path, frozen: Frozen, cell: Cell) -> CellResult:
    from roles import load_manifest
    from sweep.harbor import layout
    from sweep.harbor.digest import harbor_digest
    from sweep.providers import get_provider
    from sweep.credentials import session_secrets
    from sweep.tree import copy_tree
    started = time.monotonic()
    arm = next(a for a in frozen.plan.arms if a.name == cell.arm)
    task = Path(frozen.dataset_dir) / cell.task_id
    if not task.is_dir() or harbor_digest(task) != cell.digest:
        return _ended(frozen, cell, started, None, f"task {cell.task_id} is not the content the manifest froze "
                                                   f"({cell.digest}): the dataset changed")
    cdir = out / "cells" / cell.cell_id
    shutil.rmtree(cdir / "work", ignore_errors=True)          # what a killed runner left
    shutil.rmtree(cdir / "sessions", ignore_errors=True)
    copy_tree(task / layout.ENV_REPO, cdir / "work" / "ws" / "repo")
    spec = arm_spec(load_manifest(out / "roles" / "solver.toml"), arm)
    family = arm_family(spec, arm)
    instruction = (task / layout.INSTRUCTION).read_text(errors="replace")
    ctx = _Ctx(cdir, task, arm, spec, get_provider("local", isolation=frozen.plan.isolation), frozen.plan.limits,
               frozen.solver_manifest_sha256, instruction + (f"\n\n{arm.instructions}" if arm.instructions else ""),
               session_secrets(frozen.plan, family) if family is not None else {})
    first, session_started = _session(ctx, 1, "solver", ctx.base_prompt, arm.budget.max_usd)
    session, cycles, sessions = _with_feedback(ctx, first)
    kw = dict(session_status=session.status, failure_class=session.failure_class,
              cost_usd=_total([s.cost_usd for s in sessions]), turns=_total([s.turns for s in sessions]),
              session_s=sum(s.duration_s for s in sessions), session_started_at=session_started,
              sessions=len(sessions), feedback=cycles, **_provenance(sessions))
    if not session.ok:
        # the session ended without finishing (its bound, a crash): the task was not solved
        return _ended(frozen, cell, started, 0.0, f"solver session {session.status}: {session.reason or ''} "
                                                  f"{session.evidence[:200]}", **kw)
    trial_started = time.time()
    trial = _verify(ctx, "trial")           # the final run: its reward is the cell's, and it is fed back to no one
    reward = 0.0 if trial.reward is None else trial.reward
    return _ended(frozen, cell, started, reward, trial.detail, trial_s=trial.duration_s, trial_started_at=trial_started,
                  **kw)
