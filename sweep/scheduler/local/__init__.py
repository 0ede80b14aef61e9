"""The local backend: controller jobs as detached processes on this machine.

`LocalScheduler` is loaded on first access, so the launcher (`python -m
sweep.scheduler.local.launch`, which runs in every local job before the controller) imports only
the stdlib-only records module.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweep.scheduler.local.scheduler import LocalScheduler

__all__ = ["LocalScheduler"]


def __getattr__(name: str) -> object:
    if name == "LocalScheduler":
        from sweep.scheduler.local.scheduler import LocalScheduler
        return LocalScheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
