"""`sweep run`: tick a local-backend campaign until nothing is left to do, on this machine.

Each pass is one ordinary `sweep tick` (the same observe -> plan -> act, the same lock, so a tick
from a shell or a scrontab at the same moment is harmless), then a read of the run records to
report what ended since the last pass. It stops when no run can still end: none is active and
every queued one is held for a reason no tick here can change (it needs more GPUs than the plan
allows) or the campaign is drained. While a role cools down after an outage it keeps ticking and
says what it waits for.

Nothing is kept in memory that the files do not hold: Ctrl-C (or kill) between passes or during
one leaves the campaign exactly as a killed tick does, the local controllers go on in their own
sessions, and `sweep run` again picks up from the files.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runstate.models import RunState
from runstate.runs import list_runs


@dataclass
class DriveResult:
    counts: dict[str, int] = field(default_factory=dict)   # queued, active, and each outcome
    ended_now: int = 0                                       # runs that ended during this call
    stuck: list[str] = field(default_factory=list)           # queued runs no tick here can admit
    reason: str = "done"                                     # done | drained | breaker | timeout
    breaker: str | None = None                               # the circuit breaker's trip, when it stopped
    duration_s: float = 0.0


def _stuck_forever(rec) -> bool:
    """A queued run that no tick can admit (it needs more GPUs than the plan or the lanes give)."""
    return rec.state is RunState.queued and bool(rec.hold_reason) and rec.hold_reason.startswith("needs ")


def _ending_line(rec) -> str:
    reason = f": {rec.reason}" if rec.reason else ""
    detail = f" ({rec.last_error[:200]})" if rec.last_error else ""
    return f"ended {rec.run_id}: {rec.outcome.value if rec.outcome else 'ended'}{reason}{detail}"


def drive_campaign(campaign: Path, *, echo: Callable[[str], None] = print, pause_s: float = 1.0,
                   timeout_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                   stop: Callable[[dict], str | None] | None = None) -> DriveResult:
    """Tick until no run can still end (or `timeout_s`, or `stop(records)` gives a reason while no
    run is active); echo one line per ending and per change."""
    from sweep import textsafe
    from sweep.tick import run_tick

    def say(text: str) -> None:                 # endings and tick errors carry untrusted text
        echo(textsafe.line(text))

    campaign = Path(campaign)
    started = clock()
    seen_ended: set[str] | None = None
    last_line = None
    result = DriveResult()
    while True:
        outcome = run_tick(campaign)
        records = list_runs(campaign).records
        ended = {rid for rid, rec in records.items() if rec.state is RunState.ended}
        if seen_ended is not None:
            for rid in sorted(ended - seen_ended):
                say(_ending_line(records[rid]))
                result.ended_now += 1
        seen_ended = ended
        counts: dict[str, int] = {"queued": 0, "active": 0}
        for rec in records.values():
            key = rec.outcome.value if rec.outcome else rec.state.value
            counts[key] = counts.get(key, 0) + 1
        result.counts = counts
        line = " · ".join(f"{k} {v}" for k, v in counts.items())
        report = outcome.report
        if report is not None and report.waiting and counts.get("queued"):
            line += "  (waiting: " + "; ".join(f"{why}: {len(runs)}" for why, runs in sorted(report.waiting.items())) + ")"
        if line != last_line:
            say(f"[{clock() - started:6.1f}s] {line}")
            last_line = line
        for err in (report.errors if report else [])[:3]:
            say(f"  tick error: {err}")
        result.stuck = sorted(rid for rid, rec in records.items() if _stuck_forever(rec))
        active = counts.get("active", 0)
        endable = [r for r in records.values() if r.state is not RunState.ended and not _stuck_forever(r)]
        if not endable:
            result.reason = "done"
            break
        if active == 0 and stop is not None and (why := stop(records)) is not None:
            result.reason = why
            break
        if active == 0 and report is not None and report.draining:
            result.reason = "drained"
            break
        if active == 0:
            from runstate.breaker import breaker_line
            result.breaker = breaker_line(campaign)
            if result.breaker:
                say(result.breaker)
                result.reason = "breaker"
                break
        if timeout_s is not None and clock() - started > timeout_s:
            result.reason = "timeout"
            break
        time.sleep(pause_s)
    result.duration_s = clock() - started
    return result


def drive_eval(out: Path, *, echo: Callable[[str], None] = lambda _: None) -> tuple[int, int, str | None]:
    """`sweep eval run`: tick a local evaluation (docs/eval.md) until no cell can still end; (cells
    that got their result now, cells that had it before, why some cell has none or None). It stops
    early, once no cell is active, when a cell is parked (its session failed on its model
    endpoint: the solver role cools down), and says so for a cell ended by the max_spend_usd cap."""
    from runstate.errors import ConfigError
    from sweep.campaign import Campaign
    from sweep.credentials import register_known_secrets
    from sweep.eval.cells import load_eval, read_result
    from sweep.eval.run import check_secrets, write_job_locked
    frozen, manifest = load_eval(out)
    register_known_secrets(frozen.plan)      # every text a session stores is scrubbed of them
    check_secrets(out, frozen)
    if Campaign.load(out).settings.scheduler.backend != "local":
        raise ConfigError("`sweep eval run` ticks a local evaluation; with another scheduler backend, "
                          "`sweep tick` (from scrontab: `sweep scrontab`) runs its cells", field="scheduler.backend")
    write_job_locked(out, frozen, manifest)          # what a controller killed after a cell's result left out

    def results() -> int:
        return sum(read_result(out, c.cell_id) is not None for c in manifest.cells)

    def why_not(records: dict) -> str | None:
        parked = sorted(r.run_id for r in records.values() if r.state is RunState.queued and r.parked_until)
        if parked:
            rec = records[parked[0]]
            return f"cell {rec.run_id} is parked: {rec.last_error or rec.cause_detail or ''}"
        return None
    before = results()
    drive_campaign(out, echo=echo, pause_s=0.5, stop=why_not)
    records = list_runs(out).records
    capped = sorted(r.run_id for r in records.values() if r.reason == "budget_exhausted")
    parked = why_not(records)
    stopped = parked or (records[capped[0]].cause_detail if capped else None)
    return results() - before, before, stopped
