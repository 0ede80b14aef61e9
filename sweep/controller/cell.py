"""The phases of an evaluation cell's run (runstate/phases.py `EVAL_PHASE_TABLE`; docs/eval.md).

A cell's controller is the ordinary one (sweep/controller/pipeline.py: lease, heartbeat, signals,
interruptions, parks, attempts); only its phase functions are these, which call the cell's pieces
in sweep/eval/run.py:

- `cell_solve` (role solver): the cell's spend reservation (under the plan's max_spend_usd), a
  fresh workspace, the arm's solver session and its gate-feedback cycles. Its checkpoint holds what
  the sessions did, so a controller killed after it resumes at the final verifier and never runs
  the sessions again. A session that failed on its model endpoint (outage, throttle, a bad key or
  billing) parks the cell under the solver role's cooldown within the arm's key family
  (`solver-anthropic`; the role's own for a runtime without one), not counted as an attempt.
- `cell_verify`: the final verifier run on the repository the sessions left; its reward is the
  cell's. result.json is written, and the run ends.

A cell whose result.json exists has finished: either phase ends its run at once and runs nothing.
"""
from __future__ import annotations

import shutil
import time
from typing import NoReturn

from runstate.checkpoints import Checkpoint
from runstate.errors import ConfigError, ProviderError
from runstate.models import EndReason, Outcome, cooldown_key
from sweep.controller.context import AttemptFailed, Ctx, Ending, Park, clear_cooldown_after_success, provider_park
from sweep.providers.base import SandboxError


def _cell(ctx: Ctx):
    from sweep.eval.cells import load_eval
    frozen, manifest = load_eval(ctx.campaign.dir)
    cell = next((c for c in manifest.cells if c.cell_id == ctx.run_id), None)
    if cell is None:
        raise Ending(Outcome.blocked, EndReason.intake_failed, f"{ctx.run_id} is not a cell of the manifest")
    return frozen, manifest, cell


def _end(result) -> NoReturn:
    detail = f"reward {result.reward}" if result.reward is not None else "no reward"
    raise Ending(Outcome.verified, None, f"cell {result.cell_id} (arm {result.arm}): {detail}; {result.detail[:200]}")


def _if_finished(ctx: Ctx, frozen, manifest, cell) -> None:
    """A cell with its result (a controller killed after writing it): its Harbor trial written again,
    and the run ended, with nothing run again."""
    from sweep.eval.cells import read_result
    from sweep.eval.run import write_job_locked
    result = read_result(ctx.campaign.dir, cell.cell_id)
    if result is not None:
        write_job_locked(ctx.campaign.dir, frozen, manifest, cell=cell)
        _end(result)


def _ids(ctx: Ctx) -> dict:
    """What a remote sandbox of this cell is tagged with (its receipt names the job that made it)."""
    return {"campaign_id": ctx.campaign.file.campaign_id, "job_id": ctx.job_id, "attempt": ctx.record.attempts + 1}


def _provider_trouble(frozen, exc: SandboxError) -> Exception:
    """A remote provider's error in a cell's session or verifier run, never the arm's doing and so
    never scored: an outage or throttle parks the cell under the provider's cooldown, a config error
    parks it with the reason (as a generation run's, sweep/controller/phases.py `_provider_trouble`),
    anything else fails the attempt (the cell runs again, unscored)."""
    name = frozen.plan.provider
    park = provider_park("solver", name, error_class=exc.error_class, detail=str(exc)[:300])
    if park is not None:
        return park
    if exc.error_class == "config":
        return Park("solver", "outage", f"configuration error: {name}: {str(exc)[:300]}", provider=name)
    return AttemptFailed(f"{name} during cell: {str(exc)[:300]}")


