"""Provider cooldowns: an outage (or throttle) of a remote provider, as its own error mapping
classifies it, stamps `provider-outage-<name>.json`; the tick then holds only the runs whose plan
`provider` is that one, the others keep admitting; once the cooldown passes one canary goes, and a
successful create clears the stamp. The stamp is clamped like a role's.

The end-to-end case runs the real tick and status (local scheduler backend, real processes) and
the real daytona SDK over HTTP to the local fake answering 503."""
from __future__ import annotations

import json
import time

import pytest

from runstate.markers import provider_outage_path, read_provider_stamps, stamp_provider
from runstate.models import OUTAGE_MAX_COOLDOWN_S, ProviderStamp, RunRecord
from runstate.runs import load_record, run_dir, save_record
from sweep.providers.base import SandboxError, SandboxSpec, sandbox_name
from sweep.providers.receipts import create_with_receipt, new_tags, note_provider_error
from sweep.tick.plan import Admit, PlanSettings, RunView, SetHold, Snapshot, Waiting, plan_tick

NOW = 1_000_000.0
CFG = PlanSettings(target_verified=10, max_parallel=4, max_gpu_parallel=1, max_spend_usd=None,
                   lease_ttl_s=1800, submit_grace_s=120)


def _snap(records, **kw):
    return Snapshot(now=NOW, queue_known=True, queue={},
                    runs={r.run_id: RunView(r, None, 0.0) for r in records}, **kw)


def _why(actions) -> dict[str, str]:
    out = {rid: r for a in actions if isinstance(a, Waiting) for rid, r in a.of().items()}
    return out


def test_an_active_provider_stamp_holds_only_the_runs_on_that_provider():
    recs = [RunRecord(run_id="d0", panel_index=0, provider="daytona"),
            RunRecord(run_id="l1", panel_index=1),
            RunRecord(run_id="m2", panel_index=2, provider="modal")]
    stamp = ProviderStamp(provider="daytona", kind="outage", detail="503", stamped_at=NOW - 60, cooldown_s=2700)
    actions = plan_tick(_snap(recs, provider_stamps={"daytona": stamp}), CFG)
    assert sorted(a.run_id for a in actions if isinstance(a, Admit)) == ["l1", "m2"]
    held = [a for a in actions if isinstance(a, SetHold)]
    assert [a.run_id for a in held] == ["d0"]
    assert held[0].reason == f"provider daytona cooling down (outage) until {stamp.until:.0f}"


def test_after_the_cooldown_one_canary_per_provider_then_the_rest_wait_for_it():
    recs = [RunRecord(run_id=f"d{i}", panel_index=i, provider="daytona") for i in range(3)]
    passed = ProviderStamp(provider="daytona", kind="outage", stamped_at=NOW - 3000, cooldown_s=2700)
    actions = plan_tick(_snap(recs, provider_stamps={"daytona": passed}), CFG)
    admits = [a for a in actions if isinstance(a, Admit)]
    assert [(a.run_id, a.canary_for) for a in admits] == [("d0", "provider:daytona")]
    assert {a.run_id: a.reason for a in actions if isinstance(a, SetHold)} == {
        "d1": "waiting for the provider daytona canary after its cooldown",
        "d2": "waiting for the provider daytona canary after its cooldown"}
    # the canary is running: nobody else on that provider goes until a success clears the stamp
    running = RunRecord(run_id="d0", panel_index=0, provider="daytona", state="active", job_id="5",
                        submit_token="t", canary_for="provider:daytona")
    from sweep.tick.plan import QueueJob
    snap = Snapshot(now=NOW, queue_known=True, queue={"5": QueueJob("5", "sw.c.t.d0")},
                    runs={r.run_id: RunView(r, None, 0.0) for r in [running, *recs[1:]]},
                    provider_stamps={"daytona": passed})
    assert not [a for a in plan_tick(snap, CFG) if isinstance(a, Admit)]


