"""Frozen runtimes (filled in with `sweep runtime freeze`)."""
from __future__ import annotations

from pathlib import Path


def frozen_controller_command(campaign_dir: Path) -> list[str] | None:
    return None
