"""Issue 16 outside Slurm: the lane settings for preemption, and the local backend's own end states."""
from __future__ import annotations

import os
import signal

import pytest
from pydantic import ValidationError

from sweep.models.lanes import LaneSettings, SchedulerSettings
from sweep.scheduler.local import LocalScheduler
from sweep.scheduler.local.records import StateDir
from sweep.scheduler.slurm import SlurmScheduler
from tests.tools.scheduler_kit import JobFactory, queue_ids, unique_prefix, wait_for

LONG = 120


def _errors(data: dict) -> list[tuple]:
    with pytest.raises(ValidationError) as info:
        SchedulerSettings.model_validate(data)
    return [(tuple(e["loc"]), e["msg"]) for e in info.value.errors()]


def test_a_preemptible_lane_with_slurm_requeue_and_its_own_warning_reaches_sbatch(tmp_path):
    settings = SchedulerSettings.model_validate({"backend": "slurm", "lanes": {"gpu": {
        "partition": "gpu-scavenger", "qos": "scavenger", "warn_before_end_s": 300,
        "requeue": "slurm", "preemptible": True}}})
    lane = settings.lanes.gpu
    assert lane.preemptible and lane.requeue == "slurm"
    scheduler = SlurmScheduler("sw.abc.", settings.lanes, signal=settings.signal)
    job = JobFactory(tmp_path, "sw.abc.").spec(gpus=2)[0]
    opts = scheduler.sbatch_options(job)
    assert "--signal=B:USR1@300" in opts and "--requeue" in opts and "--no-requeue" not in opts
    assert "--partition=gpu-scavenger" in opts and "--qos=scavenger" in opts
    cpu = scheduler.sbatch_options(JobFactory(tmp_path, "sw.abc.").spec()[0])
    assert "--signal=B:USR1@120" in cpu and "--no-requeue" in cpu      # the defaults


@pytest.mark.parametrize("lane, field", [
    ({"requeue": "always"}, "requeue"),
    ({"warn_before_end_s": 5}, "warn_before_end_s"),
    ({"warn_before_end_s": 10 ** 7}, "warn_before_end_s"),
    ({"preemptible": "sometimes"}, "preemptible"),
    ({"extra_args": ["--requeue"]}, "extra_args"),
    ({"extra_args": ["--no-requeue"]}, "extra_args"),
    ({"extra_args": ["--signal=B:TERM@60"]}, "extra_args"),
])
def test_bad_preemption_settings_are_refused_naming_the_field(lane, field):
    errors = _errors({"lanes": {"cpu": lane}})
    assert [e[0] for e in errors] == [("lanes", "cpu", field)], errors


def test_accounting_must_be_one_of_the_known_sources():
    assert SchedulerSettings().accounting == "sacct"
    assert [e[0] for e in _errors({"accounting": "slurmdbd"})] == [("accounting",)]


def test_a_lane_without_its_own_warning_uses_the_scheduler_signal():
    assert LaneSettings().job_signal("B:USR1@90") == "B:USR1@90"
    assert LaneSettings(warn_before_end_s=45).job_signal("B:USR1@90") == "B:USR1@45"


# ---- the local backend records how its jobs ended ---------------------------------------------------

@pytest.fixture
def local(tmp_path):
    prefix = unique_prefix("p")
    scheduler = LocalScheduler(tmp_path / "local-jobs", prefix, cpu_slots=4, gpu_slots=0, cancel_grace=1.0)
    yield scheduler, JobFactory(tmp_path / "runs", prefix)
    snap = scheduler.queue()
    if snap.known and snap.jobs:
        scheduler.cancel(snap.jobs)


def test_local_end_states_cancelled_failed_and_a_reboot_as_node_failure(local, tmp_path):
    scheduler, jobs = local
    cancelled = scheduler.submit(jobs.spec(sleep=LONG)[0])
    killed = scheduler.submit(jobs.spec(sleep=LONG)[0])
    rebooted = scheduler.submit(jobs.spec(sleep=LONG)[0])
    state = StateDir(tmp_path / "local-jobs")
    scheduler.cancel([cancelled])
    os.killpg(state.read(killed).pid, signal.SIGKILL)            # its own crash: nobody asked
    record = state.read(rebooted)
    record.boot_id = "00000000-0000-0000-0000-000000000000"      # what a reboot under it looks like
    state.write(record)
    wait_for(lambda: not ({cancelled, killed, rebooted} & queue_ids(scheduler.queue())), 10, "the jobs to end")
    ended = scheduler.end_states([cancelled, killed, rebooted])
    assert ended.asked and ended.known and ended.available
    assert ended.states == {cancelled: "CANCELLED", killed: "FAILED", rebooted: "NODE_FAIL"}
    assert scheduler.end_states([]).asked is False                 # nothing vanished: no question
    os.kill(record.pid, signal.SIGKILL)                             # the "rebooted" process itself


def test_observe_asks_once_and_only_when_a_job_vanished(tmp_path):
    """The second observe step: one end_states call for every vanished job of the tick."""
    from runstate.models import RunRecord, RunState
    from sweep.tick.observe import ask_end_states, vanished_jobs
    from sweep.tick.plan import QueueJob, RunView

    calls = []

    class Recording:
        name = "recording"

        def end_states(self, ids):
            calls.append(sorted(ids))
            from sweep.scheduler.base import EndStates
            return EndStates(asked=True, known=True, states={i: "PREEMPTED" for i in ids})

    def active(rid, job, **kw):
        return RunView(RunRecord(run_id=rid, state=RunState.active, job_id=job, submit_token="t", **kw))
    runs = {"a": active("a", "1"), "b": active("b", "2"), "c": active("c", "3"),
            "d": active("d", "4", pending_interruption={"job_id": "4", "cause": "requeued"})}
    queue = {"3": QueueJob("3", "sw.x.t.c")}
    assert vanished_jobs(False, {}, runs) == []                    # queue UNKNOWN: nothing vanished
    ids = vanished_jobs(True, queue, runs)
    assert sorted(ids) == ["1", "2"]                               # d's controller said why itself
    ask_end_states(Recording(), ids)
    ask_end_states(Recording(), [])
    assert calls == [["1", "2"]]
    from sweep.scheduler.base import EndStates
    from sweep.tick.observe import accounting_word

    class NoAccounting:              # a site that keeps no record says so (the contract's `unavailable`)
        def end_states(self, ids):
            return EndStates.unavailable("no accounting storage")

    class Broken:                    # a failed call is an unanswered question, never a crashed tick
        def end_states(self, ids):
            raise OSError("sacct: connection refused")
    assert accounting_word(ask_end_states(NoAccounting(), ["1"])) == "unavailable"
    broken = ask_end_states(Broken(), ["1"])
    assert (broken.asked, broken.known, accounting_word(broken)) == (True, False, "unknown")
    assert "connection refused" in broken.error
