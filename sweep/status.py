"""`sweep status`: the campaign as its files say, with zero scheduler calls.

What a human needs at a glance: is the tick alive (age of tick.json against the interval), is the
campaign draining or drained, how many runs are in each state and outcome, what is running where,
which roles are cooling down, and what is stuck and why.
"""
from __future__ import annotations

import gc
import heapq
import os
import time
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, TypedDict

from runstate.breaker import breaker_line
from runstate.files import read_model
from runstate.markers import read_drain, read_outage, read_provider_stamps
from sweep.sandbox_marker import read_uncertain
from runstate.models import COOLDOWN_KEYS, QueueFile, RunState, TickReport, quality_summary
from runstate.paths import CampaignPaths
from runstate.runs import RunScan, runs_root, scan_runs
from sweep import textsafe
from sweep.campaign import load_campaign
from sweep.status_queue import QueueSummary, Replanned, SlurmJobView, queue_summary, replan, slurm_view
from sweep.tick.queue_file import read_queue_file


# The rows and parts of `sweep status --json` (docs/cli.md): plain JSON objects, typed here.
class ActiveRow(TypedDict):
    run_id: str
    job_id: str | None
    lane: str
    gpus: int
    phase: str
    attempts: int
    max_attempts: int
    interruptions: int
    max_interruptions: int
    slurm: SlurmJobView | None       # its job in the last queue snapshot; None: submitted after it


class _HeldRequired(TypedDict):
    run_id: str
    reason: str
    lane: str


class HeldRow(_HeldRequired, total=False):
    submitting_since: float          # only while a submission is in flight


class ErrorRow(TypedDict):
    run_id: str
    error: str


class EndedRow(TypedDict):
    run_id: str
    outcome: str
    reason: str | None
    lane: str
    cause: str | None                # runstate/causes.py; None for verified (and for endings before causes)
    quality: str | None         # "mutants 2/2": whether its tests discriminate (runstate.models.quality_summary)


class QueuedRow(TypedDict):
    run_id: str
    lane: str
    attempts: int
    max_attempts: int
    phase: str


class TickSummary(TypedDict):
    age_s: float
    duration_s: float
    squeue_known: bool
    squeue_error: str | None
    stale: bool
    errors: list[str]
    actions: int
    ghosts: list[dict[str, Any]]
    waiting: dict[str, int]
    accounting: str
    accounting_error: str | None


class DrainInfo(TypedDict):
    requested_by: str | None
    reason: str | None
    requested_at: float | None
    drained: bool
    active: int
    held_leases: int


class _CooldownRequired(TypedDict):
    role: str
    kind: str
    left_s: float
    detail: str | None


class CooldownRow(_CooldownRequired, total=False):
    canary: bool                     # the cooldown is over: one canary run is admitted


class _ProviderCooldownRequired(TypedDict):
    provider: str
    kind: str
    detail: str | None
    left_s: float


class ProviderCooldownRow(_ProviderCooldownRequired, total=False):
    canary: bool                     # the provider's cooldown is over: one canary run on it


class LaneRow(TypedDict):
    lane: str
    failures: int
    until: float
    left_s: float
    message: str


class Spend(TypedDict):
    spent_usd: float
    cap_usd: float | None


@dataclass
class StatusReport:
    """What `sweep status` shows, and (via `as_json`) the object `sweep status --json` prints: the
    field names are the JSON keys, in this order. `queued` is present only when asked for,
    `filters` and `show_verified` only when set; `ended_capped` is never printed."""

    campaign: str
    lanes_backing_off: list[LaneRow]
    name: str
    campaign_id: str
    isolation: str
    backend: str
    target_verified: int
    runs: int
    counts: dict[str, int]                # queued, active, ended
    outcomes: dict[str, int]              # ended runs per outcome
    corrupt: dict[str, str]               # run id -> problem
    tick: TickSummary | None
    interval_s: float
    draining: bool
    drain: DrainInfo | None
    cooldowns: list[CooldownRow]
    provider_cooldowns: list[ProviderCooldownRow]
    sandboxes_uncertain: str | None
    active: list[ActiveRow]
    held: list[HeldRow]
    errors: list[ErrorRow]
    ended: list[EndedRow]                 # by run id; all of them unless ended_capped
    held_leases: int
    attempts_spent: int
    interruptions: int
    interrupted_by: dict[str, int]
    spend: Spend
    causes: dict[str, int] = field(default_factory=dict)   # ended runs per cause (runstate/causes.py)
    breaker: str | None = None            # the circuit breaker's trip, one line (runstate/breaker.py)
    prior_verified: int = 0               # valid priors (sweep/priors.py): they count toward the target
    queue: QueueSummary | None = None     # the last tick's queue read (queue.json); None before one
    queued: list[QueuedRow] | None = None
    filters: str | None = None
    show_verified: bool = False
    # remote providers on which agent solver sessions hold their model key (agent_key_in_sandbox)
    key_in_sandbox: list[str] = field(default_factory=list)
    # the human view asked for at most N ended rows per outcome: `outcomes` has the totals
    ended_capped: bool = False

    def as_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        del out["ended_capped"]
        for key, unset in (("queued", None), ("filters", None), ("show_verified", False)):
            if out[key] is unset:
                del out[key]
        if not out["key_in_sandbox"]:
            del out["key_in_sandbox"]      # only a plan's opt-in adds the key (the shape is kept otherwise)
        return out


