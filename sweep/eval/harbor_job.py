"""An evaluation's cells as a Harbor job on disk, for Harbor's viewer (docs/eval.md, "Harbor's viewer").

    DIR/jobs/<name>/config.json                a Harbor JobConfig: one agent per arm, the dataset, n_attempts = repeats
    DIR/jobs/<name>/result.json                a Harbor JobResult: progress and per-arm stats (rewritten after each cell)
    DIR/jobs/<name>/<task>__<cell>/config.json a Harbor TrialConfig
    DIR/jobs/<name>/<task>__<cell>/result.json a Harbor TrialResult: reward, agent, timing, cost
    DIR/jobs/<name>/<task>__<cell>/verifier/reward.txt

`harbor view DIR/jobs` opens it. The documents follow the shapes of Harbor 0.26.0's pydantic
models (harbor.models.job.config / job.result / trial.config / trial.result), which sweep does not
import (Harbor needs a newer Python): tests/harbor_job_check.py loads them back with Harbor's own
models and viewer. They are derived from cells/<cell>/result.json, sweep's own record, and are
rewritten from it: a runner killed between the two leaves nothing the next one does not redo.
"""
from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runstate.atomic import write_atomic
from sweep.eval import stats
from sweep.eval.cells import CellResult, Frozen, dump_json, read_result
from sweep.eval.manifest import Cell, Manifest

JOBS = "jobs"
REWARD_KEY = "reward"


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _uuid(*parts: str) -> str:
    return str(uuid.UUID(hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]))


def job_dir(out: Path, frozen: Frozen) -> Path:
    return out / JOBS / frozen.plan.name


def trial_name(cell: Cell) -> str:
    """Harbor's `<task name[:32]>__<suffix>`, with the cell's id as the suffix."""
    return f"{cell.task_id[:32].rstrip('_-')}__{cell.cell_id}"


def _source(frozen: Frozen) -> str:
    return Path(frozen.dataset_dir).name


def _environment(frozen: Frozen) -> dict[str, Any]:
    # not a Harbor environment type: sweep's provider ran the session and the verifier (on a remote
    # one, in sandboxes from the task's image: sweep/providers/container.py)
    if frozen.plan.provider != "local":
        return {"import_path": f"sweep.providers.{frozen.plan.provider}", "kwargs": {"image": "the task's Dockerfile"}}
    return {"import_path": "sweep.providers.local", "kwargs": {"isolation": frozen.plan.isolation}}


def _agent(frozen: Frozen, arm_name: str) -> dict[str, Any]:
    arm = next(a for a in frozen.plan.arms if a.name == arm_name)
    return {"name": arm.name, "model_name": arm.model, "kwargs": {"runtime": arm.runtime}}


def job_config(out: Path, frozen: Frozen) -> dict[str, Any]:
    return {"job_name": frozen.plan.name, "jobs_dir": str(out / JOBS), "n_attempts": frozen.plan.repeats,
            "n_concurrent_trials": 1, "environment": _environment(frozen),
            "agents": [_agent(frozen, a.name) for a in frozen.plan.arms],
            "datasets": [{"path": frozen.dataset_dir}]}


def _exception(r: CellResult) -> dict[str, Any] | None:
    """Harbor's exception for a cell that did not end with a verified reward; the types are Harbor's
    own where it has one, so its policy table reads them as sweep does (a failed session scores 0)."""
    if r.reward is None:
        kind = "TaskChangedError"
    elif r.session_status not in (None, "ok"):
        kind = "AgentTimeoutError" if r.session_status == "timeout" else "NonZeroAgentExitCodeError"
    else:
        return None
    return {"exception_type": kind, "exception_message": r.detail, "exception_traceback": "",
            "occurred_at": _iso(r.ended_at)}


def _timing(start: float | None, seconds: float | None) -> dict[str, Any] | None:
    if start is None or seconds is None:
        return None
    return {"started_at": _iso(start), "finished_at": _iso(start + seconds)}


def _agent_timing(r: CellResult) -> dict[str, Any] | None:
    """Harbor's one agent phase: from the first session's start to the last session's end (the
    gate-feedback cycles' verifier runs fall inside it)."""
    fed = [f for f in r.feedback if f.get("session_started_at") is not None and f.get("session_s") is not None]
    if r.session_started_at is None or r.session_s is None:
        return None
    end = fed[-1]["session_started_at"] + fed[-1]["session_s"] if fed else r.session_started_at + r.session_s
    return {"started_at": _iso(r.session_started_at), "finished_at": _iso(end)}


def harbor_tokens(tokens: dict[str, int] | None) -> dict[str, int]:
    """The CLI's token counts as Harbor's AgentContext totals (n_input_tokens includes the cached
    ones): claude counts cache reads and writes apart from input_tokens, codex's input_tokens
    already includes its cached_input_tokens. Nothing when the runtime counted none."""
    if not tokens:
        return {}
    cache = tokens.get("cache_read_input_tokens", tokens.get("cached_input_tokens", 0))
    extra = tokens.get("cache_read_input_tokens", 0) + tokens.get("cache_creation_input_tokens", 0)
    return {"n_input_tokens": tokens.get("input_tokens", 0) + extra, "n_cache_tokens": cache,
            "n_output_tokens": tokens.get("output_tokens", 0)}


