"""Property tests of the tick's pure planner over thousands of random snapshots."""
from hypothesis import HealthCheck, given, settings, strategies as st

from runstate.lease import LeaseView
from runstate.models import Lease, OutageStamp, Outcome, Phase, RunRecord, RunState
from sweep.tick.plan import (Admit, Adopt, CancelGhost, EndRun, GiveUpSubmission, NoteGhosts,
                             PlanSettings, QueueJob, ReapLease, Requeue, RunView, SetHold, Snapshot,
                             Waiting, next_role, plan_tick)

NOW = 1_000_000.0
TTL = 600.0


@st.composite
def snapshots(draw):
    n = draw(st.integers(0, 14))
    queue_known = draw(st.booleans())
    runs, queue = {}, {}
    for i in range(n):
        rid = f"r{i:02d}"
        state = draw(st.sampled_from(list(RunState)))
        gpus = draw(st.sampled_from([0, 0, 1, 2]))
        phase = draw(st.sampled_from(list(Phase)))
        attempts = draw(st.integers(0, 3))
        kw = dict(run_id=rid, state=state, phase=phase, attempts=attempts, max_attempts=3, gpus=gpus,
                  lane="gpu" if gpus else "cpu", panel_index=i)
        job_id = None
        if state is RunState.active:
            job_id = str(100 + i)
            kw.update(job_id=job_id, submit_token=f"t{i}",
                      canary_for=draw(st.sampled_from([None, None, "author", "solver"])))
            if draw(st.booleans()):
                queue[job_id] = QueueJob(job_id, f"sw.c.t{i}.{rid}", gpus)
        elif state is RunState.ended:
            kw.update(outcome=draw(st.sampled_from(list(Outcome))), reason="r")
        else:
            if draw(st.integers(0, 4)) == 0:
                kw.update(parked_until=NOW + draw(st.sampled_from([-10, 100])), parked_role="author")
        rec = RunRecord(**kw)
        lease = None
        lease_kind = draw(st.sampled_from(["none", "none", "job", "tick", "corrupt"]))
        if lease_kind == "job":
            ljob = job_id or str(500 + i)
            seen = NOW - draw(st.sampled_from([5, TTL + 5]))
            ls = Lease(run_id=rid, token=f"t{i}", holder="job", job_id=ljob, acquired_at=seen, heartbeat_at=seen)
            lease = LeaseView(None, f"{rid}-lease".encode(), ls, None, 0.0)
            if state is not RunState.active and draw(st.booleans()):
                queue[ljob] = QueueJob(ljob, f"sw.c.t{i}.{rid}", gpus)
        elif lease_kind == "tick":
            seen = NOW - draw(st.sampled_from([5, 200, TTL + 5]))
            ls = Lease(run_id=rid, token=f"k{i}", holder="tick", acquired_at=seen, heartbeat_at=seen)
            lease = LeaseView(None, f"{rid}-tick".encode(), ls, None, 0.0)
            if draw(st.booleans()):
                queue[str(900 + i)] = QueueJob(str(900 + i), f"sw.c.k{i}.{rid}", gpus)
        elif lease_kind == "corrupt":
            lease = LeaseView(None, b"", None, "empty file", NOW - draw(st.sampled_from([5, TTL + 5])))
        runs[rid] = RunView(rec, lease, 0.0)
    for g in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):     # ghosts: our prefix, no lease knows them
        queue[str(700 + g)] = QueueJob(str(700 + g), f"sw.c.ghost{g}.r{g:02d}", draw(st.sampled_from([0, 1])))
    stamps = {}
    for role in ("author", "reviewer", "solver"):
        c = draw(st.sampled_from(["none", "none", "active", "expired", "future"]))
        if c == "active":
            stamps[role] = OutageStamp(role=role, kind="outage", stamped_at=NOW - 60, cooldown_s=2700)
        elif c == "expired":
            stamps[role] = OutageStamp(role=role, kind="throttle", stamped_at=NOW - 400, cooldown_s=300)
        elif c == "future":
            stamps[role] = OutageStamp(role=role, kind="outage", stamped_at=NOW + 36000, cooldown_s=2700)
    snap = Snapshot(now=NOW, queue_known=queue_known, queue=queue if queue_known else {}, runs=runs,
                    draining=draw(st.integers(0, 4)) == 0, stamps=stamps,
                    capacity={"cpu": None, "gpu": draw(st.sampled_from([None, 0, 1, 4]))})
    cfg = PlanSettings(target_verified=draw(st.integers(1, 10)), max_parallel=draw(st.integers(1, 6)),
                       max_gpu_parallel=draw(st.integers(0, 3)), max_spend_usd=None,
                       lease_ttl_s=TTL, submit_grace_s=120)
    return snap, cfg


