"""What each session runtime is, in one place: its descriptor (`RuntimeFacts`) and the registry.

Every runtime class carries `facts: RuntimeFacts`, and everything sweep needs to know about a
runtime by name is read from there: whether its sessions cost money, whether it must run on this
host, whether its failures are classified from its CLI's protocol, which key families it can use,
its model API's default endpoint, how preflight finds and runs its CLI (and which npm package a
remote image installs for it), how its cost is measured, and the rest below. No other module asks
`if runtime == "..."`: a new runtime is one module whose class declares its facts, plus one line
in `RUNTIMES` (docs/architecture.md, "How to add a runtime").

The registry is lazy like every plugin registry (sweep/registry.py): a runtime's module is
imported when its facts are first asked for, so `sweep status` imports none of them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sweep.registry import Registry

COST_SOURCES = ("free", "reported", "priced", "metered", "reservation")


@dataclass(frozen=True)
class AgentCli:
    """The agent CLI a runtime drives, as preflight, the install hints and a remote image need it."""

    package: str                                  # the npm package that installs it
    pinned_version: str                           # the version its parser was tested with
    supported_range: tuple[tuple[int, ...], tuple[int, ...]]   # [min, max): outside it doctor warns
    default_binary: str                           # the command name when the options give no `binary`
    find: Callable[[str], str | None]             # the executable for a `binary` option, or None
    install_root: Callable[[str], Path]           # what the sandbox must show for the CLI to run

    @property
    def npm_spec(self) -> str:
        return f"{self.package}@{self.pinned_version}"


@dataclass(frozen=True)
class RuntimeFacts:
    paid: bool                          # calls a paid model API: its sessions need a reservation > 0
    host_only: bool                     # runs sweep's own code: always on this host, never in a task image
    protocol_classified: bool           # a failure is classified from its CLI's protocol events only, never text
    # the key families whose secret it can use (first: its default); None: whichever the role's
    # manifest names (a generic command); (): none (it gets no credential at all)
    key_families: tuple[str, ...] | None = ()
    default_endpoint: str | None = None     # the model API it reaches when the options give no base_url
    cli: AgentCli | None = None         # the agent CLI preflight checks and a remote image installs
    cost: str = "free"                  # how a session's cost is known (COST_SOURCES): free, reported by
                                        # the CLI, priced from its token usage, or unknown (the reservation)
    reference_solution: bool = False    # it is the oracle control: a solver given the task's reference solution
    mechanical: bool = False            # it judges by fixed rules (a reviewer that cannot call a mutant equivalent)
    # the model API protocol its CLI speaks ("anthropic": Messages; "openai": Responses / Chat
    # Completions): its sessions go through the credential and metering relay (sweep/runtimes/wire),
    # which holds the key and measures the cost ("metered"); None: not relayed
    wire_protocol: str | None = None
    grant_hint: str | None = None       # how a plan gives it a capability it lacks ("{what}": the placeholder)
    # it can continue an earlier session's conversation (SessionRequest.resume: its CLI keeps a
    # transcript in a state directory and takes an id to go on from); False: a caller that wanted
    # to resume starts a new session instead, and says so
    resumable: bool = False
    # its live stream says when a tool call completed, so a fault can stop the session after the
    # N-th (SessionRequest.stop_after_tool_calls)
    counts_tool_calls: bool = False

    def __post_init__(self) -> None:
        if self.cost not in COST_SOURCES:
            raise ValueError(f"cost must be one of {COST_SOURCES}, not {self.cost!r}")
        if self.cli is not None and not (self.key_families and self.default_endpoint):
            raise ValueError("a runtime that drives an agent CLI names its key families and its default endpoint")
        if self.wire_protocol not in (None, "anthropic", "openai"):
            raise ValueError(f"wire_protocol must be anthropic, openai or None, not {self.wire_protocol!r}")
        if (self.cost == "metered") != (self.wire_protocol is not None):
            raise ValueError("a runtime's cost is metered exactly when its sessions are relayed (wire_protocol)")
        if not self.paid and self.cost != "free":
            raise ValueError("an unpaid runtime's cost is free")


# runtime name -> "module:class", imported lazily
RUNTIMES = Registry("session runtime", "runtime", {
    "oracle": "sweep.runtimes.oracle:OracleRuntime",
    "nop": "sweep.runtimes.nop:NopRuntime",
    "command": "sweep.runtimes.command:CommandRuntime",
    "claude-code": "sweep.runtimes.claude_code:ClaudeCodeRuntime",
    "codex": "sweep.runtimes.codex:CodexRuntime",
})


def facts_of(runtime: str) -> RuntimeFacts:
    """The runtime's descriptor (an unknown name is the registry's ConfigError)."""
    facts: RuntimeFacts = RUNTIMES.load(runtime).facts
    return facts


def runtimes_where(test: Callable[[RuntimeFacts], bool]) -> frozenset[str]:
    """The registered runtimes whose facts pass `test` (imports each runtime's module)."""
    return frozenset(name for name in RUNTIMES if test(facts_of(name)))


# The name sets sweep used to spell out, each derived from the registry when asked.
def unpaid_runtimes() -> frozenset[str]:
    return runtimes_where(lambda f: not f.paid)


def host_only_runtimes() -> frozenset[str]:
    return runtimes_where(lambda f: f.host_only)


def protocol_classified() -> frozenset[str]:
    return runtimes_where(lambda f: f.protocol_classified)


def agent_runtimes() -> frozenset[str]:
    """The runtimes that drive an agent CLI (preflight checks each)."""
    return runtimes_where(lambda f: f.cli is not None)


def agent_clis() -> dict[str, tuple[str, str]]:
    """runtime -> (npm package, pinned version) of the CLI a remote image installs for it."""
    return {name: (f.cli.package, f.cli.pinned_version) for name in sorted(RUNTIMES)
            if (f := facts_of(name)).cli is not None}


def family_of() -> dict[str, tuple[str, ...]]:
    """runtime -> the key families it can use."""
    return {name: f.key_families for name in sorted(RUNTIMES) if (f := facts_of(name)).key_families}


def default_endpoints() -> dict[str, str]:
    return {name: f.default_endpoint for name in sorted(RUNTIMES)
            if (f := facts_of(name)).default_endpoint is not None}
