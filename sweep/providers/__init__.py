"""Where commands run: one folder per provider behind the contract in `base.py`.

`get_provider(name, **options)` imports the provider's module only when asked, so `sweep status`
never pays for (or needs) a cloud SDK. `local` runs one command; `daytona` is a remote sandbox
behind the lifecycle contract (`get_sandbox_provider`); `modal` likewise.
"""
from __future__ import annotations

from runstate.errors import ConfigError
from sweep.providers.base import ExecResult, ExecSpec, OutputChannel, Provider
from sweep.registry import Plugin, Registry

# Execution providers (sweep.execution.Provider), name -> "module:class", imported lazily: they run
# one command (ExecSpec) on this host. Every session and trial runs through one; a candidate whose
# plan `provider` is remote gets a ContainerRunner (sweep/providers/container.py) over the sandbox
# provider below instead.
PROVIDERS = Registry("provider", "provider", {
    "local": "sweep.providers.local:LocalProvider",
})

# Sandbox providers: remote sandboxes behind the lifecycle contract (base.SandboxProvider): create,
# upload, exec, download, terminate, list by tags. The controller runs a remote candidate's gates,
# trials and solver sessions in them through ContainerRunner; `sweep reconcile` terminates what dead
# controllers left (docs/providers.md). A missing SDK is a ConfigError naming the extra.
SANDBOX_PROVIDERS = Registry("sandbox provider", "provider", {
    "local": "sweep.providers.local_sandbox:LocalSandboxes",
    "daytona": Plugin("sweep.providers.daytona:DaytonaProvider", extra="daytona"),
    "modal": Plugin("sweep.providers.modal:ModalProvider", extra="modal"),
})


def get_provider(name: str = "local", **options) -> Provider:
    """A ready provider; unknown names and bad options fail here, before any work starts."""
    cls = PROVIDERS.load(name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ConfigError(f"bad options for provider {name!r}: {exc}", field="provider") from None


def get_sandbox_provider(name: str, **options):
    """A ready remote sandbox provider (SandboxProvider); its SDK is imported here, not before."""
    cls = SANDBOX_PROVIDERS.load(name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ConfigError(f"bad options for provider {name!r}: {exc}", field="provider") from None


__all__ = ["get_provider", "get_sandbox_provider", "SANDBOX_PROVIDERS", "Provider", "ExecSpec", "ExecResult", "OutputChannel", "PROVIDERS"]
