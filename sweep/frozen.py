"""Frozen runtimes (filled in with `sweep runtime freeze`)."""
from __future__ import annotations

from pathlib import Path


def frozen_controller_command(campaign_dir: Path) -> list[str] | None:
    return None


def check_runtime(campaign_dir: Path) -> str | None:
    """The frozen runtime's sha256, after checking this process runs it; None when none is frozen."""
    return None
