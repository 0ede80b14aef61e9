"""The evaluation plan: what `sweep eval init PLAN` reads (TOML or JSON) and freezes.

Every model forbids unknown keys, as the generation plan does (sweep/models/plan.py): a typo is an
error naming the field. A setting the evaluation cannot honour yet is refused here, never accepted
and ignored (docs/eval.md says which).
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sweep.models.plan import NAME_RE as CAMPAIGN_NAME_RE
from sweep.models.environment import JobEnvironment
from sweep.models.lanes import SchedulerSettings
from sweep.models.plan import LimitSettings, ProviderSettings, SecretSource, Strict, check_secret_families

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
SESSION_FAMILIES = ("anthropic", "openai")      # the key families a solver session can be given


class Budget(Strict):
    """One arm's budget envelope, per solver session: its walltime, its turns and its spend."""

    wall_s: float = Field(default=900, gt=0, le=7 * 86400)
    max_turns: int | None = Field(default=None, ge=1, le=100_000)
    # the session's spend limit: the CLI's own cap flag and the wire relay's refusal point (an agent-CLI
    # arm must give one: init refuses it without)
    max_usd: float | None = Field(default=None, gt=0)


class Arm(Strict):
    """One solver configuration: every task is solved by every arm, `repeats` times."""

    name: str
    runtime: str
    runtime_options: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    instructions: str = ""              # appended to the task's instruction
    gate_feedback: int = Field(default=0, ge=0, le=20)   # verifier cycles fed back before the final run
    budget: Budget = Field(default_factory=Budget)

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"{v!r}: an arm name is 1-64 lowercase letters, digits, '.', '_', '-'")
        return v

    @field_validator("runtime")
    @classmethod
    def _check_runtime(cls, v: str) -> str:
        from sweep.runtimes.facts import RUNTIMES
        if v not in RUNTIMES:
            raise ValueError(f"unknown runtime {v!r} (runtimes: {', '.join(RUNTIMES)})")
        return v


class Fault(Strict):
    """An injected interruption (docs/eval.md, "Faults"): the first solver session of every selected
    cell is stopped once its stream reports `after_tool_calls` completed tool calls, recorded as the
    cell's fault, and resumed with a resume instruction. A cell is selected when it matches every
    selector given (`cells`: cell ids; `arms`: arm names; `repeats`: repeat indices)."""

    cells: list[str] | None = Field(default=None, min_length=1)
    arms: list[str] | None = Field(default=None, min_length=1)
    repeats: list[int] | None = Field(default=None, min_length=1)
    after_tool_calls: int = Field(ge=1, le=100_000)

    @model_validator(mode="after")
    def _selects(self) -> "Fault":
        if self.cells is None and self.arms is None and self.repeats is None:
            raise ValueError("a fault selects its cells: give cells, arms or repeats")
        return self

    def selects(self, cell: Any) -> bool:
        return ((self.cells is None or cell.cell_id in self.cells) and (self.arms is None or cell.arm in self.arms)
                and (self.repeats is None or cell.repeat in self.repeats))


