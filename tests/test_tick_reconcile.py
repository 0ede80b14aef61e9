"""The tick reconciles orphaned remote sandboxes itself (sweep/tick/reconcile.py).

A real campaign on the local scheduler backend whose controllers (real processes started by the
real tick) each create a remote sandbox with a receipt, on the daytona fake (real SDK over HTTP)
and on the modal fake (real SDK over gRPC). One controller is killed -9:

  tick 1 takes the run back and raises the marker: nothing is admitted;
  tick 2 reconciles by itself: exactly the orphan is terminated (not the live run's sandbox, not
  another campaign's, not one of ours without a receipt), the marker is cleared and the same tick
  admits again, without anyone running `sweep reconcile`.

With the provider unreachable, the tick leaves the marker up (unknown is never dead) and says so.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runstate.runs import load_record, run_dir
from sweep.campaign import Campaign
from sweep.sandbox_marker import UNCERTAIN_FILE, read_uncertain
from tests.campaigns import payload_plan, status_json, sweep, write_plan
from tests.test_reconcile import Remote, wait_for

REPO = Path(__file__).resolve().parents[1]

# The controller the tick starts: creates one sandbox with a receipt, says so, and hangs.
CONTROLLER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {repo!r})
    from pathlib import Path
    from sweep.campaign import Campaign
    from sweep.providers import get_sandbox_provider
    from sweep.providers.base import SandboxSpec, sandbox_name
    from sweep.providers.receipts import create_with_receipt, current_job_id, new_tags
    cfg = json.loads(Path(sys.argv[1]).read_text())
    args = sys.argv[2:]
    campaign = Path(args[args.index("--campaign") + 1])
    run = args[-1]
    p = get_sandbox_provider(cfg["kind"], **cfg["options"])
    tags = new_tags(campaign_id=Campaign.load(campaign).file.campaign_id, run_id=run, job_id=current_job_id(),
                    role="solver", attempt=1)
    h = create_with_receipt(p, SandboxSpec(name=sandbox_name(tags), tags=tags, image="python:3.12-slim"),
                            campaign / "runs" / run, options=p.receipt_options)
    Path(cfg["ready"], f"{{run}}.{{current_job_id()}}.json").write_text(
        json.dumps({{"pid": os.getpid(), "name": h.name, "id": h.sandbox_id}}))
    time.sleep(600)
""")


@pytest.fixture(params=["daytona", "modal"])
def remote(request, tmp_path, monkeypatch):
    pytest.importorskip(request.param)
    r = Remote(request.param, tmp_path, monkeypatch)
    yield r
    r.fake.stop()


def _campaign(remote, tmp_path, **tick):
    ready = tmp_path / "ready"
    ready.mkdir()
    cfg = tmp_path / "remote.json"
    cfg.write_text(json.dumps({"kind": remote.kind, "options": remote.options, "ready": str(ready)}))
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER.format(repo=str(REPO)))
    plan = payload_plan(2, max_parallel=2, tick={"controller_command": [sys.executable, str(script), str(cfg)],
                                                 **tick})
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    return Campaign.load(d), ready


def _ready(ready: Path, run: str, job: str) -> dict:
    path = ready / f"{run}.{job}.json"
    return json.loads(wait_for(lambda: path.exists() and path.read_text(), what=f"{run}'s sandbox"))


def test_the_next_tick_reconciles_exactly_the_orphans_and_admits_again(remote, tmp_path):
    c, ready = _campaign(remote, tmp_path)
    d, sched = c.dir, c.scheduler()
    sweep("tick", "--campaign", str(d))
    jobs = {r: load_record(run_dir(d, r)).value.job_id for r in ("pr-000", "pr-001")}
    assert all(jobs.values())
    info = {r: _ready(ready, r, j) for r, j in jobs.items()}
    orphan_tags = remote.labels(info["pr-000"]["id"])
    foreign = remote.add_foreign("other-campaign-box", dict(orphan_tags, **{"sweep.campaign": "0ther0ca"}))
    unowned = remote.add_foreign("hand-made-box", dict(orphan_tags, **{"sweep.instance": "feedfacecafe"}))

    os.kill(info["pr-000"]["pid"], signal.SIGKILL)           # the controller dies with its sandbox open
    wait_for(lambda: (q := sched.queue()).known and jobs["pr-000"] not in q.jobs, what="the killed job to go")

    out1 = sweep("tick", "--campaign", str(d)).stdout         # takes the run back, raises the marker
    assert (d / UNCERTAIN_FILE).exists(), out1
    assert "pr-000" in (read_uncertain(d) or "")
    rec = load_record(run_dir(d, "pr-000")).value
    assert rec.state.value == "queued", out1                  # the marker stops dispatch
    assert info["pr-000"]["id"] in remote.live_ids()
    assert status_json(d)["sandboxes_uncertain"]
    assert "admission stopped: remote sandboxes uncertain" in sweep("status", "--campaign", str(d)).stdout

    out2 = sweep("tick", "--campaign", str(d)).stdout         # reconciles by itself, then admits
    tick = json.loads((d / "tick.json").read_text())
    [rc] = [a for a in tick["actions"] if a["kind"] == "reconcile"]
    assert f"terminated: {info['pr-000']['name']}" in rc["detail"] and "marker cleared" in rc["detail"], out2
    assert remote.terminated() == [info["pr-000"]["id"]]
    assert {info["pr-001"]["id"], foreign, unowned} <= remote.live_ids()
    assert not (d / UNCERTAIN_FILE).exists()
    rec = load_record(run_dir(d, "pr-000")).value
    assert rec.state.value == "active" and rec.job_id != jobs["pr-000"], out2    # dispatch resumed
    _ready(ready, "pr-000", rec.job_id)                       # and its new controller got a sandbox
    assert tick["squeue_known"] and tick["errors"] == []
    for jid in list(sched.queue().jobs):
        sched.cancel([jid])