def collect_status(campaign_dir: Path, now: float | None = None, *, include_queued: bool = False,
                   ended_limit: int | None = None) -> StatusReport:
    """The campaign's status from its files. `ended_limit`: keep at most that many ended rows per
    outcome (the first by run id; the human view shows 20) instead of one per ended run."""
    collecting = gc.isenabled()
    gc.disable()     # acyclic records and dicts: see sweep/tick/__init__.py
    try:
        return _collect_status(campaign_dir, now, include_queued, ended_limit)
    finally:
        if collecting:
            gc.enable()


def _collect_status(campaign_dir: Path, now: float | None, include_queued: bool = False,
                    ended_limit: int | None = None) -> StatusReport:
    now = time.time() if now is None else now
    campaign_dir = Path(campaign_dir).resolve()
    campaign = load_campaign(campaign_dir)
    s = campaign.settings
    listing = scan_runs(campaign_dir)    # ended runs the index vouches for are not read (a stat each)
    tick_loaded = read_model(CampaignPaths(campaign_dir).tick_report, TickReport)
    qf = read_queue_file(campaign_dir)
    # why each queued run waits: the tick's planner run again now, on the files and that queue
    replanned = replan(campaign_dir, campaign, listing, qf, now)
    t = _tally_runs(listing, replanned, qf, os.fspath(runs_root(campaign_dir)), now, include_queued)
    ended = _ended_rows(listing, t, ended_limit)
    interval_s = s.tick.interval_minutes * 60
    draining, drain_info = _drain_info(campaign_dir, t.counts["active"], t.held_leases)
    cooldowns, provider_cooldowns = _cooldowns(campaign_dir, now)
    return StatusReport(
        campaign=str(campaign_dir), lanes_backing_off=_lanes_backing_off(campaign_dir, now), name=s.name,
        campaign_id=campaign.campaign_id,
        isolation=getattr(s, "isolation", "bwrap"), backend=s.scheduler.backend,
        target_verified=s.target_verified, prior_verified=len(campaign.priors), runs=listing.run_count,
        counts=t.counts, outcomes=t.outcomes,
        corrupt=listing.corrupt, tick=_tick_summary(tick_loaded.value, now, interval_s), interval_s=interval_s,
        draining=draining, drain=drain_info,
        cooldowns=cooldowns, provider_cooldowns=provider_cooldowns,
        sandboxes_uncertain=read_uncertain(campaign_dir), active=t.active, held=t.held,
        errors=t.errors, ended=ended, held_leases=t.held_leases, attempts_spent=t.attempts_spent,
        interruptions=t.interruptions, interrupted_by=t.interrupted_by,
        spend={"spent_usd": round(t.spent, 6), "cap_usd": s.max_spend_usd},
        causes=_count_causes(t.ended_read, listing.settled.values()), breaker=breaker_line(campaign_dir),
        queue=queue_summary(qf, now),
        queued=t.queued if include_queued else None, ended_capped=ended_limit is not None,
        key_in_sandbox=sorted(n for n, p in s.providers.items() if p.agent_key_in_sandbox))


@dataclass
class _Tally:
    """What status counts over the runs it read (the ended runs the index vouches for come after)."""
    counts: dict[str, int]
    outcomes: dict[str, int]
    active: list[ActiveRow]
    held: list[HeldRow]
    errors: list[ErrorRow]
    ended_read: list[EndedRow]
    queued: list[QueuedRow]
    held_leases: int
    spent: float          # final spend of ended runs + what in-flight runs have committed (spend.json)
    attempts_spent: int
    interruptions: int
    interrupted_by: dict[str, int]