def test_a_provider_stamp_is_clamped_like_a_role_cooldown():
    huge = ProviderStamp(provider="modal", kind="outage", stamped_at=NOW, cooldown_s=1e12)
    assert huge.until == NOW + OUTAGE_MAX_COOLDOWN_S
    assert not ProviderStamp(provider="modal", kind="outage", stamped_at=NOW + 36000,
                             cooldown_s=2700).is_active(NOW)        # a broken clock parks nothing
    with pytest.raises(ValueError, match="invalid provider name"):
        ProviderStamp(provider="../x", kind="outage", stamped_at=NOW, cooldown_s=1)


def test_only_outage_and_throttle_stamp_and_a_create_after_the_cooldown_clears(tmp_path):
    from runstate.atomic import make_private_dir
    camp = make_private_dir(tmp_path / "c")
    for cls in ("config", "failure"):
        assert not note_provider_error(camp, "daytona", SandboxError("x", error_class=cls))
    assert read_provider_stamps(camp) == {}
    assert note_provider_error(camp, "daytona", SandboxError("HTTP 429", error_class="throttle"))
    assert read_provider_stamps(camp)["daytona"].kind == "throttle"
    assert not note_provider_error(camp, "local", SandboxError("x", error_class="outage"))
    (camp / "provider-outage-zz.json").write_text("{not json")      # unreadable: no cooldown
    assert set(read_provider_stamps(camp)) == {"daytona"}


@pytest.fixture
def fake():
    pytest.importorskip("daytona")
    from tests.fakes.daytona_api import FakeDaytona
    f = FakeDaytona().start()
    yield f
    f.stop()


def test_a_daytona_503_parks_only_the_daytona_run_and_a_canary_create_ends_it(fake, tmp_path):
    from sweep.campaign import Campaign
    from sweep.providers import get_sandbox_provider
    from tests.campaigns import payload_plan, status_json, sweep, write_plan

    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", payload_plan(2, max_parallel=2))), "--campaign", str(d))
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    # The plan cannot name daytona until the controller drives remote providers (the plan's
    # `provider` is checked against what can run): pr-000's record says where it would run.
    rdir0 = run_dir(d, "pr-000")
    save_record(rdir0, load_record(rdir0).value.model_copy(update={"provider": "daytona"}))
    c = Campaign.load(d)
    key = tmp_path / "daytona.key"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    scratch = tmp_path / "scratch" / "runs" / "r"            # a controller elsewhere met the outage
    scratch.mkdir(parents=True)
    t = new_tags(campaign_id=c.file.campaign_id, run_id="r", job_id="1", role="solver", attempt=1)
    fake.fail(503, times=50)
    with pytest.raises(SandboxError) as err:
        p.create(SandboxSpec(name=sandbox_name(t), tags=t))
    assert err.value.error_class == "outage"
    assert note_provider_error(d, "daytona", err.value, by="job:1")

    sweep("tick", "--campaign", str(d))
    st = status_json(d)
    active = {a["run_id"] for a in st["active"]}
    assert active == {"pr-001"}, st                          # the local run is unaffected
    assert load_record(rdir0).value.hold_reason.startswith("provider daytona cooling down (outage)")
    [pc] = st["provider_cooldowns"]
    assert pc["provider"] == "daytona" and pc["kind"] == "outage" and pc["left_s"] > 2000
    text = sweep("status", "--campaign", str(d)).stdout
    assert "provider cooldown: daytona (outage)" in text and "503" in text

    # the cooldown passes (stamped long ago): one canary on daytona is admitted
    stamp_provider(d, "daytona", "outage", "503", now=time.time() - 3000)
    out = sweep("tick", "--campaign", str(d)).stdout
    rec0 = load_record(rdir0).value
    assert rec0.state.value == "active" and rec0.canary_for == "provider:daytona", (out, rec0)
    assert "provider cooldown over for daytona" in sweep("status", "--campaign", str(d)).stdout

    # the canary's create succeeds: the stamp is gone
    fake.faults.clear()
    t2 = new_tags(campaign_id=c.file.campaign_id, run_id="pr-000", job_id=rec0.job_id, role="solver", attempt=1)
    h = create_with_receipt(p, SandboxSpec(name=sandbox_name(t2), tags=t2), rdir0, options=p.receipt_options)
    assert not provider_outage_path(d, "daytona").exists()
    assert status_json(d)["provider_cooldowns"] == []
    p.terminate(h)
    sched = c.scheduler()
    for jid in list(sched.queue().jobs):
        sched.cancel([jid])


