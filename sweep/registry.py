"""One small lazy registry for the three plugin mechanisms: scheduler backends, providers and
session runtimes.

Each maps a name (what a plan writes) to "module:attribute", imported only when that name is
used, so `sweep status` never imports a backend or an SDK. A name the registry does not know is a
ConfigError listing the known ones; a plugin whose third-party package is missing is a
ConfigError naming the extra that installs it (`pip install 'sweep[modal]'`), not an ImportError
from deep inside the plugin.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from runstate.errors import ConfigError

OUR_PACKAGES = ("sweep", "runstate", "roles", "sbatch")


@dataclass(frozen=True)
class Plugin:
    target: str                 # "package.module:Attribute"
    extra: str | None = None    # the optional-dependencies extra its third-party package comes from


class Registry(Mapping[str, Plugin]):
    """name -> Plugin; `load(name)` imports and returns the attribute (usually a class)."""

    def __init__(self, kind: str, field: str, plugins: Mapping[str, Plugin | str]) -> None:
        self.kind = kind            # "provider", "session runtime", "scheduler backend"
        self.field = field          # the plan field that names it, for the error
        self._plugins = {name: p if isinstance(p, Plugin) else Plugin(p) for name, p in plugins.items()}

    def __getitem__(self, name: str) -> Plugin:
        return self._plugins[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._plugins)

    def __len__(self) -> int:
        return len(self._plugins)

    def register(self, name: str, plugin: Plugin | str) -> None:
        """Add a plugin under a name it does not have yet (the shipped ones are the literal tables:
        SCHEDULERS, PROVIDERS, RUNTIMES; this is how an extension or a test adds one)."""
        if name in self._plugins:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        self._plugins[name] = plugin if isinstance(plugin, Plugin) else Plugin(plugin)

    def unregister(self, name: str) -> None:
        self._plugins.pop(name, None)

    def unknown(self, name: str) -> ConfigError:
        return ConfigError(f"unknown {self.kind} {name!r}; available: {', '.join(sorted(self._plugins))}",
                           field=self.field)

    def load(self, name: str) -> Any:
        plugin = self._plugins.get(name)
        if plugin is None:
            raise self.unknown(name)
        module_name, _, attr = plugin.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if not missing or missing in OUR_PACKAGES:
                raise           # our own module is missing: a packaging bug, not a missing extra
            how = f"pip install 'sweep[{plugin.extra}]'" if plugin.extra else f"install {missing!r}"
            raise ConfigError(f"{self.kind} {name!r} needs the package {missing!r}, which is not installed",
                              field=self.field, hint=how) from None
        return getattr(module, attr)
