"""The circuit breaker: a campaign that fails the same way run after run stops admitting by itself.

Every ending and every failed attempt carries a cause (runstate/causes.py). A cause whose scope is
`campaign` (the test command is not found, no test is collected, the image cannot be built, a
provider's configuration is wrong: the plan's `breaker.causes`) says nothing about the PR, so the
next run will fail the same way. When `breaker.after` distinct runs of one lane in a row end or
fail with one such cause, the breaker trips: `breaker.json` in the campaign records the cause, the
lane and the runs, and every tick admits nothing until the operator says
`sweep undrain --ack CAUSE` (after fixing what the cause names). Any other cause or a verified
run in that lane resets the lane's streak.

Writers are controllers, concurrently: each update is a read-modify-write of `breaker.json` under
an exclusive flock(2) of `breaker.lock`, replaced by atomic rename. A controller killed before its
update only leaves one run out of a streak (the breaker trips one run later); a torn or garbage
file cannot exist (rename), and an unreadable one is reported and counts as not tripped for
admission only after the operator removes it — it is read tolerantly, like every marker.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runstate.errors import StateError
from runstate.files import Loaded, read_model, write_model_atomic

BREAKER_FILE = "breaker.json"
BREAKER_LOCK = "breaker.lock"
KEEP_RUNS = 20                        # run ids kept per streak (the count stays whole)


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Streak(_Tolerant):
    cause: str
    count: int = 0                    # distinct runs in a row with this cause
    runs: list[str] = Field(default_factory=list)
    since: float = 0.0
    detail: str = ""                  # the last one's detail


class Trip(_Tolerant):
    cause: str
    lane: str
    count: int
    runs: list[str] = Field(default_factory=list)
    at: float
    detail: str = ""


class BreakerState(_Tolerant):
    schema_version: int = 1
    streaks: dict[str, Streak] = Field(default_factory=dict)     # lane -> its current streak
    tripped: Trip | None = None
    acks: list[dict[str, Any]] = Field(default_factory=list)               # what operators acknowledged, last 20


def breaker_path(campaign: Path | str) -> Path:
    return Path(campaign) / BREAKER_FILE


def read_breaker(campaign: Path | str) -> Loaded[BreakerState]:
    return read_model(breaker_path(campaign), BreakerState)


def tripped(campaign: Path | str) -> Trip | None:
    """The trip that stops admission, or None. An unreadable breaker.json stops admission too (it
    may be a trip): the tick reports it, and the operator removes it or acknowledges it."""
    loaded = read_breaker(campaign)
    if loaded.value is not None:
        return loaded.value.tripped
    if loaded.missing:
        return None
    return Trip(cause="unreadable_breaker", lane="*", count=0, at=0.0,
                detail=f"{BREAKER_FILE} is unreadable ({loaded.problem}); remove it or `sweep undrain --ack unreadable_breaker`")


def trip_line(trip: Trip) -> str:
    runs = ", ".join(trip.runs[-3:]) + (f" and {len(trip.runs) - 3} more" if len(trip.runs) > 3 else "")
    return (f"circuit breaker: {trip.cause} in lane {trip.lane}, {trip.count} run{'' if trip.count == 1 else 's'} "
            f"in a row" + (f" ({runs})" if runs else "") + f"; no admissions until `sweep undrain --ack {trip.cause}`")


def breaker_line(campaign: Path | str) -> str | None:
    """The one line the tick and status show while the breaker stops admission, else None."""
    trip = tripped(campaign)
    return trip_line(trip) if trip is not None else None


class _Locked:
    def __init__(self, campaign: Path) -> None:
        self.path = Path(campaign) / BREAKER_LOCK

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)             # closing drops the lock


def _current(campaign: Path) -> BreakerState:
    loaded = read_breaker(campaign)
    return loaded.value if loaded.value is not None else BreakerState()


def note_result(campaign: Path | str, *, lane: str, run_id: str, cause: str | None, detail: str = "",
                after: int, causes: tuple[str, ...] | list[str], now: float | None = None) -> Trip | None:
    """Record one ending or failed attempt (cause None: verified) of `run_id` in `lane`; returns
    the trip when this one tripped the breaker. `after` 0 turns the breaker off."""
    if after <= 0:
        return None
    campaign = Path(campaign)
    now = time.time() if now is None else now
    with _Locked(campaign):
        state = _current(campaign)
        streak = state.streaks.get(lane)
        if cause is None or cause not in causes:
            if streak is None:
                return None
            state.streaks.pop(lane, None)
        else:
            if streak is None or streak.cause != cause:
                streak = Streak(cause=cause, since=now)
            if run_id not in streak.runs:
                streak.count += 1
                streak.runs = [*streak.runs, run_id][-KEEP_RUNS:]
            streak.detail = detail[:300]
            state.streaks[lane] = streak
            if state.tripped is None and streak.count >= after:
                state.tripped = Trip(cause=cause, lane=lane, count=streak.count, runs=streak.runs, at=now,
                                     detail=streak.detail)
        write_model_atomic(breaker_path(campaign), state)
        return state.tripped if state.tripped and state.tripped.at == now else None


def acknowledge(campaign: Path | str, cause: str, *, who: str = "") -> Trip:
    """`sweep undrain --ack CAUSE`: clear the trip (the streaks restart from nothing)."""
    campaign = Path(campaign)
    with _Locked(campaign):
        loaded = read_breaker(campaign)
        if loaded.value is None and not loaded.missing:
            if cause != "unreadable_breaker":
                raise StateError(f"{BREAKER_FILE} is unreadable ({loaded.problem})", path=breaker_path(campaign),
                                 hint="acknowledge it with `sweep undrain --ack unreadable_breaker`")
            os.unlink(breaker_path(campaign))
            return Trip(cause=cause, lane="*", count=0, at=time.time())
        state = loaded.value or BreakerState()
        trip = state.tripped
        if trip is None:
            raise StateError("the circuit breaker has not tripped; nothing to acknowledge",
                             path=breaker_path(campaign))
        if trip.cause != cause:
            raise StateError(f"the breaker tripped on {trip.cause!r}, not {cause!r}", path=breaker_path(campaign),
                             hint=f"sweep undrain --ack {trip.cause}")
        state.acks = [*state.acks, {"cause": cause, "lane": trip.lane, "by": who, "at": time.time(),
                                    "tripped_at": trip.at}][-20:]
        state.tripped = None
        state.streaks = {}
        write_model_atomic(breaker_path(campaign), state)
        return trip
