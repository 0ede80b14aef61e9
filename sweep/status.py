"""`sweep status`: the campaign as its files say, with zero scheduler calls.

What a human needs at a glance: is the tick alive (age of tick.json against the interval), is the
campaign draining or drained, how many runs are in each state and outcome, what is running where,
which roles are cooling down, and what is stuck and why.
"""
from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any

from runstate.files import read_model
from runstate.lease import read_lease_at
from runstate.markers import read_drain, read_outage
from runstate.models import PIPELINE_ROLES, RunState, TickReport
from runstate.runs import list_runs, runs_root
from sweep import textsafe
from sweep.campaign import load_campaign



def collect_status(campaign_dir: Path, now: float | None = None) -> dict[str, Any]:
    collecting = gc.isenabled()
    gc.disable()     # acyclic records and dicts: see sweep/tick/__init__.py
    try:
        return _collect_status(campaign_dir, now)
    finally:
        if collecting:
            gc.enable()


def _collect_status(campaign_dir: Path, now: float | None) -> dict[str, Any]:
    now = time.time() if now is None else now
    campaign_dir = Path(campaign_dir).resolve()
    campaign = load_campaign(campaign_dir)
    s = campaign.settings
    listing = list_runs(campaign_dir)
    root = os.fspath(runs_root(campaign_dir))
    counts: dict[str, int] = {"queued": 0, "active": 0, "ended": 0}
    outcomes: dict[str, int] = {}
    active, held, errors, ended = [], [], [], []
    held_leases = 0
    for run_id, rec in listing.records.items():
        counts[rec.state.value] += 1
        lease = read_lease_at(f"{root}/{run_id}/lease.json")
        if lease is not None:
            held_leases += 1
        if rec.state is RunState.ended:
            key = rec.outcome.value
            outcomes[key] = outcomes.get(key, 0) + 1
            ended.append({"run_id": run_id, "outcome": key, "reason": rec.reason})
        elif rec.state is RunState.active:
            active.append({"run_id": run_id, "job_id": rec.job_id, "lane": rec.lane, "gpus": rec.gpus,
                           "phase": rec.phase.value, "attempts": rec.attempts,
                           "max_attempts": rec.max_attempts})
        if rec.state is RunState.queued and (rec.hold_reason or rec.parked_until):
            held.append({"run_id": run_id, "reason": rec.hold_reason or f"parked ({rec.parked_role})"})
        if rec.last_error and rec.state is not RunState.ended:
            errors.append({"run_id": run_id, "error": rec.last_error})
    tick_loaded = read_model(campaign_dir / "tick.json", TickReport)
    tick = None
    interval_s = s.tick.interval_minutes * 60
    if tick_loaded.value is not None:
        t = tick_loaded.value
        age = now - t.finished_at
        tick = {"age_s": age, "duration_s": t.duration_s, "squeue_known": t.squeue_known,
                "squeue_error": t.squeue_error, "stale": age > 3 * interval_s,
                "errors": t.errors, "actions": len(t.actions)}
    drain = read_drain(campaign_dir)
    draining = not drain.missing
    drain_info = None
    if draining:
        d = drain.value
        drained = counts["active"] == 0 and held_leases == 0
        drain_info = {"requested_by": d.requested_by if d else None, "reason": d.reason if d else None,
                      "requested_at": d.requested_at if d else None, "drained": drained,
                      "active": counts["active"], "held_leases": held_leases}
    cooldowns = []
    for role in PIPELINE_ROLES:
        stamp = read_outage(campaign_dir, role).value
        if stamp is not None and stamp.is_active(now):
            cooldowns.append({"role": role, "kind": stamp.kind, "left_s": stamp.until - now,
                              "detail": stamp.detail})
        elif stamp is not None:
            cooldowns.append({"role": role, "kind": stamp.kind, "left_s": 0.0, "detail": stamp.detail,
                              "canary": True})
    return {"campaign": str(campaign_dir), "name": s.name, "campaign_id": campaign.campaign_id,
            "backend": s.scheduler.backend, "target_verified": s.target_verified,
            "runs": len(listing.records), "counts": counts, "outcomes": outcomes,
            "corrupt": listing.corrupt, "tick": tick, "interval_s": interval_s,
            "draining": draining, "drain": drain_info, "cooldowns": cooldowns,
            "active": active, "held": held, "errors": errors, "ended": ended,
            "held_leases": held_leases}


