"""The planner's side of issue 16: interruptions are not attempts, and max_interrupted ends every run.

Pure tests (no files, no Slurm): random vanished jobs with random end states and accounting
answers, then a whole run's life replayed through the planner's own actions.
"""
from hypothesis import HealthCheck, given, settings, strategies as st

from runstate.lease import LeaseView
from runstate.models import Lease, Outcome, RunRecord, RunState
from sweep.scheduler.slurm.accounting import (classify_stop, parse_sacct, parse_scontrol_job,
                                              sacct_argv)
from sweep.tick.plan import (INTERRUPTION_STATES, EndRun, Interrupt, PlanSettings, Requeue, RunView,
                             Snapshot, Waiting, plan_tick)

NOW = 1_000_000.0
TTL = 600.0
CFG = PlanSettings(target_verified=10, max_parallel=3, max_gpu_parallel=1, max_spend_usd=None,
                   lease_ttl_s=TTL, submit_grace_s=120)
FAULT_STATES = ["FAILED", "OUT_OF_MEMORY", "CANCELLED", "COMPLETED", "DEADLINE"]
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def active(job="7", **kw) -> RunRecord:
    base = dict(run_id="r", state=RunState.active, job_id=job, submit_token="t")
    base.update(kw)
    return RunRecord(**base)


def lease_seen(ago: float, job="7") -> LeaseView:
    ls = Lease(run_id="r", token="t", holder="job", job_id=job, acquired_at=NOW - ago, heartbeat_at=NOW - ago)
    return LeaseView(None, b"l", ls, None, 0.0)


def snap_of(rec: RunRecord, lease=None, **kw) -> Snapshot:
    return Snapshot(now=NOW, queue_known=True, queue={}, runs={rec.run_id: RunView(rec, lease, 0.0)}, **kw)


def reconcile(snap: Snapshot):
    acts = [a for a in plan_tick(snap, CFG) if isinstance(a, (Requeue, Interrupt, EndRun))]
    assert len(acts) <= 1
    return acts[0] if acts else None


# ---- one vanished job, by its end state -------------------------------------------------------

def test_preempted_node_fail_and_timeout_are_interruptions_with_their_cause():
    for state, cause in (("PREEMPTED", "preempted"), ("NODE_FAIL", "node_fail"), ("TIMEOUT", "time_limit")):
        a = reconcile(snap_of(active(attempts=2), end_states={"7": state}, accounting="known"))
        assert isinstance(a, Interrupt) and a.cause == cause and state in a.why, (state, a)


def test_failed_oom_and_cancelled_jobs_spend_an_attempt():
    for state in FAULT_STATES:
        a = reconcile(snap_of(active(), end_states={"7": state}, accounting="known"))
        assert isinstance(a, Requeue) and state in a.why, (state, a)


def test_without_accounting_a_vanished_job_is_an_attempt_and_says_why():
    a = reconcile(snap_of(active(), accounting="unavailable",
                          accounting_error="this cluster keeps no job accounting"))
    assert isinstance(a, Requeue) and "no accounting" in a.why and "keeps no job accounting" in a.why


def test_accounting_unknown_waits_then_counts_an_attempt_after_the_lease_ttl():
    waiting = snap_of(active(), lease_seen(30), accounting="unknown", accounting_error="sacct timed out")
    assert reconcile(waiting) is None
    said = [reason for a in plan_tick(waiting, CFG) if isinstance(a, Waiting) for reason in a.reasons]
    assert len(said) == 1 and "sacct timed out" in said[0] and "later tick" in said[0]
    late = snap_of(active(), lease_seen(TTL + 1), accounting="unknown", accounting_error="sacct timed out")
    a = reconcile(late)
    assert isinstance(a, Requeue) and "sacct timed out" in a.why and "lease_ttl_s" in a.why


def test_a_job_accounting_does_not_list_yet_is_judged_later():
    assert reconcile(snap_of(active(), lease_seen(30), accounting="known", end_states={})) is None
    assert reconcile(snap_of(active(), lease_seen(30), accounting="known", end_states={"7": "RUNNING"})) is None


