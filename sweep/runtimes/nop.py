"""nop: the agent that does nothing. The control every task must score 0 against.

It still runs through the provider (a real `true` process in the sandbox) and the audit, so a nop
session exercises the same path as a real one. As a judge it gives no verdict, which sweep records
as a failed session (a judge that says nothing has not judged).
"""
from __future__ import annotations

from runstate.errors import ConfigError
from sweep.runtimes.base import Invocation, Parsed, RuntimeCapabilities, SessionFiles, SessionRequest
from sweep.runtimes.facts import RuntimeFacts


class NopRuntime:
    name = "nop"
    facts = RuntimeFacts(paid=False, host_only=True, protocol_classified=False)

    def capabilities(self, options: dict) -> RuntimeCapabilities:
        # Doing nothing honours every restriction: no tools used, no turns, no cost, no network.
        return RuntimeCapabilities(restricts_tools=True, structured_output=True, max_turns=True,
                                   cost_cap=True, needs_network=False,
                                   uses_credentials=False)

    def check_options(self, options: dict) -> None:
        if options:
            raise ConfigError(f"the nop runtime takes no options (got {sorted(options)})", field="runtime_options")

    def build_invocation(self, req: SessionRequest, files: SessionFiles, output_path: str) -> Invocation:
        return Invocation(argv=["true"], network=False)

    def parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed:
        if outcome.rc == 0:
            return Parsed(ok=True, turns=0, cost_usd=0.0, evidence="nop: did nothing")
        return Parsed(ok=False, failure_class="failure", reason="nop_failed",
                      evidence=f"nop exited {outcome.rc}: {outcome.stderr_tail[-200:]}")
