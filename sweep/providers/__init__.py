"""Where commands run: one folder per provider behind the contract in `base.py`.

`get_provider(name, **options)` imports the provider's module only when asked, so `sweep status`
never pays for (or needs) a cloud SDK. Only `local` exists today; `modal` and `daytona` will be
folders next to it.
"""
from __future__ import annotations

import importlib

from runstate.errors import ConfigError
from sweep.providers.base import ExecResult, ExecSpec, OutputChannel, Provider

# provider name -> "module:class", imported lazily
PROVIDERS: dict[str, str] = {
    "local": "sweep.providers.local:LocalProvider",
}


def get_provider(name: str = "local", **options) -> Provider:
    """A ready provider; unknown names and bad options fail here, before any work starts."""
    target = PROVIDERS.get(name)
    if target is None:
        raise ConfigError(f"unknown provider {name!r}; available: {', '.join(sorted(PROVIDERS))}",
                          field="provider", hint="modal and daytona are not implemented yet")
    module_name, cls_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ConfigError(f"bad options for provider {name!r}: {exc}", field="provider") from None


__all__ = ["get_provider", "Provider", "ExecSpec", "ExecResult", "OutputChannel", "PROVIDERS"]
