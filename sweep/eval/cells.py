"""An evaluation campaign on disk, and running its cells (docs/eval.md).

    DIR/eval.json          what init froze: the plan, the dataset's path, the manifest's sha256
    DIR/plan.toml          the plan as written (a copy)
    DIR/manifest.json      the assignment (sweep/eval/manifest.py), read back against its sha256
    DIR/roles/solver.toml  the solver manifest every cell's session plays (a frozen copy)
    DIR/cells/<cell>/      one cell: sessions/, work/ while it runs, result.json when it ended
    DIR/runner.lock        held (O_EXCL, the holder's pid) by the one `sweep eval run` at work

A cell is done when its result.json exists (written atomically, last): a runner that is killed
leaves the cell it was in without one, and the next runner starts that cell again from a fresh
workspace and never repeats a cell that has its result.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from runstate.atomic import write_atomic
from runstate.errors import ConfigError, StateError
from sweep.eval.dataset import read_dataset
from sweep.eval.manifest import Manifest, assign, read_manifest
from sweep.eval.plan import Arm, EvalPlan, load_eval_plan

TRIAL_TIMEOUT_S = 900


class Frozen(BaseModel):
    """eval.json."""
    model_config = ConfigDict(extra="ignore", frozen=True)

    plan: EvalPlan
    dataset_dir: str
    manifest_sha256: str
    solver_manifest_sha256: str
    created_at: float
    sweep_version: str


class CellResult(BaseModel):
    """cells/<cell>/result.json: how one cell ended, with its session's provenance."""
    model_config = ConfigDict(extra="ignore", frozen=True)

    cell_id: str
    task_id: str
    arm: str
    repeat: int
    digest: str
    manifest_sha256: str
    reward: float | None
    solved: bool
    detail: str
    runtime: str
    model: str | None = None
    session_status: str | None = None
    failure_class: str | None = None
    cost_usd: float | None = None
    turns: int | None = None
    session_s: float | None = None
    session_started_at: float | None = None
    trial_s: float | None = None
    trial_started_at: float | None = None
    sessions: int = 1                   # the solver session and the feedback sessions after it
    feedback: list[dict[str, Any]] = Field(default_factory=list)   # the gate-feedback cycles (docs/eval.md)
    wall_s: float
    ended_at: float


def dump_json(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


def _check_arm(arm: Arm) -> None:
    """What a cell's session would refuse, refused at init instead (before anything is written)."""
    from sweep.runtimes import get_runtime
    from sweep.runtimes.facts import facts_of
    if facts_of(arm.runtime).key_families and facts_of(arm.runtime).cli is not None:
        raise ConfigError(f"arm {arm.name}: runtime {arm.runtime} drives an agent CLI that needs a key, and "
                          "evaluation plans take no secrets yet: use the command, nop or oracle runtime",
                          field="arms")
    try:
        get_runtime(arm.runtime).check_options(arm_options(arm))
    except ConfigError as exc:
        raise ConfigError(f"arm {arm.name}: {exc.message}", field="arms") from None


def arm_options(arm: Arm) -> dict[str, Any]:
    """The runtime options a cell's session gets: the arm's, with its `model` as the `model` option."""
    return {**arm.runtime_options, **({"model": arm.model} if arm.model is not None else {})}


def init_eval(plan_path: Path, out: Path) -> tuple[Frozen, Manifest, bool]:
    """Freeze the plan and its manifest into `out`; (frozen, manifest, created). Re-running with the
    same plan and dataset is a no-op; anything changed needs a new directory."""
    from roles import manifest_sha256, shipped_manifests_dir
    from sweep import __version__
    plan = load_eval_plan(plan_path)
    for arm in plan.arms:
        _check_arm(arm)
    dataset = (Path(plan_path).parent / plan.dataset).resolve()
    tasks = read_dataset(dataset)
    manifest = assign([(t.task_id, t.digest) for t in tasks], [a.name for a in plan.arms], plan.repeats, plan.seed)
    sha = manifest.sha256()
    if (out / "eval.json").exists():
        frozen = load_frozen(out)
        if frozen.plan != plan or frozen.manifest_sha256 != sha or frozen.dataset_dir != str(dataset):
            raise ConfigError("this directory holds another evaluation (its plan, dataset, arms or seed differ): "
                              "a changed evaluation needs a new campaign directory", path=out / "eval.json")
        return frozen, manifest, False
    if out.exists() and any(out.iterdir()):
        raise ConfigError("the campaign directory exists and is not an evaluation: give a new one", path=out)
    for left in out.parent.glob(f".{out.name}.init-*"):      # what a killed init left
        shutil.rmtree(left, ignore_errors=True)
    staging = out.with_name(f".{out.name}.init-{os.getpid()}")
    (staging / "roles").mkdir(parents=True)
    (staging / "cells").mkdir()
    solver = shipped_manifests_dir() / "solver.toml"
    shutil.copyfile(solver, staging / "roles" / "solver.toml")
    shutil.copyfile(plan_path, staging / "plan.toml")
    write_atomic(staging / "manifest.json", manifest.to_bytes())
    frozen = Frozen(plan=plan, dataset_dir=str(dataset), manifest_sha256=sha,
                    solver_manifest_sha256=manifest_sha256(solver), created_at=time.time(), sweep_version=__version__)
    write_atomic(staging / "eval.json", dump_json(frozen.model_dump(mode="json")))
    if out.exists():
        out.rmdir()
    os.rename(staging, out)            # complete or absent
    return frozen, manifest, True


def load_frozen(out: Path) -> Frozen:
    try:
        return Frozen.model_validate(orjson.loads((out / "eval.json").read_bytes()))
    except (OSError, ValueError) as exc:
        raise StateError(f"not an evaluation campaign: {exc}", path=out / "eval.json") from None


def load_eval(out: Path) -> tuple[Frozen, Manifest]:
    frozen = load_frozen(out)
    try:
        manifest = read_manifest((out / "manifest.json").read_bytes(), frozen.manifest_sha256)
    except (OSError, ValueError) as exc:
        raise StateError(str(exc), path=out / "manifest.json") from None
    return frozen, manifest


def read_result(out: Path, cell_id: str) -> CellResult | None:
    path = out / "cells" / cell_id / "result.json"
    try:
        return CellResult.model_validate(orjson.loads(path.read_bytes()))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise StateError(f"unreadable cell result: {exc}", path=path) from None
