"""A tiny stand-in for `sweep controller`, used by the tick tests (issue 4).

It plays the controller's side of the contract for real: it checks that the lease carries its
submission token, takes the lease over for its SWEEP_JOB_ID if the tick has not yet, waits until the
record names its job, sleeps, writes an ending and releases the lease. Behaviour per run comes from
<campaign>/payload.json: {"sleep": seconds, "outcome": "verified", "hang": false}.
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from runstate import RunState, load_record, read_lease, release_lease, save_record  # noqa: E402
from runstate.lease import LeaseLost, hand_over_lease  # noqa: E402
from runstate.runs import run_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--campaign", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("run_id")
    args = ap.parse_args()
    job_id = os.environ["SWEEP_JOB_ID"]
    campaign = Path(args.campaign)
    rdir = run_dir(campaign, args.run_id)
    try:
        cfg = orjson.loads((campaign / "payload.json").read_bytes())
    except FileNotFoundError:
        cfg = {}
    cfg = {**cfg, **cfg.get("runs", {}).get(args.run_id, {})}
    view = read_lease(rdir)
    if view is None or view.lease is None or view.lease.token != args.token:
        print(f"payload {args.run_id}: not my lease; exiting", flush=True)
        return 3
    if view.lease.job_id is None:
        try:
            hand_over_lease(rdir, token=args.token, job_id=job_id)
        except LeaseLost:       # the tick handed it over at the same moment (as the controller allows)
            view = read_lease(rdir)
            if view is None or view.lease is None or view.lease.job_id != job_id:
                print(f"payload {args.run_id}: lost the hand-over; exiting", flush=True)
                return 3
    deadline = time.time() + 60
    while True:
        rec = load_record(rdir).value
        if rec is not None and rec.state is RunState.active and rec.job_id == job_id:
            break
        if time.time() > deadline:
            print("payload: record never named my job", flush=True)
            return 4
        time.sleep(0.1)
    print(f"payload {args.run_id}: job {job_id} running", flush=True)
    if cfg.get("hang"):
        time.sleep(3600)
    # A test that must observe the run while it is active holds it with a file, not a race
    # against a short sleep (a loaded machine finishes the sleep before the test looks).
    hold = Path(args.campaign) / "payload.hold"
    hold_deadline = time.time() + 120
    while hold.exists() and time.time() < hold_deadline:
        time.sleep(0.1)
    time.sleep(float(cfg.get("sleep", 0.5)))
    outcome = cfg.get("outcome", "verified")
    save_record(rdir, rec.model_copy(update={"state": RunState.ended, "outcome": outcome,
                                             "reason": None if outcome != "blocked" else "payload"}))
    release_lease(rdir, token=args.token)
    print(f"payload {args.run_id}: ended {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
