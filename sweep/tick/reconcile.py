"""The tick's own reconcile: when the campaign marker (sandboxes-uncertain.json) stops admission,
the tick runs the same reconcile `sweep reconcile` runs, bounded in time.

It runs in a child process (`python -m sweep.tick.reconcile`, its own process group) given the
queue the tick already read (no second squeue) on stdin, and answers with the report as JSON on
stdout. The tick waits at most `tick.reconcile_budget_s` (and never more than a third of
`tick.max_runtime_s`); past that the child's process group is killed. That is safe at any line:
a receipt is settled only after the provider confirmed, so a killed reconcile leaves open receipts
and the marker, which the next tick (or `sweep reconcile`) looks at again. An SDK that retries a
dead endpoint for a minute cannot hold the tick, and the tick's own memory never holds an SDK.

A provider that cannot be listed (an outage, no answer) settles nothing: the marker stays up
(unknown is never dead), and the listing's outage or throttle stamps that provider's cooldown.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_SHARE_OF_TICK = 1 / 3


@dataclass
class TickReconcile:
    ran: bool
    cleared: bool                      # the marker is gone: this tick may admit
    detail: str                        # for tick.json's actions
    error: str | None = None           # for tick.json's errors (the marker stays)
    duration_s: float = 0.0


def budget_of(reconcile_budget_s: float, max_runtime_s: float) -> float:
    return max(0.0, min(float(reconcile_budget_s), float(max_runtime_s) * MAX_SHARE_OF_TICK))


def reconcile_in_tick(campaign_dir: Path, campaign_id: str, live_jobs: set[str], budget_s: float) -> TickReconcile:
    """Run reconcile in a child for at most `budget_s`; never raises."""
    if budget_s <= 0:
        return TickReconcile(False, False, "tick.reconcile_budget_s is 0: run `sweep reconcile`")
    request = json.dumps({"campaign_dir": str(campaign_dir), "campaign_id": campaign_id,
                          "live_jobs": sorted(live_jobs)}).encode()
    t0 = time.monotonic()
    try:
        # the child imports the very sweep this tick runs (its folder first on PYTHONPATH, whether
        # installed, frozen or a checkout), and -P keeps the working directory off its import path
        import sweep
        here = str(Path(sweep.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
        proc = subprocess.Popen([sys.executable, "-P", "-m", "sweep.tick.reconcile"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                cwd=str(campaign_dir), env=env)
    except OSError as exc:
        return TickReconcile(False, False, "", f"reconcile could not start: {exc}; the marker stays")
    try:
        out, err = proc.communicate(request, timeout=budget_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        took = time.monotonic() - t0
        return TickReconcile(True, False, "", f"reconcile exceeded its budget of {budget_s:.0f} s "
                             "(tick.reconcile_budget_s) and was stopped; the marker stays, the next tick "
                             "tries again", took)
    finally:
        if proc.poll() is None:       # the tick's own alarm (max_runtime_s) interrupted the wait
            _kill(proc)
    took = time.monotonic() - t0
    try:
        rep = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return TickReconcile(True, False, "", f"reconcile failed: {tail[0][:300]}; the marker stays", took)
    return _summarize(rep, took)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _summarize(rep: dict[str, Any], took: float) -> TickReconcile:
    parts = []
    for key, label in (("terminated", "terminated"), ("settled_gone", "settled (already gone)"),
                       ("unconfirmed", "terminate not confirmed"), ("left_live", "left alone (job runs)"),
                       ("left_unowned", "left alone (no receipt)")):
        if rep.get(key):
            parts.append(f"{label}: {', '.join(rep[key][:10])}")
    cleared = bool(rep.get("cleared_marker"))
    uncertain = bool(rep.get("refused") or rep.get("unconfirmed") or rep.get("errors") or rep.get("unreadable"))
    detail = "; ".join(parts) or "nothing to terminate"
    detail += "; marker cleared" if cleared else ""
    error = None
    if uncertain:
        why = rep.get("refused") or "; ".join((rep.get("errors") or []) + [
            f"unreadable receipt {p}" for p in rep.get("unreadable") or []]) or "a terminate was not confirmed"
        error = f"reconcile left sandboxes uncertain ({why[:400]}); the marker stays"
    return TickReconcile(True, cleared or not uncertain and not rep.get("refused"), detail, error, took)


def main() -> int:
    """The child: read the request on stdin, reconcile, print the report as one JSON line."""
    from dataclasses import asdict

    from sweep.providers import get_sandbox_provider
    from sweep.providers.receipts import reconcile
    req = json.loads(sys.stdin.read())
    rep = reconcile(Path(req["campaign_dir"]), req["campaign_id"], queue_known=True,
                    live_jobs=set(req["live_jobs"]),
                    provider_for=lambda name, opts: get_sandbox_provider(name, **opts))
    sys.stdout.write(json.dumps(asdict(rep)) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