def occupied_after(snap, actions):
    """Runs holding a slot after the actions, computed independently of the planner."""
    gone = {a.run_id for a in actions if isinstance(a, (Requeue, EndRun))}
    slots = set()
    for rid, v in snap.runs.items():
        if v.record.state is RunState.active and rid not in gone:
            slots.add(rid)
        elif v.record.state is RunState.queued and v.lease is not None and \
                rid not in {a.run_id for a in actions if isinstance(a, ReapLease)}:
            slots.add(rid)
    slots |= {a.run_id for a in actions if isinstance(a, (Admit, Adopt))}
    # a ghost counts on its own, unless its run's lease is corrupt (then the run's slot covers it)
    slots |= {f"ghost:{j.job_id}:{j.gpus}" for j in snap.queue.values() if ".ghost" in j.name
              and not (snap.runs.get(j.name.split(".")[3]) and snap.runs[j.name.split(".")[3]].lease
                       and snap.runs[j.name.split(".")[3]].lease.lease is None)}
    return slots


def _gpus(snap, slot):
    if slot.startswith("ghost:"):
        return int(slot.rsplit(":", 1)[1])
    return snap.runs[slot].record.gpus


PROPS = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(snapshots())
def test_admission_respects_every_limit(case):
    snap, cfg = case
    actions = plan_tick(snap, cfg)
    admits = [a for a in actions if isinstance(a, Admit)]
    if snap.draining:
        assert admits == []
    if not admits:
        return
    occ = occupied_after(snap, actions)
    assert len(occ) <= cfg.max_parallel
    gpu_occ = [r for r in occ if _gpus(snap, r) > 0]
    assert len(gpu_occ) <= max(cfg.max_gpu_parallel, 0) or not any(a.gpus for a in admits)
    verified = sum(1 for v in snap.runs.values() if v.record.outcome is Outcome.verified)
    active_before = len(occ) - len(admits)
    assert len(admits) <= cfg.target_verified - verified - active_before
    for a in admits:
        rec = snap.runs[a.run_id].record
        assert rec.state is RunState.queued and snap.runs[a.run_id].lease is None
        assert a.gpus == rec.gpus and a.lane == ("gpu" if rec.gpus else "cpu")
        cap = snap.capacity.get("gpu")
        assert not (rec.gpus and cap is not None and rec.gpus > cap)
        assert rec.parked_until is None or rec.parked_until <= NOW


@PROPS
@given(snapshots())
def test_cooldowns_and_one_canary_per_role(case):
    snap, cfg = case
    admits = [a for a in plan_tick(snap, cfg) if isinstance(a, Admit)]
    per_role: dict[str, int] = {}
    for a in admits:
        role = next_role(snap.runs[a.run_id].record)
        stamp = snap.stamps.get(role)
        assert not (stamp and stamp.is_active(NOW)), f"{a.run_id} admitted while {role} cools down"
        if stamp is not None:                      # cooldown passed, not yet cleared: canaries only
            assert a.canary_for == role
            per_role[role] = per_role.get(role, 0) + 1
            assert not any(v.record.state is RunState.active and v.record.canary_for == role
                           and v.record.job_id in snap.queue for v in snap.runs.values())
    assert all(n <= 1 for n in per_role.values())


@PROPS
@given(snapshots())
def test_unknown_queue_judges_nothing_dead_and_leases_by_ttl_only(case):
    snap, cfg = case
    actions = plan_tick(snap, cfg)
    if not snap.queue_known:
        assert not [a for a in actions if isinstance(a, (Requeue, Adopt, Admit, SetHold))]
        assert not [a for a in actions if isinstance(a, EndRun) and a.reason == "max_attempted"]
        for a in actions:
            if isinstance(a, ReapLease):
                v = a.view
                age = NOW - (v.mtime if v.lease is None else v.lease.last_seen)
                assert age > TTL, f"{a.run_id} reaped at age {age} with the queue unknown"


