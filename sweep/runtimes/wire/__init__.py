"""The wire between an agent CLI and its model API: credential, metering and budget (relay.py).

`open_wire` decides whether a session goes through a relay: an agent CLI whose runtime's facts name
the protocol it speaks (`RuntimeFacts.wire_protocol`: claude-code "anthropic", codex "openai"; for
the command runtime, the plan's `protocol` option), run by a provider
that can map a sandbox endpoint onto a local socket (the local provider). It finds the credential
(the plan's `[secrets]` entry, else the family's variable in the controller's environment), which
from then on exists only in the relay: the session gets a placeholder and none of the family's
variables. Sessions on a remote provider (the solver in the task's image on Modal or Daytona) are
not relayed: they keep the key in their environment (docs/security.md says so).
"""
from __future__ import annotations

import os
from pathlib import Path

from sweep.runtimes.wire.relay import PLACEHOLDER, Credential, WireEndpoint, WireRelay

WIRE_LOG = "wire.jsonl"
# a CLI's own cost figure may differ from the metered one by rounding and by its own price list;
# beyond this it is an anomaly on the session's record
TOLERANCE_USD = 0.01
TOLERANCE_FRACTION = 0.10


def credential_for(role, secrets: dict, read_secret) -> Credential | None:
    """The session's credential: the plan's secret (variable -> source), else the first of the
    key family's credential variables set in this process's environment."""
    from sweep.credentials import NON_SECRET_VARS
    for variable, source in (secrets or {}).items():
        return Credential(variable, read_secret(variable, source))
    for variable in role.env_allowlist:
        if variable not in NON_SECRET_VARS and os.environ.get(variable):
            return Credential(variable, os.environ[variable])
    return None


def open_wire(req, runtime, provider, options: dict, read_secret) -> WireRelay | None:
    """Start the session's relay, or None when the session is not relayed (see the module docstring)."""
    protocol = runtime.facts.wire_protocol
    default_endpoint = runtime.facts.default_endpoint
    if protocol is None and hasattr(runtime, "wire_protocol_for"):
        # a runtime whose protocol the plan names (the command runtime's `protocol` option)
        protocol = runtime.wire_protocol_for(options)
        default_endpoint = runtime.default_endpoint_for(options)
    if protocol is None or not getattr(provider, "wire_relay", False) or req.role.network == "none":
        return None
    upstream = options.get("base_url") or default_endpoint
    from sweep.runtimes.base import session_cost_limit
    limit = session_cost_limit(req.role.budget.cost_cap_usd, req.cost_limit_usd)
    relay = WireRelay(protocol=protocol, upstream=upstream,
                      credential=credential_for(req.role, req.secrets, read_secret),
                      log_path=Path(req.session_dir) / WIRE_LOG, prices=options.get("prices"),
                      limit_usd=limit, ca_file=options.get("ca_file"))
    req.wire = relay.start(sandboxed=provider.isolation == "bwrap")
    return relay


def cost_disagreement(metered: float, reported: float | None) -> str | None:
    """An anomaly when the CLI's own cost is off the metered one beyond the tolerance."""
    if reported is None:
        return None
    if abs(metered - reported) <= max(TOLERANCE_USD, TOLERANCE_FRACTION * metered):
        return None
    return (f"the CLI reported {reported:.4f} USD, the relay metered {metered:.4f} USD at the plan's prices; "
            "the metered cost is charged")


__all__ = ["open_wire", "credential_for", "cost_disagreement", "WireRelay", "WireEndpoint", "Credential",
           "PLACEHOLDER", "WIRE_LOG"]