def cell_solve(ctx: Ctx) -> tuple[str, Checkpoint]:
    from sweep.eval import run
    out = ctx.campaign.dir
    frozen, manifest, cell = _cell(ctx)
    _if_finished(ctx, frozen, manifest, cell)
    started = time.time()
    stopped, rid = run.reserve(out, frozen, cell)
    if stopped:
        raise Ending(Outcome.blocked, EndReason.budget_exhausted, stopped, cause="budget")
    try:
        prepared = run.start_cell(out, frozen, cell, started, _ids(ctx))
    except SandboxError as exc:
        run.settle(out, frozen, cell, rid, 0.0)
        raise _provider_trouble(frozen, exc) from None
    except ConfigError as exc:          # the provider's settings, or the task's environment/Dockerfile
        run.settle(out, frozen, cell, rid, 0.0)
        raise Park("solver", "outage", f"configuration error: {exc}", provider=frozen.plan.provider) from None
    if not isinstance(prepared, run._Ctx):        # the task changed: that is the cell's result
        run.finish_cell(out, frozen, manifest, cell, prepared, rid)
        _end(prepared)
    ctx.event("session_started", phase=ctx.record.phase, detail=f"cell {cell.cell_id}: arm {cell.arm}")
    # the cooldown an endpoint failure stamps: the solver role's within the arm's key family (the
    # record's, written at init), so an outage of one family's endpoint holds only its arms' cells
    cooldown = cooldown_key("solver", ctx.record.key_family)
    try:
        solved = run.solve_cell(prepared)
    except SandboxError as exc:
        # the remote provider's trouble: the cell is not scored, and runs again from a fresh workspace
        run.settle(out, frozen, cell, rid, None if not exc.nothing_ran else 0.0)
        shutil.rmtree(out / "cells" / cell.cell_id / "work", ignore_errors=True)
        raise _provider_trouble(frozen, exc) from None
    except (ConfigError, ProviderError) as exc:
        # refused before it ran (bad runtime options, a runtime the manifest does not allow, no
        # sandbox): the solver role stops until a human fixes it, as a generation run's session does
        run.settle(out, frozen, cell, rid, 0.0)
        raise Park(cooldown, "outage", f"configuration error: {exc}") from None
    unscored = run.not_the_agents_fault(cell, solved)
    if unscored is not None:
        run.settle(out, frozen, cell, rid, solved.kw.get("cost_usd"))
        shutil.rmtree(out / "cells" / cell.cell_id / "work", ignore_errors=True)
        kind = solved.kw["failure_class"]
        raise Park(cooldown, kind if kind in ("outage", "throttle") else "outage", unscored)
    if solved.ok:
        clear_cooldown_after_success(ctx, cooldown)
    if not solved.ok:               # scored 0 without a verifier run
        result = run.verify_cell(prepared, frozen, cell, started, solved)
        run.finish_cell(out, frozen, manifest, cell, result, rid)
        _end(result)
    return "cell_verify", Checkpoint.model_validate({"sessions": solved.kw, "ok": solved.ok, "started_at": started,
                                                     "spend_id": rid})


def cell_verify(ctx: Ctx) -> tuple[str, Checkpoint]:
    from sweep.eval import run
    out = ctx.campaign.dir
    frozen, manifest, cell = _cell(ctx)
    _if_finished(ctx, frozen, manifest, cell)
    cp = ctx.record.checkpoints.get("cell_solve") or {}
    if not (out / "cells" / cell.cell_id / "work" / "ws" / "repo").is_dir() or "sessions" not in cp:
        # the workspace the sessions left is gone: the cell is solved again from a fresh one
        return "cell_solve", Checkpoint.model_validate({"workspace_lost": True})
    solved = run.Solved(dict(cp["sessions"]), bool(cp.get("ok", True)), "")
    try:
        result = run.verify_cell(run.cell_context(out, frozen, cell, _ids(ctx)), frozen, cell, float(cp["started_at"]),
                                 solved)
    except SandboxError as exc:      # the verifier's sandbox: the sessions' work is kept, the verifier runs again
        raise _provider_trouble(frozen, exc) from None
    run.finish_cell(out, frozen, manifest, cell, result, cp.get("spend_id"))
    _end(result)
