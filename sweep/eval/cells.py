"""An evaluation campaign on disk, and running its cells (docs/eval.md).

    DIR/eval.json          what init froze: the plan, the dataset's path, the manifest's sha256
    DIR/plan.toml          the plan as written (a copy)
    DIR/manifest.json      the assignment (sweep/eval/manifest.py), read back against its sha256
    DIR/roles/solver.toml  the solver manifest every cell's session plays (a frozen copy)
    DIR/cells/<cell>/      one cell: sessions/, work/ while it runs, result.json when it ended
    DIR/campaign.toml, DIR/runs/<cell>/   the directory as a campaign the tick runs (sweep/eval/runs.py)

A cell is done when its result.json exists (written atomically, last): a controller that is killed
leaves its cell without one, and the cell's next controller resumes at the phase its run's record
names (sweep/controller/cell.py) and never repeats a cell that has its result.
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
from sweep.eval.plan import Arm, EvalPlan, check_faults, load_eval_plan

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
    metered_cost_usd: float | None = None   # what the wire relay metered (agent-CLI arms; cost_usd is it)
    cli_version: str | None = None
    model_reported: str | None = None       # the model the runtime says answered
    tokens: dict[str, int] | None = None    # the CLI's token counts (input_tokens, output_tokens, ...), summed
    turns: int | None = None
    session_s: float | None = None
    session_started_at: float | None = None
    trial_s: float | None = None
    trial_started_at: float | None = None
    sessions: int = 1                   # the solver session and the feedback sessions after it
    feedback: list[dict[str, Any]] = Field(default_factory=list)   # the gate-feedback cycles (docs/eval.md)
    fault: dict[str, Any] | None = None     # the injected fault it had (after_tool_calls, at, resumed, ...)
    wall_s: float
    ended_at: float


def dump_json(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


def arm_spec(spec: Any, arm: Arm) -> Any:
    """The solver manifest with the arm's budget envelope (walltime, turns, spend) as its budget."""
    return spec.model_copy(update={"budget": spec.budget.model_copy(update={
        "walltime_s": arm.budget.wall_s, "max_turns": arm.budget.max_turns, "cost_cap_usd": arm.budget.max_usd})})


def arm_family(spec: Any, arm: Arm) -> str | None:
    """The key family an arm's sessions are given a secret of, or None when its runtime takes none."""
    from sweep.runtimes import get_runtime, key_family_of
    if not get_runtime(arm.runtime).capabilities(arm_options(arm)).uses_credentials:
        return None
    return key_family_of(spec, arm.runtime)


def arm_families(plan: EvalPlan) -> dict[str, str | None]:
    """arm -> the key family its sessions use (None: a runtime without one)."""
    from roles import load_manifest, shipped_manifests_dir
    spec = load_manifest(shipped_manifests_dir() / "solver.toml")
    return {arm.name: arm_family(arm_spec(spec, arm), arm) for arm in plan.arms}


def _check_arm(plan: EvalPlan, i: int, arm: Arm, spec: Any) -> str | None:
    """What a cell's session would refuse, refused at init instead (before anything is written);
    the key family the arm uses, if any."""
    from sweep.runtimes import check_runtime_supports, get_runtime
    from sweep.runtimes.facts import facts_of
    facts = facts_of(arm.runtime)
    try:
        get_runtime(arm.runtime).check_options(arm_options(arm))
        check_runtime_supports(arm_spec(spec, arm), arm.runtime, arm_options(arm))
    except ConfigError as exc:
        raise ConfigError(f"arm {arm.name}: {exc.message}", field=f"arms.{i}") from None
    family = arm_family(spec, arm)
    if facts.cli is not None and family not in plan.secrets:
        raise ConfigError(f"arm {arm.name}: runtime {arm.runtime} needs a key of the {family} family, and the plan "
                          f"has no [secrets].{family} entry (a file or an environment variable naming it)",
                          field="secrets")
    if facts.paid and plan.max_spend_usd is not None and arm.budget.max_usd is None:
        raise ConfigError(f"arm {arm.name}: runtime {arm.runtime} may spend money, and the plan's max_spend_usd "
                          "can only bound an arm with a budget.max_usd", field=f"arms.{i}.budget.max_usd")
    if facts.paid and facts.cli is not None and arm.budget.max_usd is None:
        raise ConfigError(f"arm {arm.name}: runtime {arm.runtime} spends money on a model API, and the arm has no "
                          "budget.max_usd to bound each session", field=f"arms.{i}.budget.max_usd")
    if facts.cli is not None:
        binary = arm_options(arm).get("binary", facts.cli.default_binary)
        if facts.cli.find(binary) is None:
            raise ConfigError(f"arm {arm.name}: the {arm.runtime} CLI ({binary!r}) is not installed "
                              f"(npm install -g {facts.cli.npm_spec})", field=f"arms.{i}.runtime_options")
    return family


def _check_plan(plan: EvalPlan, plan_path: Path) -> EvalPlan:
    """Every arm checked, and the plan with its secret files resolved (absolute, 0600, yours)."""
    from roles import load_manifest, shipped_manifests_dir
    from sweep.credentials import resolve_plan_secrets
    spec = load_manifest(shipped_manifests_dir() / "solver.toml")
    used = {_check_arm(plan, i, arm, spec) for i, arm in enumerate(plan.arms)}
    _preflight_scheduler(plan)
    _check_provider(plan)
    unused = sorted(set(plan.secrets) - used)
    if unused:
        raise ConfigError(f"no arm's runtime uses the {', '.join(unused)} key family, so its secret would go to "
                          "no session: remove the entry", field=f"secrets.{unused[0]}")
    return plan.model_copy(update={"secrets": resolve_plan_secrets(plan.secrets, plan_path),
                                   "environment": _resolved_environment(plan, plan_path)})


