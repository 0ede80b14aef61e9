"""RoleSpec: the manifest that is the only difference between author, reviewer and solver.

A manifest a session can ignore is worthless, so the model refuses, at load, every spec that sweep
could not enforce or that contradicts itself:
- a role with no tools (it could do nothing);
- a non-executing role holding a tool that can change files or run code, or holding a write scope
  (it could write through the tool, or the scope would be a lie);
- a judge (a role with an output_schema) holding a write scope (a judge must not edit what it judges);
- an output_schema using a keyword sweep's validator cannot check;
- a scope glob that is absolute, climbs out with `..`, or uses syntax sweep does not match.
Whether a given session runtime can honour the spec is checked separately, up front, by
`sweep.runtimes.check_runtime_supports` (roles/ must not import the runtimes).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from roles.schema import schema_problems
from roles.scope import glob_problem
from runstate.models import ROLE_RE

# Environment variables a key family may see inside a session; nothing else from the caller passes.
KEY_FAMILY_ENV: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN"),
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY"),
    "none": (),
}

# Tools known to only read. Anything else (Write, Edit, MultiEdit, NotebookEdit, Bash, Task, shell,
# apply_patch, or a tool sweep has never heard of) is treated as able to change files or run code:
# an unknown tool on a read-only role is refused rather than trusted.
READ_ONLY_TOOLS = frozenset({"Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch",
                             "read", "grep", "find", "ls"})
# A tool that is a whole unrestricted shell subsumes every other tool (see check_runtime_supports).
UNRESTRICTED_SHELL_TOOLS = frozenset({"Bash", "bash", "shell"})

_TOOL_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def tool_base(tool: str) -> str:
    """`Bash(pytest:*)` -> `Bash`: the tool itself, without its argument pattern."""
    return tool.split("(", 1)[0]


class RoleInvariantError(ValueError):
    """A manifest breaks an invariant; `field` is the dotted manifest field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class Execution(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # What the controller puts in the workspace: the PR repository (author), the task bundle to judge
    # (reviewer), or the task's environment without tests or solution (solver, blind).
    environment: Literal["source", "bundle", "task"]
    # Whether the session may run commands at all. False = read-only: no mutating tool, no scope,
    # and the sandbox gives it no writable path.
    can_execute: bool


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_turns: int | None = Field(default=None, ge=1)
    walltime_s: float = Field(gt=0, le=7 * 24 * 3600)    # always enforced from outside the session
    cost_cap_usd: float | None = Field(default=None, ge=0)


class RoleLimits(BaseModel):
    """A role's own resource bounds for its sessions: each key given replaces the plan's `[limits]`
    value for this role; a key left out keeps the plan's (docs/security.md). Trials are not sessions:
    they keep the plan's bounds and their task.toml timeouts."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_mb: int | None = Field(default=None, ge=64)
    processes: int | None = Field(default=None, ge=8)
    file_mb: int | None = Field(default=None, ge=1)
    workspace_mb: int | None = Field(default=None, ge=1)
    transcript_kb: int | None = Field(default=None, ge=16)
    tmp_mb: int | None = Field(default=None, ge=16)

    def overrides(self) -> dict[str, int]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class RoleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    instructions: str = Field(min_length=1)
    key_family: Literal["anthropic", "openai", "none"]
    tools: list[str]
    execution: Execution
    budget: Budget
    skills: list[str] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    scope: list[str] = Field(default_factory=list)
    # The most network a session of this role may get (the runtime options choose within it):
    # "none", "api" (the configured model endpoints only) or "host" (unrestricted: an explicit,
    # loudly reported opt-in). See docs/security.md.
    network: Literal["none", "api", "host"] = "api"
    # `[limits]` in the manifest: this role's sessions' bounds over the plan's defaults.
    limits: RoleLimits = Field(default_factory=RoleLimits)

    # The manifest file this spec was loaded from, so later errors can name it.
    _source_path: str | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name_is_boring(cls, value: str) -> str:
        if not ROLE_RE.match(value):
            raise ValueError(f"invalid role name {value!r}: expected [a-z][a-z0-9_-]*, at most 32 characters")
        return value

    @field_validator("tools")
    @classmethod
    def _tools_are_names(cls, value: list[str]) -> list[str]:
        for tool in value:
            base = tool_base(tool)
            if not base or not set(base) <= _TOOL_CHARS or (tool != base and not tool.endswith(")")):
                raise ValueError(f"invalid tool {tool!r}: expected a name like 'Read' or 'Bash(pytest:*)'")
        if len(set(value)) != len(value):
            raise ValueError("tools are listed more than once")
        return value

    @model_validator(mode="after")
    def _invariants_hold(self) -> "RoleSpec":
        problems = invariant_violations(self)
        if problems:
            field, message = problems[0]
            raise RoleInvariantError(field, message)
        return self

    # --- derived views ----------------------------------------------------------------------

    @property
    def is_judge(self) -> bool:
        return self.output_schema is not None

    @property
    def read_only(self) -> bool:
        """No path in the workspace may change during the session."""
        return not self.scope

    @property
    def has_unrestricted_shell(self) -> bool:
        return any(t in UNRESTRICTED_SHELL_TOOLS for t in self.tools)

    @property
    def env_allowlist(self) -> tuple[str, ...]:
        return KEY_FAMILY_ENV[self.key_family]

    @property
    def source_path(self) -> str | None:
        return self._source_path

    def with_source(self, path: str | Path) -> "RoleSpec":
        self._source_path = str(path)
        return self


def invariant_violations(spec: RoleSpec) -> list[tuple[str, str]]:
    """(field, message) for every invariant `spec` breaks; empty when the spec is enforceable."""
    problems: list[tuple[str, str]] = []
    if not spec.tools:
        problems.append(("tools", "a role with no tools can do nothing; list at least one (e.g. 'Read')"))
    if not spec.execution.can_execute:
        mutating = [t for t in spec.tools if tool_base(t) not in READ_ONLY_TOOLS]
        if mutating:
            problems.append(("tools", f"execution.can_execute is false but tools {mutating} can change files "
                             f"or run code; a read-only role may hold only {sorted(READ_ONLY_TOOLS)}"))
        if spec.scope:
            problems.append(("scope", "execution.can_execute is false but the role has a write scope; "
                             "a read-only role writes nothing"))
    if spec.output_schema is not None and spec.scope:
        problems.append(("scope", "a judge (a role with output_schema) must not have a write scope: "
                         "it would edit what it judges"))
    for i, pattern in enumerate(spec.scope):
        why = glob_problem(pattern)
        if why:
            problems.append((f"scope[{i}]", why))
    if len(set(spec.scope)) != len(spec.scope):
        problems.append(("scope", "scope entries are listed more than once"))
    if spec.output_schema is not None:
        if spec.output_schema.get("type") != "object":
            problems.append(("output_schema.type", "a judge's verdict must be an object (type = \"object\")"))
        problems += schema_problems(spec.output_schema)
    return problems