def test_a_cause_the_controller_recorded_wins_over_accounting():
    rec = active(pending_interruption={"job_id": "7", "cause": "preempted", "detail": "PreemptTime=x"})
    a = reconcile(snap_of(rec, end_states={"7": "CANCELLED"}, accounting="known"))
    assert isinstance(a, Interrupt) and a.cause == "preempted"
    # a note left for an earlier job of the run does not count for this one
    old = active(pending_interruption={"job_id": "6", "cause": "preempted"})
    assert isinstance(reconcile(snap_of(old, end_states={"7": "FAILED"}, accounting="known")), Requeue)


def test_the_last_allowed_interruption_ends_the_run_max_interrupted():
    a = reconcile(snap_of(active(interruptions=9, max_interruptions=10), end_states={"7": "PREEMPTED"},
                          accounting="known"))
    assert isinstance(a, EndRun) and a.reason == "max_interrupted" and a.cause == "preempted"
    assert a.outcome is Outcome.blocked


# ---- properties ---------------------------------------------------------------------------------

end_state = st.sampled_from([*INTERRUPTION_STATES, *FAULT_STATES, "RUNNING", None])
accounting = st.sampled_from(["not_asked", "known", "unknown", "unavailable"])


@PROPS
@given(state=end_state, acct=accounting, attempts=st.integers(0, 5), max_attempts=st.integers(1, 6),
       interruptions=st.integers(0, 12), max_interruptions=st.integers(1, 12), ago=st.sampled_from([5, TTL + 5]))
def test_an_interruption_never_spends_an_attempt(state, acct, attempts, max_attempts, interruptions,
                                                 max_interruptions, ago):
    rec = active(attempts=min(attempts, max_attempts - 1), max_attempts=max_attempts,
                 interruptions=min(interruptions, max_interruptions - 1), max_interruptions=max_interruptions)
    ends = {"7": state} if state and acct == "known" else {}
    a = reconcile(snap_of(rec, lease_seen(ago), end_states=ends, accounting=acct))
    if state in INTERRUPTION_STATES and acct == "known":
        assert isinstance(a, (Interrupt, EndRun))
        if isinstance(a, EndRun):
            assert a.reason == "max_interrupted" and rec.interruptions + 1 >= rec.max_interruptions
    if isinstance(a, Interrupt) or (isinstance(a, EndRun) and a.reason == "max_interrupted"):
        assert state in INTERRUPTION_STATES and acct == "known"
    if isinstance(a, (Requeue, EndRun)) and getattr(a, "reason", "max_attempted") == "max_attempted":
        assert not (state in INTERRUPTION_STATES and acct == "known")


def _apply(rec: RunRecord, a) -> RunRecord:
    """What act.py writes for each reconcile action (kept in step with it by the Slurm tests)."""
    if isinstance(a, Interrupt):
        return rec.model_copy(update={"state": RunState.queued, **rec.interrupted(a.cause)})
    if isinstance(a, Requeue):
        return rec.model_copy(update={"state": RunState.queued, "attempts": rec.attempts + 1})
    assert isinstance(a, EndRun)
    upd = {"state": RunState.ended, "outcome": a.outcome, "reason": a.reason}
    if a.reason == "max_attempted":
        upd["attempts"] = rec.attempts + 1
    if a.reason == "max_interrupted":
        upd.update(rec.interrupted(a.cause))
    return rec.model_copy(update=upd)


@PROPS
@given(life=st.lists(st.sampled_from([*INTERRUPTION_STATES, *FAULT_STATES]), min_size=1, max_size=40),
       max_attempts=st.integers(1, 5), max_interruptions=st.integers(1, 10))