def test_an_unreachable_provider_leaves_the_marker_up_and_the_tick_bounded(remote, tmp_path):
    c, ready = _campaign(remote, tmp_path, reconcile_budget_s=20)
    d, sched = c.dir, c.scheduler()
    sweep("tick", "--campaign", str(d))
    jobs = {r: load_record(run_dir(d, r)).value.job_id for r in ("pr-000", "pr-001")}
    info = {r: _ready(ready, r, j) for r, j in jobs.items()}
    os.kill(info["pr-000"]["pid"], signal.SIGKILL)
    wait_for(lambda: (q := sched.queue()).known and jobs["pr-000"] not in q.jobs, what="the killed job to go")
    sweep("tick", "--campaign", str(d))
    assert (d / UNCERTAIN_FILE).exists()

    remote.fake.stop()                                        # the provider is gone: no answer at all
    t0 = time.monotonic()
    sweep("tick", "--campaign", str(d), timeout=120)
    took = time.monotonic() - t0
    tick = json.loads((d / "tick.json").read_text())
    assert (d / UNCERTAIN_FILE).exists()                      # unknown is never dead
    assert any("reconcile" in e and "the marker stays" in e for e in tick["errors"]), tick["errors"]
    assert load_record(run_dir(d, "pr-000")).value.state.value == "queued"
    if remote.kind == "daytona":                              # refused at once: an outage, stamped
        from runstate.markers import read_provider_stamps
        assert read_provider_stamps(d)["daytona"].kind == "outage"
    assert took < 20 + 60, took                               # the budget, plus the tick's own work
    for jid in list(sched.queue().jobs):
        sched.cancel([jid])


def test_the_tick_that_reconciles_still_asks_the_queue_exactly_once(tmp_path):
    """The reconcile uses the queue the tick already read: one queue call for the whole tick,
    counted on the real (local) scheduler."""
    pytest.importorskip("daytona")
    from sweep.providers import get_sandbox_provider
    from sweep.providers.base import SandboxSpec, sandbox_name
    from sweep.providers.receipts import create_with_receipt, new_tags
    from sweep.sandbox_marker import mark_uncertain
    from sweep.scheduler import make_scheduler
    from sweep.tick import run_tick
    from tests.fakes.daytona_api import FakeDaytona
    from tests.test_scale_smoke import CountingScheduler
    fake = FakeDaytona().start()
    try:
        d = tmp_path / "camp"
        sweep("init", str(write_plan(tmp_path / "plan.json", payload_plan(1))), "--campaign", str(d))
        c = Campaign.load(d)
        key = tmp_path / "k"
        key.write_text(fake.api_key)
        p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
        t = new_tags(campaign_id=c.file.campaign_id, run_id="pr-000", job_id="424242", role="solver", attempt=1)
        h = create_with_receipt(p, SandboxSpec(name=sandbox_name(t), tags=t), run_dir(d, "pr-000"),
                                options=p.receipt_options)
        mark_uncertain(d, "job 424242 died with an open receipt")       # a job that never was in the queue
        proxy = CountingScheduler(make_scheduler(c.settings.scheduler, d, c.file.job_prefix))
        assert run_tick(d, scheduler=proxy).ran
        tick = json.loads((d / "tick.json").read_text())
        assert proxy.calls["queue"] == 1, proxy.calls
        assert any(a["kind"] == "reconcile" and f"terminated: {h.name}" in a["detail"] for a in tick["actions"])
        assert not (d / UNCERTAIN_FILE).exists() and fake.live() == []
        assert load_record(run_dir(d, "pr-000")).value.state.value == "active"        # admitted, same tick
        sched = c.scheduler()
        for jid in list(sched.queue().jobs):
            sched.cancel([jid])
    finally:
        fake.stop()