def test_create_with_receipt_stamps_the_provider_on_an_outage(fake, tmp_path):
    from runstate.atomic import make_private_dir
    from sweep.providers import get_sandbox_provider
    key = tmp_path / "k"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    camp = make_private_dir(tmp_path / "c")
    rdir = make_private_dir(make_private_dir(camp / "runs") / "r1")
    t = new_tags(campaign_id="ab12cd34", run_id="r1", job_id="77", role="solver", attempt=1)
    fake.fail(503, times=50)
    with pytest.raises(SandboxError):
        create_with_receipt(p, SandboxSpec(name=sandbox_name(t), tags=t), rdir, options=p.receipt_options)
    stamp = read_provider_stamps(camp)["daytona"]
    assert stamp.kind == "outage" and stamp.stamped_by == "job:77" and stamp.is_active(time.time())
    fake.faults.clear()
    create_with_receipt(p, SandboxSpec(name=sandbox_name(t), tags=t), rdir, options=p.receipt_options)
    assert "daytona" in read_provider_stamps(camp)      # a success DURING the cooldown clears nothing


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from tests.test_tick_plan import NOW as PLAN_NOW, snapshots  # noqa: E402

PROVIDERS = ("local", "daytona", "modal")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.data())
def test_provider_cooldowns_over_random_snapshots(case, data):
    """Over random snapshots (tests/test_tick_plan.py's) with each run on a random provider and
    random provider stamps: never an admission on a provider cooling down; after its cooldown, at
    most one run on it per tick and none while its canary runs; other providers unaffected by it."""
    import dataclasses
    snap, cfg = case
    runs = {}
    for rid, v in snap.runs.items():
        runs[rid] = RunView(v.record.model_copy(update={"provider": data.draw(st.sampled_from(PROVIDERS))}),
                            v.lease, v.committed_usd)
    pstamps = {}
    for p in ("daytona", "modal"):
        c = data.draw(st.sampled_from(["none", "active", "passed"]))
        if c != "none":
            pstamps[p] = ProviderStamp(provider=p, kind="outage", cooldown_s=2700,
                                       stamped_at=PLAN_NOW - (60 if c == "active" else 3000))
    # admission must be possible for the property to say anything: known queue, not draining
    snap = dataclasses.replace(snap, runs=runs, provider_stamps=pstamps, queue_known=True, draining=False)
    actions = plan_tick(snap, cfg)
    admitted: dict[str, int] = {}
    for a in (a for a in actions if isinstance(a, Admit)):
        p = runs[a.run_id].record.provider
        stamp = pstamps.get(p)
        assert not (stamp and stamp.is_active(PLAN_NOW)), f"{a.run_id} admitted while {p} cools down"
        if stamp is not None:
            admitted[p] = admitted.get(p, 0) + 1
            assert not any(v.record.state.value == "active" and v.record.canary_for == f"provider:{p}"
                           and v.record.job_id in snap.queue for v in runs.values())
    assert all(n <= 1 for n in admitted.values()), admitted
    reasons = _why(actions)
    for rid, why in reasons.items():
        if why.startswith("provider "):
            p = why.split()[1]
            assert runs[rid].record.provider == p and p in pstamps