def _tally_runs(listing: RunScan, replanned: Replanned, qf: QueueFile | None, root: str, now: float,
                include_queued: bool) -> _Tally:
    """One pass over the runs read from their files: counts, rows and spend (locals in the loop:
    it runs once per run, 90,000 of them in a large campaign)."""
    counts: dict[str, int] = {"queued": 0, "active": 0, "ended": 0}
    outcomes: dict[str, int] = {}
    active: list[ActiveRow] = []
    held: list[HeldRow] = []
    errors: list[ErrorRow] = []
    ended_read: list[EndedRow] = []
    queued: list[QueuedRow] = []
    held_leases = 0
    spent = 0.0
    waiting_reason = replanned.reasons
    attempts_spent = interruptions = 0
    interrupted_by: dict[str, int] = {}
    for run_id, rec in listing.records.items():
        counts[rec.state.value] += 1
        attempts_spent += rec.attempts
        interruptions += rec.interruptions
        for cause, n in rec.interrupted_by.items():
            interrupted_by[cause] = interrupted_by.get(cause, 0) + n
        if run_id in replanned.leases:
            held_leases += 1
        if rec.state is RunState.ended and rec.outcome is not None:  # the record's checks pair the two
            key = rec.outcome.value
            outcomes[key] = outcomes.get(key, 0) + 1
            ended_read.append({"run_id": run_id, "outcome": key, "reason": rec.reason, "lane": rec.lane,
                               "cause": rec.cause, "quality": quality_summary(rec.checkpoints)})
            spent += rec.spent_usd
        elif rec.state is RunState.active:
            active.append({"run_id": run_id, "job_id": rec.job_id, "lane": rec.lane, "gpus": rec.gpus,
                           "phase": rec.phase, "attempts": rec.attempts,
                           "max_attempts": rec.max_attempts, "interruptions": rec.interruptions,
                           "max_interruptions": rec.max_interruptions,
                           "slurm": slurm_view(qf, rec.job_id, now)})
        if rec.state is not RunState.ended and (rec.attempts or rec.state is RunState.active
                                                or rec.checkpoints):
            spent += _committed(f"{root}/{run_id}/spend.json")   # only runs that may have spent
        if include_queued and rec.state is RunState.queued:
            queued.append({"run_id": run_id, "lane": rec.lane, "attempts": rec.attempts,
                           "max_attempts": rec.max_attempts, "phase": rec.phase})
        if rec.state is RunState.queued:
            reason = waiting_reason.get(run_id) or rec.hold_reason or (
                f"parked ({rec.parked_role})" if rec.parked_until else "waiting for the next tick")
            entry: HeldRow = {"run_id": run_id, "reason": reason, "lane": rec.lane}
            if rec.submitting_since is not None:
                entry["submitting_since"] = rec.submitting_since
            held.append(entry)
        if rec.last_error and rec.state is not RunState.ended:
            errors.append({"run_id": run_id, "error": rec.last_error})
    return _Tally(counts=counts, outcomes=outcomes, active=active, held=held, errors=errors,
                  ended_read=ended_read, queued=queued, held_leases=held_leases, spent=spent,
                  attempts_spent=attempts_spent, interruptions=interruptions, interrupted_by=interrupted_by)


def _ended_rows(listing: RunScan, t: _Tally, ended_limit: int | None) -> list[EndedRow]:
    """The ended rows, those read and those the index vouched for merged in run-id order (at most
    `ended_limit` per outcome); the index's runs are added to the tally's counts and spend."""
    if listing.settled:       # ended runs the index vouched for: what status shows of them is in it
        settled = listing.settled
        t.counts["ended"] += len(settled)
        for e in settled.values():
            t.outcomes[e.outcome] = t.outcomes.get(e.outcome, 0) + 1
            t.spent += e.spent_usd
        from_index: Iterator[EndedRow] = (
            {"run_id": rid, "outcome": e.outcome, "reason": e.reason, "lane": e.lane, "cause": e.cause,
             "quality": e.quality}
            for rid, e in settled.items())
        # both are in run-id order (scan_runs walks the sorted listing): merge, never sort
        rows = heapq.merge(t.ended_read, from_index, key=_run_id) if t.ended_read else from_index
        return _first_per_outcome(rows, ended_limit) if ended_limit is not None else list(rows)
    if ended_limit is not None:
        return _first_per_outcome(iter(t.ended_read), ended_limit)
    return t.ended_read