@PROPS
@given(snapshots())
def test_a_lease_whose_holder_job_is_alive_is_never_reaped(case):
    snap, cfg = case
    for a in plan_tick(snap, cfg):
        if isinstance(a, ReapLease) and a.view.lease is not None and snap.queue_known:
            ls = a.view.lease
            assert ls.job_id not in snap.queue or ls.job_id is None
            assert not any(j.name.split(".")[2] == ls.token for j in snap.queue.values())


@PROPS
@given(snapshots())
def test_vanished_jobs_requeue_or_end_at_the_limit(case):
    snap, cfg = case
    actions = {a.run_id: a for a in plan_tick(snap, cfg) if isinstance(a, (Requeue, EndRun))}
    for rid, v in snap.runs.items():
        rec = v.record
        vanished = snap.queue_known and rec.state is RunState.active and rec.job_id not in snap.queue
        if not vanished:
            assert rid not in actions or isinstance(actions[rid], EndRun) and actions[rid].reason != "max_attempted"
            continue
        a = actions[rid]
        if rec.attempts + 1 >= rec.max_attempts:
            assert isinstance(a, EndRun) and a.reason == "max_attempted" and a.outcome is Outcome.blocked
        else:
            assert isinstance(a, Requeue)


def _rec(i, **kw):
    base = dict(run_id=f"r{i}", panel_index=i)
    base.update(kw)
    return RunRecord(**base)


def _snap(records, **kw):
    queue = kw.pop("queue", {})
    return Snapshot(now=NOW, queue_known=True, queue=queue,
                    runs={r.run_id: RunView(r, None, 0.0) for r in records}, **kw)


CFG = PlanSettings(target_verified=10, max_parallel=3, max_gpu_parallel=1, max_spend_usd=None,
                   lease_ttl_s=TTL, submit_grace_s=120)


def test_cpu_candidate_later_in_the_panel_passes_a_waiting_gpu_run():
    running_gpu = _rec(0, state="active", job_id="1", submit_token="t", gpus=1, lane="gpu")
    snap = _snap([running_gpu, _rec(1, gpus=2), _rec(2), _rec(3, gpus=1)],
                 queue={"1": QueueJob("1", "sw.c.t.r0", 1)})
    admitted = [a.run_id for a in plan_tick(snap, CFG) if isinstance(a, Admit)]
    assert admitted == ["r2"]


def test_gpu_run_on_a_machine_without_gpus_is_held_with_the_reason():
    snap = _snap([_rec(0, gpus=1), _rec(1)], capacity={"cpu": 2, "gpu": 0})
    actions = plan_tick(snap, CFG)
    holds = [a for a in actions if isinstance(a, SetHold)]
    assert [a.run_id for a in actions if isinstance(a, Admit)] == ["r1"]
    assert holds and holds[0].reason.startswith("needs 1 GPU, lane gpu has 0: never admitted under this plan")


def test_budget_allocation_never_exceeds_what_is_left():
    cfg = PlanSettings(target_verified=10, max_parallel=5, max_gpu_parallel=1, max_spend_usd=10.0,
                       lease_ttl_s=TTL, submit_grace_s=120)
    spent = _rec(0, state="ended", outcome="generated_unverified", spent_usd=3.0)
    snap = _snap([spent, _rec(1, cap_usd=4.0), _rec(2, cap_usd=4.0), _rec(3, cap_usd=4.0)])
    admits = [a for a in plan_tick(snap, cfg) if isinstance(a, Admit)]
    assert [a.allocation_usd for a in admits] == [4.0, 3.0]
    assert sum(a.allocation_usd for a in admits) <= 10.0 - 3.0


def test_budget_exhausted_with_nothing_running_ends_the_run():
    cfg = PlanSettings(target_verified=10, max_parallel=5, max_gpu_parallel=1, max_spend_usd=1.0,
                       lease_ttl_s=TTL, submit_grace_s=120)
    snap = _snap([_rec(0, state="ended", outcome="blocked", reason="x", spent_usd=1.0), _rec(1)])
    ends = [a for a in plan_tick(snap, cfg) if isinstance(a, EndRun)]
    assert [(a.run_id, a.reason) for a in ends] == [("r1", "budget_exhausted")]