def _age(seconds: float) -> str:
    seconds = max(0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def render_status(st: dict[str, Any], limit: int = 20) -> str:
    out = [f"campaign {st['name']} ({st['campaign_id']}) at {st['campaign']}  backend {st['backend']}"]
    tick = st["tick"]
    if tick is None:
        out.append("last tick: never (run `sweep tick`, or install it with `sweep scrontab --install`)")
    else:
        line = f"last tick: {_age(tick['age_s'])} ago, took {tick['duration_s']:.2f}s"
        line += "" if tick["squeue_known"] else f", queue UNKNOWN: {tick['squeue_error']}"
        if tick["stale"]:
            line += (f"  WARNING: older than 3 intervals ({_age(3 * st['interval_s'])}); "
                     "is the scrontab entry installed and enabled?")
        out.append(line)
        for err in tick["errors"][:3]:
            out.append(f"  tick error: {err}")
    if st["draining"]:
        d = st["drain"]
        why = f" — reason: {d['reason']}" if d and d.get("reason") else ""
        if d and d["drained"]:
            out.append(f"drained: no active job, no held lease — safe to change the runtime{why}")
        else:
            out.append(f"draining ({d['active'] if d else '?'} active, "
                       f"{d['held_leases'] if d else '?'} held leases){why}")
    c, o = st["counts"], st["outcomes"]
    parts = [f"{st['runs']} runs", f"queued {c['queued']}", f"active {c['active']}"]
    parts += [f"{k} {o.get(k, 0)}" for k in ("verified", "generated_unverified", "blocked")]
    if st["corrupt"]:
        parts.append(f"corrupt {len(st['corrupt'])}")
    out.append("runs: " + "  ".join(parts) + f"   (target {st['target_verified']} verified)")
    for cd in st["cooldowns"]:
        if cd.get("canary"):
            out.append(f"cooldown over for {cd['role']}: admitting one canary run")
        else:
            out.append(f"cooldown: {cd['role']} ({cd['kind']}) {_age(cd['left_s'])} left — {cd['detail'] or ''}")
    if st["active"]:
        out.append("active:")
        out.append(f"  {'RUN':<40} {'JOB':>10} {'LANE':<5} {'PHASE':<9} ATTEMPTS")
        for a in st["active"][:limit]:
            lane = a["lane"] + (f"x{a['gpus']}" if a["gpus"] else "")
            out.append(f"  {a['run_id']:<40} {a['job_id']:>10} {lane:<5} {a['phase']:<9} "
                       f"{a['attempts']}/{a['max_attempts']}")
        if len(st["active"]) > limit:
            out.append(f"  ... and {len(st['active']) - limit} more")
    if st["held"]:
        out.append("held:")
        for h in st["held"][:limit]:
            out.append(f"  {h['run_id']:<40} {h['reason']}")
    if st["errors"]:
        out.append("errors:")
        for e in st["errors"][:limit]:
            out.append(f"  {e['run_id']:<40} {e['error'][:160]}")
    for run_id, why in list(st["corrupt"].items())[:limit]:
        out.append(f"corrupt: {run_id}: {why}")
    for outcome in ("generated_unverified", "blocked"):
        ended = [e for e in st["ended"] if e["outcome"] == outcome]
        if ended:
            out.append(f"{outcome}:")
            for e in ended[:limit]:
                out.append(f"  {e['run_id']:<40} {e['reason'] or ''}")
            if len(ended) > limit:
                out.append(f"  ... and {len(ended) - limit} more")
    # each line escaped on its own, newlines too: a PR's or an agent's text cannot forge a line
    return "\n".join(textsafe.line(text) for text in out)
