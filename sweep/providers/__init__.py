"""Where commands run: one folder per provider behind the contract in `base.py`.

`get_provider(name, **options)` imports the provider's module only when asked, so `sweep status`
never pays for (or needs) a cloud SDK. Only `local` exists today; `modal` and `daytona` will be
folders next to it.
"""
from __future__ import annotations

from runstate.errors import ConfigError
from sweep.providers.base import ExecResult, ExecSpec, OutputChannel, Provider
from sweep.registry import Registry

# provider name -> "module:class", imported lazily (modal and daytona are not implemented yet)
PROVIDERS = Registry("provider", "provider", {
    "local": "sweep.providers.local:LocalProvider",
})


def get_provider(name: str = "local", **options) -> Provider:
    """A ready provider; unknown names and bad options fail here, before any work starts."""
    cls = PROVIDERS.load(name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ConfigError(f"bad options for provider {name!r}: {exc}", field="provider") from None


__all__ = ["get_provider", "Provider", "ExecSpec", "ExecResult", "OutputChannel", "PROVIDERS"]