def test_target_reached_admits_nothing():
    done = [_rec(i, state="ended", outcome="verified") for i in range(2)]
    cfg = PlanSettings(target_verified=3, max_parallel=5, max_gpu_parallel=1, max_spend_usd=None,
                       lease_ttl_s=TTL, submit_grace_s=120)
    running = _rec(5, state="active", job_id="9", submit_token="t")
    snap = _snap(done + [running, _rec(6), _rec(7)], queue={"9": QueueJob("9", "sw.c.t.r5")})
    assert not [a for a in plan_tick(snap, cfg) if isinstance(a, Admit)]


def test_unrecorded_submission_is_adopted_from_the_queue():
    rec = _rec(0)
    ls = Lease(run_id="r0", token="abc", holder="tick", acquired_at=NOW - 30, heartbeat_at=NOW - 30)
    snap = Snapshot(now=NOW, queue_known=True, queue={"77": QueueJob("77", "sw.c.abc.r0")},
                    runs={"r0": RunView(rec, LeaseView(None, b"x", ls, None, 0.0))})
    actions = plan_tick(snap, CFG)
    assert [(type(a), a.job_id) for a in actions if isinstance(a, Adopt)] == [(Adopt, "77")]
    assert not [a for a in actions if isinstance(a, (Admit, ReapLease))]


def test_an_allocation_smaller_than_one_session_is_not_granted():
    cfg = PlanSettings(target_verified=10, max_parallel=5, max_gpu_parallel=1, max_spend_usd=1.0,
                       lease_ttl_s=TTL, submit_grace_s=120)
    running = _rec(0, state="active", job_id="9", submit_token="t", allocation_usd=0.9, reservation_usd=0.2)
    snap = _snap([running, _rec(1, reservation_usd=0.2)], queue={"9": QueueJob("9", "sw.c.t.r0")})
    actions = plan_tick(snap, cfg)
    assert not [a for a in actions if isinstance(a, Admit)]         # 0.1 left < 0.2 per session
    assert [a.reason for a in actions if isinstance(a, SetHold)] == ["campaign budget exhausted"]
    assert not [a for a in actions if isinstance(a, EndRun)]        # the running one may free budget


def test_a_cap_below_one_reservation_ends_the_run():
    snap = _snap([_rec(0, cap_usd=0.1, reservation_usd=0.5), _rec(1, cap_usd=1.0, reservation_usd=0.5)])
    actions = plan_tick(snap, CFG)
    assert [(a.run_id, a.reason) for a in actions if isinstance(a, EndRun)] == [("r0", "budget_exhausted")]
    assert [a.run_id for a in actions if isinstance(a, Admit)] == ["r1"]


@PROPS
@given(snapshots())
def test_every_queued_run_not_admitted_has_exactly_one_reason(case):
    snap, cfg = case
    actions = plan_tick(snap, cfg)
    acted = {a.run_id for a in actions if isinstance(a, (Admit, Adopt, EndRun, ReapLease, GiveUpSubmission))}
    waits: dict[str, int] = {}
    for a in actions:
        if isinstance(a, Waiting):
            for reason, ids in a.reasons.items():
                assert reason
                for rid in ids:
                    waits[rid] = waits.get(rid, 0) + 1
    for rid, v in snap.runs.items():
        if v.record.state is RunState.queued and rid not in acted:
            assert waits.get(rid) == 1, (rid, waits.get(rid), v.lease)
    assert all(n == 1 for n in waits.values())


@PROPS
@given(snapshots())
def test_ghosts_are_only_cancelled_when_seen_before_and_never_with_the_queue_unknown(case):
    snap, cfg = case
    actions = plan_tick(snap, cfg)
    cancels = [a for a in actions if isinstance(a, CancelGhost)]
    assert not cancels       # the generator gives no earlier sightings
    notes = [a for a in actions if isinstance(a, NoteGhosts)]
    if not snap.queue_known:
        assert not notes
    else:
        corrupt = {rid for rid, v in snap.runs.items() if v.lease is not None and v.lease.lease is None}
        ghosts = {j.job_id for j in snap.queue.values() if ".ghost" in j.name and j.name.split(".")[3] not in corrupt}
        assert set(notes[0].jobs if notes else ()) == ghosts