class EvalPlan(Strict):
    """An evaluation: the dataset, the arms, how many repeats, the seed of the assignment."""

    kind: Literal["eval"] = "eval"
    name: str
    dataset: str                        # a Harbor dataset directory (relative: to the plan file)
    arms: list[Arm] = Field(min_length=1, max_length=64)
    repeats: int = Field(default=1, ge=1, le=1000)
    seed: int = Field(ge=0, lt=2**63)
    isolation: Literal["bwrap", "none"] = "bwrap"
    limits: LimitSettings = Field(default_factory=LimitSettings)
    # key family -> where its secret comes from (a file path or a variable name, never the value), as in
    # a generation plan (sweep/credentials.py); a session gets only its arm's family
    secrets: dict[str, SecretSource] = Field(default_factory=dict)
    # the whole evaluation's spend cap: each cell of an arm reserves its max_usd envelope before it
    # starts (DIR/spend.jsonl, sweep/eval/spend.py); a cell that does not fit is not started
    max_spend_usd: float | None = Field(default=None, gt=0)
    # each cell is a run of the tick/controller machinery (sweep/eval/runs.py): a generation plan's
    # settings of the same names, with the same meaning (how many cells' controllers at once; where
    # and how they are submitted: the backend, its lanes)
    max_parallel: int = Field(default=2, ge=1, le=100_000)
    # a cell's attempts (a vanished or failed controller) before it ends blocked: max_attempted, and its
    # interruptions (preemption, time limit, node failure: no attempt) before blocked: max_interrupted
    max_attempts: int = Field(default=3, ge=1, le=100)
    max_interruptions: int = Field(default=10, ge=1, le=10_000)
    # the controller jobs' environment (a generation plan's [environment]: toolchains' PATH and
    # variables, `inherit`): the same from a shell or from scrontab. Sessions and verifier runs keep
    # their own sandbox environment, so a toolchain's `bind` is refused (init: check_environment)
    environment: JobEnvironment | None = None
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    # where the cells' solver sessions and verifier runs happen, as a generation candidate's `provider`
    # and the plan's [providers.<name>] (docs/providers.md): on a remote provider, in a sandbox from
    # the task's environment/Dockerfile image (sweep/eval/run.py `cell_context`)
    provider: Literal["local", "daytona", "modal"] = "local"
    providers: dict[Literal["daytona", "modal"], ProviderSettings] = Field(default_factory=dict)
    # injected interruptions of chosen cells (checked against the manifest at init: check_faults)
    faults: list[Fault] = Field(default_factory=list, max_length=1000)

    @field_validator("secrets")
    @classmethod
    def _check_secrets(cls, v: dict[str, SecretSource]) -> dict[str, SecretSource]:
        return check_secret_families(v, SESSION_FAMILIES, "a key family a solver session uses")

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not CAMPAIGN_NAME_RE.fullmatch(v):
            raise ValueError(f"{v!r}: an evaluation name is 1-64 letters, digits, '.', '_', '-'")
        return v

    @model_validator(mode="after")
    def _unique_arms(self) -> "EvalPlan":
        names = [a.name for a in self.arms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"arm names must be unique: {', '.join(dup)} appear more than once")
        return self


def fault_for(plan: EvalPlan, cell: Any) -> int | None:
    """The tool call after which the cell's first solver session is interrupted, or None."""
    return next((f.after_tool_calls for f in plan.faults if f.selects(cell)), None)


def check_faults(plan: EvalPlan, cells: list[Any]) -> None:
    """Every fault names cells, arms and repeats the manifest has, selects at least one cell, and
    only cells whose arm's runtime counts tool calls on its stream; no cell is selected twice.
    ConfigError naming the field (`faults.0.cells`) otherwise."""
    from runstate.errors import ConfigError
    from sweep.runtimes.facts import facts_of
    ids, arms = {c.cell_id for c in cells}, {a.name: a for a in plan.arms}
    taken: dict[str, int] = {}
    for i, fault in enumerate(plan.faults):
        for key, known, wanted in (("cells", ids, fault.cells), ("arms", set(arms), fault.arms),
                                   ("repeats", set(range(plan.repeats)), fault.repeats)):
            missing = [x for x in wanted or [] if x not in known]
            if missing:
                raise ConfigError(f"fault {i} names {key} the evaluation does not have: "
                                  f"{', '.join(map(str, missing[:5]))}", field=f"faults.{i}.{key}")
        chosen = [c for c in cells if fault.selects(c)]
        if not chosen:
            raise ConfigError(f"fault {i} selects no cell (its selectors match none together)", field=f"faults.{i}")
        for cell in chosen:
            arm = arms[cell.arm]
            if not facts_of(arm.runtime).counts_tool_calls:
                raise ConfigError(f"fault {i} selects cell {cell.cell_id} of arm {arm.name}, whose runtime "
                                  f"{arm.runtime} reports no tool calls to stop it at", field=f"faults.{i}")
            if cell.cell_id in taken:
                raise ConfigError(f"cell {cell.cell_id} is selected by faults {taken[cell.cell_id]} and {i}",
                                  field=f"faults.{i}")
            taken[cell.cell_id] = i


def load_eval_plan(path) -> EvalPlan:
    """The plan at `path` (TOML, or JSON by its suffix), validated; a ConfigError naming the file
    and the field for anything wrong."""
    import json
    import tomllib
    from pathlib import Path

    from pydantic import ValidationError

    from runstate.errors import ConfigError, validation_problem
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read the evaluation plan: {exc}", path=p) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a table/object at the top level", path=p)
    try:
        return EvalPlan.model_validate(data)
    except ValidationError as exc:
        field, msg = validation_problem(exc, unknown="unknown field (check the spelling; see docs/eval.md for the fields)")
        raise ConfigError(msg, path=p, field=field) from None