def trial_result(out: Path, frozen: Frozen, cell: Cell, r: CellResult) -> dict[str, Any]:
    task = Path(frozen.dataset_dir) / cell.task_id
    name = trial_name(cell)
    tdir = job_dir(out, frozen) / name
    config = {"task": {"path": str(task), "source": _source(frozen)}, "trial_name": name,
              "trials_dir": str(job_dir(out, frozen)), "agent": _agent(frozen, cell.arm),
              "environment": _environment(frozen), "job_id": _uuid(frozen.manifest_sha256)}
    metadata = {"runtime": r.runtime, "session_status": r.session_status, "failure_class": r.failure_class,
                "turns": r.turns, "cell_id": cell.cell_id, "repeat": cell.repeat, "block": cell.block,
                "position": cell.position, "manifest_sha256": r.manifest_sha256, "detail": r.detail,
                "sessions": str(out / "cells" / cell.cell_id / "sessions"), "n_sessions": r.sessions,
                "gate_feedback": r.feedback, "cli_version": r.cli_version, "model_reported": r.model_reported,
                "metered_cost_usd": r.metered_cost_usd, "tokens": r.tokens,
                "fault": r.fault}         # the injected interruption it had (docs/eval.md "Faults"), or None
    return {
        "schema_version": 1, "id": _uuid(frozen.manifest_sha256, cell.cell_id), "task_name": cell.task_id,
        "trial_name": name, "trial_uri": tdir.resolve().as_uri(), "task_id": {"path": str(task)},
        "source": _source(frozen), "task_checksum": r.digest, "config": config,
        "agent_info": {"name": cell.arm, "version": frozen.sweep_version,
                       "model_info": None if r.model is None else {"name": r.model}},
        "agent_result": {"cost_usd": r.cost_usd, **harbor_tokens(r.tokens), "metadata": metadata},
        "verifier_result": None if r.reward is None else {"rewards": {REWARD_KEY: r.reward}},
        "exception_info": _exception(r),
        "started_at": _iso(r.ended_at - r.wall_s), "finished_at": _iso(r.ended_at),
        "agent_execution": _agent_timing(r),
        "verifier": _timing(r.trial_started_at, r.trial_s)}


def _evals_key(frozen: Frozen, arm_name: str) -> str:
    model = next(a.model for a in frozen.plan.arms if a.name == arm_name)
    return "__".join(p for p in (arm_name, model, _source(frozen)) if p)


def job_stats(frozen: Frozen, manifest: Manifest, ended: list[tuple[Cell, CellResult]]) -> dict[str, Any]:
    """Harbor's JobStats of the ended cells: per arm (its `evals` entry), the rewards by value,
    the exceptions by type, pass@k for k = 1..repeats over the tasks whose repeats all ended."""
    evals: dict[str, dict[str, Any]] = {}
    errored = 0
    for arm in manifest.arms:
        mine = [(c, r) for c, r in ended if c.arm == arm]
        rewards: dict[str, list[str]] = {}
        exceptions: dict[str, list[str]] = {}
        per_task: dict[str, list[bool]] = {}
        for c, r in mine:
            if r.reward is not None:
                rewards.setdefault(repr(float(r.reward)), []).append(trial_name(c))
                per_task.setdefault(c.task_id, []).append(r.solved)
            if (exc := _exception(r)) is not None:
                exceptions.setdefault(exc["exception_type"], []).append(trial_name(c))
        full = {t: v for t, v in per_task.items() if len(v) == frozen.plan.repeats}
        n_errors = sum(len(v) for v in exceptions.values())
        errored += n_errors
        evals[_evals_key(frozen, arm)] = {
            "n_trials": sum(len(v) for v in rewards.values()), "n_errors": n_errors, "metrics": [],
            "pass_at_k": {str(k): stats.arm_pass_at_k(full, k) for k in range(1, frozen.plan.repeats + 1)}
            if full else {},
            "reward_stats": {REWARD_KEY: rewards} if rewards else {}, "exception_stats": exceptions}
    costs = [r.cost_usd for _, r in ended if r.cost_usd is not None]
    return {"n_completed_trials": len(ended), "n_errored_trials": errored, "n_running_trials": 0,
            "n_pending_trials": len(manifest.cells) - len(ended), "n_cancelled_trials": 0, "n_retries": 0,
            "evals": evals, "cost_usd": sum(costs) if costs else None}


def write_trial(out: Path, frozen: Frozen, cell: Cell, r: CellResult) -> None:
    doc = trial_result(out, frozen, cell, r)
    tdir = job_dir(out, frozen) / doc["trial_name"]
    (tdir / "verifier").mkdir(parents=True, exist_ok=True)
    if r.reward is not None:
        write_atomic(tdir / "verifier" / "reward.txt", f"{r.reward}\n".encode())
    write_atomic(tdir / "config.json", dump_json(doc["config"]))
    write_atomic(tdir / "result.json", dump_json(doc))       # last: a trial with its result is complete


def write_job(out: Path, frozen: Frozen, manifest: Manifest, *, cell: Cell | None = None) -> None:
    """The job's config (once), `cell`'s trial (or every ended cell's missing one), and the job's result."""
    jdir = job_dir(out, frozen)
    jdir.mkdir(parents=True, exist_ok=True)
    if not (jdir / "config.json").exists():
        write_atomic(jdir / "config.json", dump_json(job_config(out, frozen)))
    ended = [(c, r) for c, r in ((c, read_result(out, c.cell_id)) for c in manifest.cells) if r is not None]
    for c, r in ended:
        if c == cell or (cell is None and not (jdir / trial_name(c) / "result.json").exists()):
            write_trial(out, frozen, c, r)
    last = max((r.ended_at for _, r in ended), default=frozen.created_at)
    result = {"schema_version": 1, "id": _uuid(frozen.manifest_sha256), "started_at": _iso(frozen.created_at),
              "updated_at": _iso(last), "finished_at": _iso(last) if len(ended) == len(manifest.cells) else None,
              "n_total_trials": len(manifest.cells), "stats": job_stats(frozen, manifest, ended)}
    write_atomic(jdir / "result.json", dump_json(result))
