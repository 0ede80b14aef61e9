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
from sweep.runtimes.base import (FAILURE_CLASSES, STATUSES, RuntimeCapabilities, SessionRequest,
                                 SessionResult, SessionRuntime)
from sweep.runtimes.facts import RUNTIMES, RuntimeFacts, facts_of


def get_runtime(name: str) -> SessionRuntime:
    return RUNTIMES.load(name)()


def key_family_of(spec: RoleSpec, runtime_name: str) -> str:
    """The key family a session of `spec` played by `runtime_name` uses: the manifest's when the
    runtime can use it, else the runtime's own default (claude-code: anthropic, codex: openai), so
    one manifest serves both CLIs and one campaign can give candidates different solvers. A runtime
    that takes any family (command) uses the manifest's."""
    families = facts_of(runtime_name).key_families
    if not families:
        return spec.key_family
    return spec.key_family if spec.key_family in families else families[0]


def with_runtime_family(spec: RoleSpec, runtime_name: str) -> RoleSpec:
    """`spec` with the key family its runtime uses (its source path kept, for later errors)."""
    family = key_family_of(spec, runtime_name)
    return spec if family == spec.key_family else spec.model_copy(update={"key_family": family})


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
    grant = facts_of(runtime_name).grant_hint

    def hint(what: str) -> str | None:
        return grant.format(what=what) if grant else None

    if caps.roles is not None and spec.name not in caps.roles:
        raise ConfigError(f"runtime {runtime_name!r} can only play {sorted(caps.roles)}, not {spec.name!r}",
                          field="name", **where)
    if spec.skills and not caps.skills:
        # no runtime installs skills yet: a listed skill would be silently ignored
        raise ConfigError(f"runtime {runtime_name!r} does not install skills, so {spec.skills} would be "
                          "ignored", field="skills", hint="leave skills = [] in the manifest", **where)
    from sweep.runtimes.mcp import check_role_mcp
    check_role_mcp(spec, runtime_name, options, caps.mcp_servers)
    if not caps.restricts_tools and not spec.has_unrestricted_shell:
        raise ConfigError(f"runtime {runtime_name!r} cannot restrict an agent's tools, and this role is limited "
                          f"to {spec.tools}", field="tools", hint=hint("tools"), **where)
    if spec.budget.max_turns is not None and not caps.max_turns:
        raise ConfigError(f"runtime {runtime_name!r} cannot cap turns", field="budget.max_turns",
                          hint=hint("max_turns"), **where)
    if spec.budget.cost_cap_usd is not None and not caps.cost_cap:
        raise ConfigError(f"runtime {runtime_name!r} cannot cap cost", field="budget.cost_cap_usd",
                          hint=hint("cost_cap_usd"), **where)
    if spec.output_schema is not None and not caps.structured_output:
        raise ConfigError(f"runtime {runtime_name!r} cannot return a judge's structured output",
                          field="output_schema", **where)


def run_session(req: SessionRequest, provider) -> SessionResult:
    """Run one role session (see sweep/runtimes/session.py for the order of work and guarantees)."""
    from sweep.runtimes.session import run_session as _run
    return _run(req, provider)


__all__ = ["SessionRequest", "SessionResult", "RuntimeCapabilities", "SessionRuntime", "run_session",
           "get_provider", "get_runtime", "check_runtime_supports", "RUNTIMES", "RuntimeFacts", "facts_of",
           "key_family_of", "with_runtime_family", "STATUSES", "FAILURE_CLASSES"]
