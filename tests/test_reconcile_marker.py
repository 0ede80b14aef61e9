"""The whole orphan story on a real campaign (local scheduler backend, real processes, the real
daytona SDK against the local fake), with the tick's own reconcile turned off
(`tick.reconcile_budget_s = 0`; tests/test_tick_reconcile.py has it on): a controller dies with an open sandbox receipt -> the tick
that reaps it raises the campaign marker -> admission stops (and `sweep status` says why) ->
`sweep reconcile` terminates exactly that sandbox and clears the marker -> admission resumes."""
from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("daytona")

from runstate.runs import load_record, run_dir  # noqa: E402
from sweep.campaign import Campaign  # noqa: E402
from sweep.providers import get_sandbox_provider  # noqa: E402
from sweep.providers.base import SandboxSpec, sandbox_name  # noqa: E402
from sweep.providers.receipts import create_with_receipt, new_tags, reconcile  # noqa: E402
from sweep.sandbox_marker import UNCERTAIN_FILE, read_uncertain  # noqa: E402
from tests.campaigns import payload_plan, status_json, sweep, write_plan  # noqa: E402
from tests.fakes.daytona_api import FakeDaytona  # noqa: E402


@pytest.fixture
def fake():
    f = FakeDaytona().start()
    yield f
    f.stop()


def test_dead_controller_with_open_receipt_stops_admission_until_reconcile(fake, tmp_path):
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", payload_plan(3, max_parallel=1, max_attempts=3,
                                                                      tick={"reconcile_budget_s": 0}))),
          "--campaign", str(d))
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    c = Campaign.load(d)
    sched = c.scheduler()
    sweep("tick", "--campaign", str(d))
    active = [r for r in ("pr-000", "pr-001", "pr-002") if load_record(run_dir(d, r)).value.state.value == "active"]
    assert len(active) == 1
    run = active[0]
    job = load_record(run_dir(d, run)).value.job_id

    # what a controller on a remote provider does before its create call (then the create)
    key = tmp_path / "daytona.key"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    t = new_tags(campaign_id=c.file.campaign_id, run_id=run, job_id=job, role="solver", attempt=1)
    h = create_with_receipt(p, SandboxSpec(name=sandbox_name(t), tags=t), run_dir(d, run), options=p.receipt_options)

    sched.cancel([job])                     # the controller dies (scancel / kill)
    deadline = time.monotonic() + 30
    while job in sched.queue().jobs and time.monotonic() < deadline:
        time.sleep(0.1)
    sweep("tick", "--campaign", str(d))     # reaps the dead holder's lease -> raises the marker
    assert (d / UNCERTAIN_FILE).exists()
    assert run in (read_uncertain(d) or "")
    assert status_json(d)["counts"]["active"] == 0      # not even the reaping tick admitted
    for _ in range(2):                      # no tick admits anything while the marker stands
        out = sweep("tick", "--campaign", str(d)).stdout
        assert status_json(d)["counts"]["active"] == 0, out
    st = status_json(d)
    assert st["sandboxes_uncertain"] and any("remote sandboxes uncertain" in w for w in st["tick"]["waiting"])
    assert "admission stopped: remote sandboxes uncertain" in sweep("status", "--campaign", str(d)).stdout

    r = sweep("reconcile", "--campaign", str(d), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"terminated: {h.name}" in r.stdout and "marker cleared" in r.stdout
    assert [s["id"] for s in fake.live()] == []
    assert not (d / UNCERTAIN_FILE).exists()

    sweep("tick", "--campaign", str(d))     # admission resumes
    assert status_json(d)["counts"]["active"] == 1
    assert status_json(d)["sandboxes_uncertain"] is None
    for jid in list(sched.queue().jobs):
        sched.cancel([jid])


def test_an_unsettled_reconcile_raises_the_marker_and_a_settled_one_clears_it(fake, tmp_path):
    from runstate.atomic import make_private_dir
    key = tmp_path / "k"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    camp = tmp_path / "c"
    rdir = make_private_dir(make_private_dir(make_private_dir(camp) / "runs") / "r1")
    t = new_tags(campaign_id="ab12cd34", run_id="r1", job_id="77", role="solver", attempt=1)
    create_with_receipt(p, SandboxSpec(name=sandbox_name(t), tags=t), rdir, options=p.receipt_options)
    fake.fail(503, times=20)
    def provider_for(n, o):
        return get_sandbox_provider(n, **o)
    rep = reconcile(camp, "ab12cd34", queue_known=True, live_jobs=set(), provider_for=provider_for)
    assert rep.uncertain and "reconcile could not settle" in (read_uncertain(camp) or "")
    fake.faults.clear()
    rep = reconcile(camp, "ab12cd34", queue_known=True, live_jobs=set(), provider_for=provider_for)
    assert rep.terminated and rep.cleared_marker and read_uncertain(camp) is None