def _tick_summary(t: TickReport | None, now: float, interval_s: float) -> TickSummary | None:
    """The last tick as tick.json tells it, with its age (stale past three intervals)."""
    if t is None:
        return None
    age = now - t.finished_at
    return {"age_s": age, "duration_s": t.duration_s, "squeue_known": t.squeue_known,
            "squeue_error": t.squeue_error, "stale": age > 3 * interval_s,
            "errors": t.errors, "actions": len(t.actions), "ghosts": t.ghosts,
            "waiting": {reason: len(ids) for reason, ids in t.waiting.items()},
            "accounting": t.accounting, "accounting_error": t.accounting_error}


def _drain_info(campaign_dir: Path, active: int, held_leases: int) -> tuple[bool, DrainInfo | None]:
    """Whether a drain was asked for, and by whom, why, and whether it is done (nothing active, no lease)."""
    drain = read_drain(campaign_dir)
    if drain.missing:
        return False, None
    d = drain.value
    return True, {"requested_by": d.requested_by if d else None, "reason": d.reason if d else None,
                  "requested_at": d.requested_at if d else None, "drained": active == 0 and held_leases == 0,
                  "active": active, "held_leases": held_leases}


def _cooldowns(campaign_dir: Path, now: float) -> tuple[list[CooldownRow], list[ProviderCooldownRow]]:
    """Each role's and each provider's outage stamp: its time left, or a canary once it has run out."""
    cooldowns: list[CooldownRow] = []
    for role in COOLDOWN_KEYS:
        stamp = read_outage(campaign_dir, role).value
        if stamp is not None and stamp.is_active(now):
            cooldowns.append({"role": role, "kind": stamp.kind, "left_s": stamp.until - now,
                              "detail": stamp.detail})
        elif stamp is not None:
            cooldowns.append({"role": role, "kind": stamp.kind, "left_s": 0.0, "detail": stamp.detail,
                              "canary": True})
    provider_cooldowns: list[ProviderCooldownRow] = []
    for provider, pstamp in sorted(read_provider_stamps(campaign_dir).items()):
        live = pstamp.is_active(now)
        row: ProviderCooldownRow = {"provider": provider, "kind": pstamp.kind, "detail": pstamp.detail,
                                    "left_s": max(0.0, pstamp.until - now) if live else 0.0}
        if not live:
            row["canary"] = True
        provider_cooldowns.append(row)
    return cooldowns, provider_cooldowns


def _lanes_backing_off(campaign_dir: Path, now: float) -> list[LaneRow]:
    from sweep.tick.act import read_lane_backoff
    return [{"lane": lane, "failures": b.failures, "until": b.until,
             "left_s": max(0.0, b.until - now), "message": b.message}
            for lane, b in sorted(read_lane_backoff(campaign_dir).items()) if b.failures]


def _run_id(row: EndedRow) -> str:
    return row["run_id"]


def _first_per_outcome(rows: Iterator[EndedRow], limit: int) -> list[EndedRow]:
    """The first `limit` rows of each outcome, in the order given."""
    kept: list[EndedRow] = []
    per: dict[str, int] = {}
    for row in rows:
        n = per.get(row["outcome"], 0)
        if n < limit:
            per[row["outcome"]] = n + 1
            kept.append(row)
    return kept


def _committed(path: str) -> float:
    """Committed spend in a spend.json (0 when there is none or it is unreadable)."""
    from runstate.files import parse_model_fast, read_raw
    from runstate.models import SpendLedger
    try:
        raw = read_raw(path)
    except OSError:
        return 0.0
    if raw is None:
        return 0.0
    loaded = parse_model_fast(path, raw, SpendLedger)
    return loaded.value.committed_usd if loaded.value is not None else 0.0


def _first_line(text: str) -> str:
    """An error in full on one line: never cut mid-word (Slurm's own words are the useful part)."""
    return " ".join(text.split())