def _resolved_environment(plan: EvalPlan, plan_path: Path):
    """The plan's [environment] with its paths absolute and checked, as a generation plan's; a
    toolchain `bind` (a directory bound into every sandbox) is refused: an evaluation's environment
    is its controller jobs' only."""
    from sweep.models.environment import EnvironmentProblem
    if plan.environment is None:
        return None
    for name, tc in plan.environment.toolchains.items():
        if tc.bind:
            raise ConfigError("an evaluation's [environment] is its controller jobs' only: nothing is bound into "
                              "the sessions' sandboxes", field=f"environment.toolchains.{name}.bind", hint="remove it")
    try:
        return plan.environment.resolved(plan_path.parent)
    except EnvironmentProblem as exc:
        raise ConfigError(str(exc), field=f"environment.{exc.field}") from None


def _check_provider(plan: EvalPlan) -> None:
    """A generation plan's provider rules (sweep/campaign.py `_refuse_key_in_remote_sandbox`): an arm
    whose session speaks a model API (claude-code, codex, a `command` naming a `protocol`) would
    hold its key inside the remote sandbox, refused unless `[providers.<name>] agent_key_in_sandbox`
    accepts it; an opt-in no arm uses, or a `[providers.<name>]` table for a provider the plan does
    not run on, would have no effect and is refused."""
    from sweep.runtimes import get_runtime
    from sweep.runtimes.facts import facts_of
    from sweep.runtimes.wire import wire_protocol
    stray = sorted(set(plan.providers) - {plan.provider})
    if stray:
        raise ConfigError(f"[providers.{stray[0]}] is set, but the evaluation runs on provider {plan.provider!r}, "
                          "so it would have no effect", field=f"providers.{stray[0]}", hint="remove it, or set provider")
    settings = plan.providers.get(plan.provider) if plan.provider != "local" else None
    keyed = [] if plan.provider == "local" else [
        arm for arm in plan.arms if not facts_of(arm.runtime).host_only
        and wire_protocol(get_runtime(arm.runtime), arm_options(arm))[0] is not None]
    for arm in keyed:
        if settings is None or not settings.agent_key_in_sandbox:
            raise ConfigError(f"arm {arm.name}: runtime {arm.runtime} on provider {plan.provider}: its model key "
                              "would sit inside the remote sandbox, where no relay meters or hides it (the relay "
                              "cannot be reached from a remote sandbox)",
                              field=f"providers.{plan.provider}.agent_key_in_sandbox",
                              hint=f"set [providers.{plan.provider}] agent_key_in_sandbox = true to accept that "
                                   "knowingly (the cost is then self-reported), or provider = \"local\"")
    if settings is not None and settings.agent_key_in_sandbox and not keyed:
        raise ConfigError(f"agent_key_in_sandbox is set for {plan.provider}, but no arm runs an agent session "
                          f"there, so no session would hold a key in it",
                          field=f"providers.{plan.provider}.agent_key_in_sandbox", hint="remove it")


def _preflight_scheduler(plan: EvalPlan) -> None:
    """The scheduler backend's own preflight, as `sweep init` runs it (on Slurm: the lanes' partitions)."""
    from sweep.scheduler import backend
    chosen = backend(plan.scheduler.backend)
    if not chosen.uses_lanes:
        return
    for finding in chosen.preflight(plan.scheduler, False, 0).findings:
        if finding.level == "error":
            raise ConfigError(finding.message, field=finding.field)


def arm_options(arm: Arm) -> dict[str, Any]:
    """The runtime options a cell's session gets: the arm's, with its `model` as the `model` option."""
    return {**arm.runtime_options, **({"model": arm.model} if arm.model is not None else {})}


def init_eval(plan_path: Path, out: Path) -> tuple[Frozen, Manifest, bool]:
    """Freeze the plan and its manifest into `out`; (frozen, manifest, created). Re-running with the
    same plan and dataset is a no-op; anything changed needs a new directory."""
    from roles import manifest_sha256, shipped_manifests_dir
    from sweep import __version__
    plan = load_eval_plan(plan_path)
    try:
        plan = _check_plan(plan, Path(plan_path))
    except ConfigError as exc:
        raise ConfigError(exc.message, path=exc.path or plan_path, field=exc.field, hint=exc.hint) from None
    dataset = (Path(plan_path).parent / plan.dataset).resolve()
    tasks = read_dataset(dataset)
    manifest = assign([(t.task_id, t.digest) for t in tasks], [a.name for a in plan.arms], plan.repeats, plan.seed)
    try:
        check_faults(plan, manifest.cells)       # a fault naming a cell the manifest lacks is refused here
    except ConfigError as exc:
        raise ConfigError(exc.message, path=plan_path, field=exc.field) from None
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
    from sweep.eval.runs import write_campaign
    write_campaign(staging, out, plan, manifest, arm_families(plan))       # each cell a run the tick admits (sweep/eval/runs.py)
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