def test_every_run_ends_and_interruptions_never_exhaust_attempts(life, max_attempts, max_interruptions):
    rec = RunRecord(run_id="r", max_attempts=max_attempts, max_interruptions=max_interruptions)
    for n, state in enumerate(life):
        if rec.state is RunState.ended:
            break
        rec = rec.model_copy(update={"state": RunState.active, "job_id": str(n), "submit_token": "t"})
        rec.check_invariants()
        before = rec.attempts
        rec = _apply(rec, reconcile(Snapshot(now=NOW, queue_known=True, queue={},
                                             runs={"r": RunView(rec, None, 0.0)},
                                             end_states={str(n): state}, accounting="known")))
        if state in INTERRUPTION_STATES:
            assert rec.attempts == before                   # never an attempt
        assert rec.attempts <= max_attempts and rec.interruptions <= max_interruptions
        assert sum(rec.interrupted_by.values()) == rec.interruptions
    faults = sum(1 for s in life if s not in INTERRUPTION_STATES)
    if rec.state is RunState.ended:
        assert rec.reason in ("max_attempted", "max_interrupted")
        if rec.reason == "max_interrupted":
            assert rec.interruptions == max_interruptions
        else:
            assert rec.attempts == max_attempts
    else:
        # still going: neither limit was reached by what happened
        assert rec.interruptions < max_interruptions and rec.attempts < max_attempts
        assert faults < max_attempts


@PROPS
@given(max_interruptions=st.integers(1, 30))
def test_a_run_that_is_always_preempted_ends_max_interrupted(max_interruptions):
    rec = RunRecord(run_id="r", max_interruptions=max_interruptions)
    for n in range(max_interruptions + 5):
        if rec.state is RunState.ended:
            break
        rec = rec.model_copy(update={"state": RunState.active, "job_id": str(n), "submit_token": "t"})
        rec = _apply(rec, reconcile(Snapshot(now=NOW, queue_known=True, queue={},
                                             runs={"r": RunView(rec, None, 0.0)},
                                             end_states={str(n): "PREEMPTED"}, accounting="known")))
    assert rec.state is RunState.ended and rec.reason == "max_interrupted" and rec.attempts == 0
    assert rec.interrupted_by == {"preempted": max_interruptions}


# ---- Slurm's words, as measured on Slurm 22.05 ----------------------------------------------------

def _show(state, reason="None", restarts=0, preempt="None"):
    return (f"JobId=7 JobName=x\n   JobState={state} Reason={reason} Dependency=(null)\n"
            f"   Requeue=0 Restarts={restarts} BatchFlag=1 Reboot=0 ExitCode=0:0\n"
            f"   PreemptEligibleTime=2026-11-30T21:05:29 PreemptTime={preempt}\n")


def test_scontrol_at_sigterm_tells_preemption_requeue_node_failure_time_limit_and_cancel_apart():
    def cause(text, restart_count=0):
        return classify_stop(parse_scontrol_job(text), restart_count)
    assert cause(_show("COMPLETING", preempt="2026-11-30T21:05:35")).cause == "preempted"
    requeued = cause(_show("COMPLETING", restarts=1))
    assert requeued.cause == "requeued" and requeued.requeued
    assert cause(_show("PENDING", restarts=2), restart_count=1).requeued
    assert not cause(_show("COMPLETING", restarts=1), restart_count=1).requeued
    assert cause(_show("NODE_FAIL", "NodeDown")).cause == "node_fail"
    assert cause(_show("COMPLETING", "TimeLimit")).cause == "time_limit"
    assert cause(_show("COMPLETING")).cause == "cancelled"
    assert cause("garbage").cause == "unknown"


def test_sacct_is_one_call_for_all_ids_and_its_answer_is_parsed():
    argv = sacct_argv(["12", "3", "12"], "sacct")
    assert argv[0] == "sacct" and "--jobs=12,3" in argv and "-X" in argv and "-c" not in argv
    assert "-c" in sacct_argv(["3"], "jobcomp")
    out = "3|PREEMPTED\n4|CANCELLED by 1000\n4|NODE_FAIL\n99|FAILED\n"
    assert parse_sacct(out, ["3", "4"]) == {"3": "PREEMPTED", "4": "NODE_FAIL"}