def test_a_ghost_seen_for_the_grace_is_cancelled_and_holds_its_slot_meanwhile():
    from runstate.models import GhostJob
    cfg = PlanSettings(target_verified=10, max_parallel=1, max_gpu_parallel=1, max_spend_usd=None,
                       lease_ttl_s=TTL, submit_grace_s=120, ghost_grace_s=60)
    ghost = QueueJob("5", "sw.c.zzz.r0", 0)
    young = _snap([_rec(0)], queue={"5": ghost}, ghosts_seen={"5": GhostJob(name=ghost.name, first_seen=NOW - 10)})
    actions = plan_tick(young, cfg)
    assert not [a for a in actions if isinstance(a, (Admit, CancelGhost))]
    assert any("max_parallel 1" in r for r in reasons(actions).values())
    old = _snap([_rec(0)], queue={"5": ghost}, ghosts_seen={"5": GhostJob(name=ghost.name, first_seen=NOW - 61)})
    assert [a.job_id for a in plan_tick(old, cfg) if isinstance(a, CancelGhost)] == ["5"]


def test_an_uncertain_submission_keeps_its_lease_until_the_bound_then_is_given_up():
    cfg = PlanSettings(target_verified=10, max_parallel=3, max_gpu_parallel=1, max_spend_usd=None,
                       lease_ttl_s=TTL, submit_grace_s=5, uncertain_submit_s=300)
    ls = Lease(run_id="r0", token="abc", holder="tick", acquired_at=NOW - 200, heartbeat_at=NOW - 200)
    rec = _rec(0, submit_token="abc", submitting_since=NOW - 200)
    view = RunView(rec, LeaseView(None, b"x", ls, None, 0.0))
    actions = plan_tick(Snapshot(now=NOW, queue_known=True, queue={}, runs={"r0": view}), cfg)
    assert not [a for a in actions if isinstance(a, (ReapLease, GiveUpSubmission, Admit))]
    assert any("submit grace" in r for r in reasons(actions).values())
    later = plan_tick(Snapshot(now=NOW + 101, queue_known=True, queue={}, runs={"r0": view}), cfg)
    assert [type(a) for a in later if not isinstance(a, Waiting)] == [GiveUpSubmission]


def test_a_lane_backing_off_holds_its_runs_while_the_other_lane_admits():
    from runstate.models import LaneBackoff
    lanes = {"cpu": LaneBackoff(failures=2, until=NOW + 50, message="sbatch: error: Invalid partition name specified")}
    snap = _snap([_rec(0), _rec(1), _rec(2, gpus=1)], lanes=lanes)
    actions = plan_tick(snap, CFG)
    assert [a.run_id for a in actions if isinstance(a, Admit)] == ["r2"]
    why = reasons(actions)
    assert why["r0"].startswith("lane cpu backing off") and why["r0"].endswith("Invalid partition name specified")
    probing = _snap([_rec(0), _rec(1)], lanes={"cpu": LaneBackoff(failures=2, until=NOW - 1, message="x")})
    assert [a.run_id for a in plan_tick(probing, CFG) if isinstance(a, Admit)] == ["r0"]


def test_a_job_still_in_the_queue_after_its_controller_wrote_the_record_keeps_its_slot():
    ended = _rec(0, state="ended", outcome="verified", job_id="7", submit_token="t")
    failed = _rec(1, job_id="8", submit_token="u", attempts=1)        # queued by its own controller
    snap = _snap([ended, failed, _rec(2), _rec(3)],
                 queue={"7": QueueJob("7", "sw.c.t.r0"), "8": QueueJob("8", "sw.c.u.r1")})
    cfg = PlanSettings(target_verified=10, max_parallel=3, max_gpu_parallel=1, max_spend_usd=None,
                       lease_ttl_s=TTL, submit_grace_s=120)
    actions = plan_tick(snap, cfg)
    assert [a.run_id for a in actions if isinstance(a, Admit)] == ["r2"]
    assert "finishing" in reasons(actions)["r1"]


def reasons(actions) -> dict[str, str]:
    return {rid: r for a in actions if isinstance(a, Waiting) for rid, r in a.of().items()}
