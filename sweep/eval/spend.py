"""The evaluation's spend ledger, DIR/spend.jsonl: what the plan's `max_spend_usd` is checked against.

Before a cell of an arm with a `budget.max_usd` runs, its envelope is reserved (a line
`{"op": "reserve", "id": "<cell>-<n>", "usd": max_usd}`, appended and fsynced); when its result is
written, the reservation is settled at the cell's cost (`{"op": "settle", "id": ..., "usd": cost}`),
or at the whole envelope when the cost is unknown. Spent = the settled amounts plus the reservations
never settled: a runner killed inside a cell leaves its reservation charged whole (its sessions may
have spent up to it), and the cell's next attempt reserves again under a new id. A cell whose envelope
no longer fits in what the cap has left does not start: the runner stops and says so.
"""
from __future__ import annotations

import os
from pathlib import Path

import orjson

LEDGER = "spend.jsonl"


def _lines(out: Path) -> list[dict]:
    try:
        raw = (out / LEDGER).read_bytes().splitlines()
    except FileNotFoundError:
        return []
    lines = []
    for line in raw:
        try:
            lines.append(orjson.loads(line))
        except ValueError:
            continue            # a line a killed runner left half-written: its reservation never counted
    return lines


def spent(out: Path) -> float:
    """What the evaluation has spent, counting every unsettled reservation whole."""
    reserved: dict[str, float] = {}
    settled: dict[str, float] = {}
    for line in _lines(out):
        (reserved if line.get("op") == "reserve" else settled)[str(line.get("id"))] = float(line.get("usd") or 0.0)
    return sum(settled.get(k, v) for k, v in reserved.items())


def _append(out: Path, entry: dict) -> None:
    fd = os.open(out / LEDGER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, orjson.dumps(entry) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def reserve(out: Path, cell_id: str, usd: float) -> str:
    """Reserve `usd` for an attempt at `cell_id`; the reservation's id."""
    n = sum(1 for line in _lines(out) if line.get("op") == "reserve" and line.get("cell") == cell_id)
    rid = f"{cell_id}-{n + 1}"
    _append(out, {"op": "reserve", "id": rid, "cell": cell_id, "usd": usd})
    return rid


def reserve_within(out: Path, cell_id: str, usd: float, cap: float) -> tuple[str | None, float]:
    """(the reservation's id, or None when `usd` does not fit in what `cap` has left; what was spent
    or reserved before). Under an exclusive flock of DIR/spend.lock: cells run in parallel
    controllers, and two of them must not both fit in the same remainder."""
    import fcntl
    fd = os.open(out / "spend.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        so_far = spent(out)
        if so_far + usd > cap + 1e-9:
            return None, so_far
        return reserve(out, cell_id, usd), so_far
    finally:
        os.close(fd)


def settle(out: Path, rid: str, usd: float) -> None:
    _append(out, {"op": "settle", "id": rid, "usd": usd})