def _age(seconds: float) -> str:
    seconds = max(0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def filter_status(st: StatusReport, *, state: str | None = None, outcome: str | None = None,
                  lane: str | None = None) -> StatusReport:
    """`st` with its run lists (active, held, queued, errors, ended) cut to the filters; counts stay whole."""
    def keep(kind: str, row: Any) -> bool:
        if state is not None and kind != state:
            return False
        if outcome is not None and (kind != "ended" or row.get("outcome") != outcome):
            return False
        return lane is None or row.get("lane", lane) == lane
    if state is None and outcome is None and lane is None:
        return st
    out = replace(st, active=[r for r in st.active if keep("active", r)],
                  held=[r for r in st.held if keep("queued", r)],
                  ended=[r for r in st.ended if keep("ended", r)],
                  queued=None if st.queued is None else [r for r in st.queued if keep("queued", r)])
    shown = {r["run_id"] for rows in (out.active, out.held, out.ended, out.queued or []) for r in rows}
    out.errors = [r for r in st.errors if r["run_id"] in shown]
    out.filters = " ".join(f"{k}={v}" for k, v in (("state", state), ("outcome", outcome), ("lane", lane)) if v)
    out.show_verified = True
    return out


def _bar(done: float, total: float, width: int) -> str:
    frac = 0.0 if total <= 0 else max(0.0, min(1.0, done / total))
    filled = int(round(frac * width))
    return "[" + "#" * filled + "-" * (width - filled) + f"] {frac * 100:3.0f}%"


def render_progress(st: StatusReport, width: int = 80) -> list[str]:
    """Two bars for a terminal: verified toward target_verified, spend against the cap."""
    bar_w = max(10, min(40, width - 45))
    verified = st.outcomes.get("verified", 0) + st.prior_verified     # the valid priors count toward it
    target = st.target_verified
    lines = [f"verified {verified:>5}/{target:<5} {_bar(verified, target, bar_w)}"]
    spent, cap = st.spend["spent_usd"], st.spend["cap_usd"]
    if cap:
        lines.append(f"spend  {spent:>8.2f}/{cap:<8.2f} USD {_bar(spent, cap, bar_w)}")
    else:
        lines.append(f"spend  {spent:>8.2f} USD (no campaign cap)")
    return lines


def _count_causes(ended_read: list[EndedRow], settled: Iterable[Any]) -> dict[str, int]:
    """Ended runs per cause (runstate/causes.py), most frequent first: read ones and indexed ones."""
    counts = Counter(r["cause"] for r in ended_read if r["cause"])
    counts.update(e.cause for e in settled if e.cause)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _breaker_lines(st: StatusReport) -> list[str]:
    return [f"admission stopped: {st.breaker}"] if st.breaker else []


def _cause_lines(st: StatusReport) -> list[str]:
    return ["causes: " + "  ".join(f"{cause} {n}" for cause, n in st.causes.items())] if st.causes else []


def _queue_lines(st: StatusReport) -> list[str]:
    """The last queue snapshot, in one line: how old, and its jobs per Slurm state."""
    q = st.queue
    if q is None or (not st.active and q["known"]):
        return []        # it explains the active runs' jobs (ghosts have lines of their own)
    age = "never answered" if q["age_s"] is None else f"{_age(q['age_s'])} old"
    states = ", ".join(f"{n} {state.lower()}" for state, n in q["states"].items()) or "no job of ours"
    line = f"queue as the last tick read it: {age}: {states}"
    if not q["known"]:
        line += f"; the last read FAILED ({q['error']})"
    return [line]


def _slurm_cell(a: ActiveRow) -> str:
    job = a["slurm"]
    if job is None:
        return "not in the last snapshot (submitted after it)"
    reason = f" ({job['reason']})" if job["reason"] and job["reason"] != "None" else ""
    return f"{job['state']}{reason} for {_age(job['for_s'])}"


def _active_lines(st: StatusReport, limit: int) -> list[str]:
    """The active runs: the run's own phase and counts, and its job as Slurm last said."""
    if not st.active:
        return []
    out = ["active:", f"  {'RUN':<40} {'JOB':>10} {'LANE':<5} {'PHASE':<9} ATTEMPTS INTERRUPTIONS  SLURM"]
    for a in st.active[:limit]:
        lane = a["lane"] + (f"x{a['gpus']}" if a["gpus"] else "")
        out.append(f"  {a['run_id']:<40} {a['job_id'] or '-':>10} {lane:<5} {a['phase']:<9} "
                   f"{a['attempts']}/{a['max_attempts']:<6} {a['interruptions']}/"
                   f"{a['max_interruptions']:<12} {_slurm_cell(a)}")
    if len(st.active) > limit:
        out.append(f"  ... and {len(st.active) - limit} more")
    return out


def render_status(st: StatusReport, limit: int = 20, *, progress: bool = False, width: int = 80) -> str:
    out = [f"campaign {st.name} ({st.campaign_id}) at {st.campaign}  backend {st.backend}"]
    if progress:
        out += render_progress(st, width)
    if st.filters:
        out.append(f"showing runs with {st.filters}")
    out += _tick_lines(st)
    out += _breaker_lines(st)
    out += _admission_lines(st)
    out += _count_lines(st)
    out += _cooldown_lines(st)
    out += _queue_lines(st)
    out += _active_lines(st, limit)
    out += _lane_lines(st)
    out += _held_lines(st, limit)
    out += _problem_lines(st, limit)
    out += _ended_lines(st, limit)
    # each line escaped on its own, newlines too: a PR's or an agent's text cannot forge a line
    return "\n".join(textsafe.line(text) for text in out)


def _tick_lines(st: StatusReport) -> list[str]:
    """The last tick: its age and how long it took, the queue it saw, its errors, ghost jobs, accounting."""
    out: list[str] = []
    tick = st.tick
    if tick is None:
        out.append("last tick: never (run `sweep run`)" if st.backend == "local" else
                   "last tick: never (run `sweep tick`, or install it with `sweep scrontab --install`)")
    else:
        line = f"last tick: {_age(tick['age_s'])} ago, took {tick['duration_s']:.2f}s"
        line += "" if tick["squeue_known"] else f", queue UNKNOWN: {tick['squeue_error']}"
        if tick["stale"] and st.backend != "local":
            line += (f"  WARNING: older than 3 intervals ({_age(3 * st.interval_s)}); "
                     "is the scrontab entry installed and enabled?")
        elif tick["stale"] and st.counts.get("active", 0) + st.counts.get("queued", 0):
            line += "  (nothing ticks a local campaign by itself: `sweep run` goes on)"
        out.append(line)
        for err in tick["errors"][:3]:
            out.append(f"  tick error: {err}")
        for g in tick["ghosts"]:
            out.append(f"  ghost job {g['job_id']} ({g['name']}): no lease knows it; counted against "
                       "the limits, cancelled after tick.ghost_grace_s")
        if tick["accounting"] == "unavailable":
            out.append(f"  accounting: unavailable ({tick['accounting_error']}): a controller job that "
                       "vanished without a word counts as an attempt, even if it was preempted or its "
                       "node failed (docs/slurm.md)")
        elif tick["accounting"] == "unknown":
            out.append(f"  accounting: UNKNOWN ({tick['accounting_error']}): vanished jobs are judged "
                       "on a later tick")
    return out


def _admission_lines(st: StatusReport) -> list[str]:
    """What stops or marks admission: uncertain remote sandboxes, a drain, isolation none."""
    out: list[str] = []
    if st.sandboxes_uncertain:
        out.append(f"admission stopped: remote sandboxes uncertain ({st.sandboxes_uncertain}); "
                   "run `sweep reconcile`")
    if st.draining:
        d = st.drain
        why = f" — reason: {d['reason']}" if d and d.get("reason") else ""
        if d and d["drained"]:
            out.append(f"drained: no active job, no held lease — safe to change the runtime{why}")
        else:
            out.append(f"draining ({d['active'] if d else '?'} active, "
                       f"{d['held_leases'] if d else '?'} held leases){why}")
    if st.isolation == "none":
        out.append("isolation: none — sessions and trials run UNSANDBOXED (the plan says so)")
    for name in st.key_in_sandbox:
        out.append(f"KEY IN SANDBOX: agent solver sessions on {name} hold their model key inside the remote "
                   f"sandbox (no relay meters or hides it); their cost is self-reported (the plan sets "
                   f"[providers.{name}] agent_key_in_sandbox = true)")
    return out


def _count_lines(st: StatusReport) -> list[str]:
    """Runs per state and outcome against the target, the causes, attempts and interruptions."""
    out: list[str] = []
    c, o = st.counts, st.outcomes
    parts = [f"{st.runs} run{'' if st.runs == 1 else 's'}", f"queued {c['queued']}", f"active {c['active']}"]
    parts += [f"{k} {o.get(k, 0)}" for k in ("verified", "generated_unverified", "blocked")]
    if st.corrupt:
        parts.append(f"corrupt {len(st.corrupt)}")
    prior = f", {st.prior_verified} prior" if st.prior_verified else ""
    out.append("runs: " + "  ".join(parts) + f"   (target {st.target_verified} verified{prior})")
    out += _cause_lines(st)
    if st.attempts_spent or st.interruptions:
        by = ", ".join(f"{cause} {n}" for cause, n in sorted(st.interrupted_by.items()))
        out.append(f"attempts spent: {st.attempts_spent}   interruptions (not the runs' fault): "
                   f"{st.interruptions}" + (f" ({by})" if by else ""))
    return out


def _cooldown_lines(st: StatusReport) -> list[str]:
    """Each role's and provider's cooldown, or its canary once the cooldown is over."""
    out: list[str] = []
    for cd in st.cooldowns:
        if cd.get("canary"):
            out.append(f"cooldown over for {cd['role']}: admitting one canary run")
        else:
            out.append(f"cooldown: {cd['role']} ({cd['kind']}) {_age(cd['left_s'])} left — {cd['detail'] or ''}")
    for pc in st.provider_cooldowns:
        if pc.get("canary"):
            out.append(f"provider cooldown over for {pc['provider']}: admitting one canary run on it")
        else:
            out.append(f"provider cooldown: {pc['provider']} ({pc['kind']}) {_age(pc['left_s'])} left, "
                       f"runs on it wait — {pc['detail'] or ''}")
    return out


def _lane_lines(st: StatusReport) -> list[str]:
    """Lanes whose submissions Slurm refused, backing off or probing."""
    out: list[str] = []
    for b in st.lanes_backing_off:
        state = (f"backing off, {_age(b['left_s'])} left" if b["left_s"] > 0 else "back-off over, probing")
        out.append(f"lane {b['lane']}: {b['failures']} refused submission(s) in a row, {state}")
        out.append(f"  slurm said: {_first_line(b['message'])}")
    return out


def _held_lines(st: StatusReport, limit: int) -> list[str]:
    """The queued runs not admitted and why (grouped by reason past `limit`)."""
    out: list[str] = []
    if st.held:
        out.append("not admitted (queued), and why:")
        if len(st.held) <= limit:
            for h in st.held:
                out.append(f"  {h['run_id']:<40} {h['reason']}")
        else:
            by_reason: dict[str, list[str]] = {}
            for h in st.held:
                by_reason.setdefault(h["reason"], []).append(h["run_id"])
            for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))[:limit]:
                some = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
                out.append(f"  {len(ids):>6} run{'' if len(ids) == 1 else 's'}: {reason}  ({some})")
    return out


