"""Session runtimes: how a role session is run, whatever agent plays the role.

The controller calls ONE entry point:

    run_session(req: SessionRequest, provider) -> SessionResult
    get_provider(name="local", **options) -> Provider

Runtimes (one module each, behind the contract in base.py): `oracle` (deterministic, does each
role's job mechanically), `nop` (does nothing: the control that must score 0), `command` (any CLI
from an argv template), `claude-code` (the claude CLI) and `codex` (the codex CLI).
"""
from __future__ import annotations

from roles import RoleSpec
from runstate.errors import ConfigError
from sweep.providers import get_provider
from sweep.registry import Registry
from sweep.runtimes.base import (FAILURE_CLASSES, STATUSES, RuntimeCapabilities, SessionRequest,
                                 SessionResult, SessionRuntime)

# runtime name -> "module:class", imported lazily
RUNTIMES = Registry("session runtime", "runtime", {
    "oracle": "sweep.runtimes.oracle:OracleRuntime",
    "nop": "sweep.runtimes.nop:NopRuntime",
    "command": "sweep.runtimes.command:CommandRuntime",
    "claude-code": "sweep.runtimes.claude_code:ClaudeCodeRuntime",
    "codex": "sweep.runtimes.codex:CodexRuntime",
})


def get_runtime(name: str) -> SessionRuntime:
    return RUNTIMES.load(name)()


def check_runtime_supports(spec: RoleSpec, runtime_name: str, options: dict | None = None) -> None:
    """Raise ConfigError (naming the manifest and field) unless `runtime_name` can honour `spec`.

    A restricted tool list needs a runtime that can restrict tools, unless the role holds an
    unrestricted shell (Bash), which subsumes every other tool: then the sandbox and the audit are
    the bound either way. Turn and cost caps need a runtime that can apply them; a judge needs one
    that can return structured output. The walltime is always enforced from outside.
    """
    runtime = get_runtime(runtime_name)
    caps = runtime.capabilities(options or {})
    where = {"path": spec.source_path}
    if caps.roles is not None and spec.name not in caps.roles:
        raise ConfigError(f"runtime {runtime_name!r} can only play {sorted(caps.roles)}, not {spec.name!r}",
                          field="name", **where)
    if not caps.restricts_tools and not spec.has_unrestricted_shell:
        hint = "pass {tools} in the command's argv template" if runtime_name == "command" else None
        raise ConfigError(f"runtime {runtime_name!r} cannot restrict an agent's tools, and this role is limited "
                          f"to {spec.tools}", field="tools", hint=hint, **where)
    if spec.budget.max_turns is not None and not caps.max_turns:
        hint = "pass {max_turns} in the command's argv template" if runtime_name == "command" else None
        raise ConfigError(f"runtime {runtime_name!r} cannot cap turns", field="budget.max_turns", hint=hint, **where)
    if spec.budget.cost_cap_usd is not None and not caps.cost_cap:
        hint = "pass {cost_cap_usd} in the command's argv template" if runtime_name == "command" else None
        raise ConfigError(f"runtime {runtime_name!r} cannot cap cost", field="budget.cost_cap_usd", hint=hint, **where)
    if spec.output_schema is not None and not caps.structured_output:
        raise ConfigError(f"runtime {runtime_name!r} cannot return a judge's structured output",
                          field="output_schema", **where)


def run_session(req: SessionRequest, provider) -> SessionResult:
    """Run one role session (see sweep/runtimes/session.py for the order of work and guarantees)."""
    from sweep.runtimes.session import run_session as _run
    return _run(req, provider)


__all__ = ["SessionRequest", "SessionResult", "RuntimeCapabilities", "SessionRuntime", "run_session",
           "get_provider", "get_runtime", "check_runtime_supports", "RUNTIMES", "STATUSES", "FAILURE_CLASSES"]
