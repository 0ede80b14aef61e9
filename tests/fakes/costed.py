"""A FAKE cost-reporting session runtime, and a controller entry point that registers it. Tests only.

Why it exists: the `command` runtime does not measure cost (sweep/runtimes/command.py: "Turns,
cost and session id are not measured (None)"), so with it every session is charged exactly its
reservation and an actual cost above the reservation (an overrun) can never happen. The agent CLI
runtimes that will report cost (claude-code's stream-json, codex's --json) are not built yet. To
drive the controller's overrun handling through real processes anyway, this runtime is the
`command` runtime plus one thing: it reads `fake-agent-cost-usd: X` (printed by
tests/fakes/agent.py --cost X) from the session's stderr as the session's cost.

A plan selects it with `runtimes.<role> = "command-costed"` and a controller that registers it:
`tick.controller_command = [python, "tests/fakes/controller.py", "--costed"]`.
"""
from __future__ import annotations

import re

from sweep.runtimes.command import CommandRuntime

COST_RE = re.compile(r"fake-agent-cost-usd: ([0-9.]+)")


class CostedCommandRuntime(CommandRuntime):
    name = "command-costed"

    def parse(self, req, files, outcome):
        parsed = super().parse(req, files, outcome)
        found = COST_RE.findall(outcome.stderr_tail or "")
        if found:
            parsed.cost_usd = float(found[-1])
        return parsed
