"""The wire between an agent CLI and its model API: credential, metering and budget (relay.py).

`open_wire` decides whether a session goes through a relay: an agent CLI whose runtime's facts name
the protocol it speaks (`RuntimeFacts.wire_protocol`: claude-code "anthropic", codex "openai"; for
the command runtime, the plan's `protocol` option), run by a provider
that can map a sandbox endpoint onto a local socket (the local provider). It finds the credential
(the plan's `[secrets]` entry, else the family's variable in the controller's environment), which
from then on exists only in the relay: the session gets a placeholder and none of the family's
variables. Sessions on a remote provider (the solver in the task's image on Modal or Daytona) cannot
reach the relay: such a session would keep the key in its environment, so it is refused
(`refuse_key_in_sandbox`; `sweep init` refuses the plan first) unless the plan's
`[providers.<name>] agent_key_in_sandbox = true` accepts it, and then its record says so
(`KEY_IN_SANDBOX`; docs/security.md).
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


KEY_IN_SANDBOX = ("the model key was inside the remote {provider} sandbox (no relay reaches it: nothing "
                  "metered or hid the key; the plan sets [providers.{provider}] agent_key_in_sandbox = true); "
                  "the cost is self-reported")


def wire_protocol(runtime, options: dict) -> tuple[str | None, str | None]:
    """(protocol, default endpoint) of the model API a runtime's sessions speak, or (None, None):
    the runtime's facts, or the plan's `protocol` option of the command runtime."""
    protocol = runtime.facts.wire_protocol
    default_endpoint = runtime.facts.default_endpoint
    if protocol is None and hasattr(runtime, "wire_protocol_for"):
        protocol = runtime.wire_protocol_for(options)
        default_endpoint = runtime.default_endpoint_for(options)
    return protocol, default_endpoint


def refuse_key_in_sandbox(req, runtime, provider, options: dict) -> str | None:
    """For a session that speaks a model API but runs where no relay reaches (a remote provider):
    a ConfigError unless the provider's plan settings accept the key in the sandbox; then the note
    its record carries. None for every session this does not concern."""
    from runstate.errors import ConfigError
    protocol, _ = wire_protocol(runtime, options)
    if protocol is None or getattr(provider, "wire_relay", False) or req.role.network == "none":
        return None
    name = getattr(provider, "name", "remote")
    if not getattr(provider, "agent_key_in_sandbox", False):
        raise ConfigError(f"role {req.role.name} is played by runtime {req.runtime} on provider {name}: its model "
                          "key would sit inside the remote sandbox, where no relay meters or hides it",
                          field=f"providers.{name}.agent_key_in_sandbox",
                          hint=f"set [providers.{name}] agent_key_in_sandbox = true to accept that knowingly, "
                               "or run the candidate on provider = \"local\"")
    return KEY_IN_SANDBOX.format(provider=name)


def open_wire(req, runtime, provider, options: dict, read_secret) -> WireRelay | None:
    """Start the session's relay, or None when the session is not relayed (see the module docstring)."""
    protocol, default_endpoint = wire_protocol(runtime, options)
    if protocol is None or not getattr(provider, "wire_relay", False) or req.role.network == "none":
        return None
    upstream = options.get("base_url") or default_endpoint
    from sweep.runtimes.base import session_cost_limit
    limit = session_cost_limit(req.role.budget.cost_cap_usd, req.cost_limit_usd)
    relay = WireRelay(protocol=protocol, upstream=str(upstream),
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


__all__ = ["open_wire", "wire_protocol", "refuse_key_in_sandbox", "KEY_IN_SANDBOX", "credential_for", "cost_disagreement", "WireRelay", "WireEndpoint", "Credential",
           "PLACEHOLDER", "WIRE_LOG"]