def _problem_lines(st: StatusReport, limit: int) -> list[str]:
    """Run errors and corrupt runs, then the queued runs when asked for."""
    out: list[str] = []
    if st.errors:
        out.append("errors:")
        for e in st.errors[:limit]:
            out.append(f"  {e['run_id']:<40} {_first_line(e['error'])}")
    for run_id, why in list(st.corrupt.items())[:limit]:
        out.append(f"corrupt: {run_id}: {why}")
    if st.queued:
        out.append("queued:")
        for q in st.queued[:limit]:
            out.append(f"  {q['run_id']:<40} {q['lane']:<5} next {q['phase']:<9} "
                       f"attempts {q['attempts']}/{q['max_attempts']}")
        if len(st.queued) > limit:
            out.append(f"  ... and {len(st.queued) - limit} more")
    return out


def _ended_lines(st: StatusReport, limit: int) -> list[str]:
    """The ended runs per outcome (verified only when asked for), at most `limit` each."""
    out: list[str] = []
    shown: tuple[str, ...] = ("generated_unverified", "blocked")
    if st.show_verified:
        shown = ("verified", *shown)
    for outcome in shown:
        of_outcome = [e for e in st.ended if e["outcome"] == outcome]
        if of_outcome:
            out.append(f"{outcome}:")
            for row in of_outcome[:limit]:
                cause = row.get("cause")
                why = f"{cause} ({row['reason']})" if cause and cause != row["reason"] else (row["reason"] or "")
                quality = f"  [{row['quality']}]" if row.get("quality") else ""
                out.append(f"  {row['run_id']:<40} {why}{quality}")
            total = st.outcomes.get(outcome, 0) if st.ended_capped else len(of_outcome)
            if total > limit:
                out.append(f"  ... and {total - limit} more")
    return out
