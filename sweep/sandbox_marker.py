"""The campaign marker that stops admission while remote sandboxes may be orphaned.

`sandboxes-uncertain.json` in the campaign directory. Written when a terminate is not confirmed
and when the tick reaps a dead controller that left open sandbox receipts; removed by
`sweep reconcile` once every open receipt of a dead job is settled (sweep/providers/receipts.py).
Kept import-light: `sweep status` and the tick read it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from runstate.atomic import write_atomic
from runstate.paths import UNCERTAIN_FILE, CampaignPaths


def mark_uncertain(campaign_dir: Path, reason: str) -> None:
    """Stop admission until `sweep reconcile` settles every open receipt of a dead job. Written
    when a terminate is not confirmed and when the tick reaps a dead controller that left open
    receipts. Only the first reason is kept (the marker says why it was first raised)."""
    path = CampaignPaths(campaign_dir).sandboxes_uncertain
    if path.exists():
        return
    write_atomic(path, json.dumps({"reason": reason, "since": time.time()}).encode())


def read_uncertain(campaign_dir: Path) -> str | None:
    """The marker's reason, or None when there is no marker. An unreadable marker still counts."""
    path = CampaignPaths(campaign_dir).sandboxes_uncertain
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return f"{UNCERTAIN_FILE} is unreadable"
    return str(data.get("reason") or "remote sandboxes uncertain") if isinstance(data, dict) else \
        f"{UNCERTAIN_FILE} is not an object"


def clear_uncertain(campaign_dir: Path) -> bool:
    try:
        CampaignPaths(campaign_dir).sandboxes_uncertain.unlink()
    except FileNotFoundError:
        return False
    return True
