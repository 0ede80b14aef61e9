"""The scheduler contract, run against both the local backend and a real Slurm cluster.

Every test here uses real processes: on `slurm` the jobs are real sbatch jobs on the throwaway
cluster (tests/slurm_cluster.py), on `local` they are real detached processes. The job is
tests/tools/write_argv.py, which writes what it received to a file.
"""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, replace
from typing import Any
from pathlib import Path

import pytest

from runstate.errors import SchedulerError
from sweep.scheduler.base import Scheduler
from sweep.scheduler.local import LocalScheduler
from sweep.scheduler.slurm import SlurmScheduler
from tests.tools.scheduler_kit import JobFactory, queue_ids, read_output, unique_prefix, wait_for

LONG = 120   # seconds a "running" test job sleeps; every test cancels what it started


@dataclass
class Backend:
    kind: str
    scheduler: Scheduler
    jobs: JobFactory
    partitions: dict[str, str]     # lane -> partition name the backend reports
    make: Any                      # (prefix, env=None) -> a second scheduler of the same kind
    base_env: dict                 # the environment the backend's clients run with


def _cleanup(scheduler: Scheduler) -> None:
    snapshot = scheduler.queue()
    if snapshot.known and snapshot.jobs:
        scheduler.cancel(snapshot.jobs)


@pytest.fixture(params=["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def backend(request, tmp_path):
    made: list[Scheduler] = []
    if request.param == "local":
        state = tmp_path / "local-jobs"

        def make(prefix: str, env: dict | None = None) -> Scheduler:
            made.append(LocalScheduler(state, prefix, cpu_slots=8, gpu_slots=4, cancel_grace=2, env=env))
            return made[-1]
        base_env = dict(os.environ)
        partitions = {"cpu": "local-cpu", "gpu": "local-gpu"}
    else:
        cluster = request.getfixturevalue("slurm_cluster")

        def make(prefix: str, env: dict | None = None, **options) -> Scheduler:
            made.append(SlurmScheduler(prefix, call_timeout=20, env=env or cluster.env, **options))
            return made[-1]
        base_env = dict(cluster.env)
        partitions = {"cpu": "cpu", "gpu": "gpu"}
    prefix = unique_prefix()
    scheduler = make(prefix)
    yield Backend(request.param, scheduler, JobFactory(tmp_path / "runs", prefix), partitions, make, base_env)
    for s in made:
        _cleanup(s)


def test_jobs_on_both_lanes_show_in_one_queue_call_with_their_gpus(backend):
    cpu_job, _ = backend.jobs.spec(sleep=LONG)
    gpu_job, _ = backend.jobs.spec(gpus=2, sleep=LONG)
    cpu_id = backend.scheduler.submit(cpu_job)
    gpu_id = backend.scheduler.submit(gpu_job)
    assert cpu_id != gpu_id

    snapshot = backend.scheduler.queue()
    assert snapshot.known and snapshot.error is None
    assert set(snapshot.jobs) == {cpu_id, gpu_id}
    cpu, gpu = snapshot.jobs[cpu_id], snapshot.jobs[gpu_id]
    assert (cpu.name, cpu.partition, cpu.gpus) == (cpu_job.name, backend.partitions["cpu"], 0)
    assert (gpu.name, gpu.partition, gpu.gpus) == (gpu_job.name, backend.partitions["gpu"], 2)
    assert "gpu" in gpu.gres and cpu.gres == ""
    assert {cpu.state, gpu.state} <= {"PENDING", "RUNNING", "CONFIGURING"}


def test_argv_and_env_arrive_byte_exact_and_the_job_knows_its_id(backend):
    tricky = ["two words", "it's", '"double"', "$(touch pwned)", "`touch pwned2`", "*", "; rm -rf x",
              "--job-name=evil", "-J", "", "new\nline", "tab\there", "ünïcödé ✓", "\\back\\slash"]
    value = "quote ' double \" dollar $(touch pwned3) newline\nend"
    job, out = backend.jobs.spec(*tricky, env={"SWEEP_TEST_VALUE": value})
    job_id = backend.scheduler.submit(job)

    seen = read_output(out)
    assert seen["argv"] == tricky
    assert seen["env"]["SWEEP_JOB_ID"] == job_id
    assert seen["env"]["SWEEP_TEST_VALUE"] == value
    assert Path(seen["cwd"]) == job.workdir
    assert not list(job.workdir.glob("pwned*")), "a shell expanded the job's argv or env"


@pytest.mark.parametrize("bad_name", ["x;touch PWNED", "$(touch PWNED)", "a b", "a/b", "`id`", "x\nid", ""])
def test_job_name_with_shell_metacharacters_is_refused_and_nothing_runs(backend, bad_name):
    marker = backend.jobs.root / "PWNED"
    job, out = backend.jobs.spec(argv=["touch", str(marker)])
    bad = replace(job, name=backend.jobs.prefix + bad_name if bad_name else "")
    with pytest.raises(SchedulerError, match="not allowed|does not start with"):
        backend.scheduler.submit(bad)
    time.sleep(0.3)
    assert not marker.exists()
    assert backend.scheduler.queue().jobs == {}
    assert not job.stdout.exists(), "nothing may be prepared for a refused job"


def test_bad_environment_name_is_refused_before_anything_runs(backend):
    job, out = backend.jobs.spec(env={"BAD NAME": "x"})
    with pytest.raises(SchedulerError, match="environment name"):
        backend.scheduler.submit(job)
    job, out = backend.jobs.spec(env={"SWEEP_JOB_ID": "forged"})
    with pytest.raises(SchedulerError, match="set by the scheduler"):
        backend.scheduler.submit(job)
    assert backend.scheduler.queue().jobs == {}


def test_cancel_is_idempotent_and_the_job_leaves_the_queue(backend):
    job, out = backend.jobs.spec(sleep=LONG)
    job_id = backend.scheduler.submit(job)
    read_output(out)   # it really runs
    unknown = "99999999" if backend.kind == "slurm" else "local-99999"

    backend.scheduler.cancel([job_id, unknown])
    backend.scheduler.cancel([job_id])
    backend.scheduler.cancel([])
    wait_for(lambda: job_id not in queue_ids(backend.scheduler.queue()), 20, "the cancelled job to leave")
    backend.scheduler.cancel([job_id])


def test_a_finished_job_leaves_the_queue(backend):
    job, out = backend.jobs.spec(sleep=0)
    job_id = backend.scheduler.submit(job)
    read_output(out)
    wait_for(lambda: job_id not in queue_ids(backend.scheduler.queue()), 30, "the finished job to leave")


def test_queue_holds_only_this_campaigns_jobs(backend):
    prefix = backend.jobs.prefix
    # a campaign whose prefix extends ours without the dot must not leak in
    other = backend.make(prefix.rstrip(".") + "x.")
    other_jobs = JobFactory(backend.jobs.root / "other", other.name_prefix)
    mine, _ = backend.jobs.spec(sleep=LONG)
    theirs, _ = other_jobs.spec(sleep=LONG)
    my_id = backend.scheduler.submit(mine)
    their_id = other.submit(theirs)

    assert queue_ids(backend.scheduler.queue()) == {my_id}
    assert queue_ids(other.queue()) == {their_id}


def test_log_files_and_script_are_private(backend):
    job, out = backend.jobs.spec()
    backend.scheduler.submit(job)
    read_output(out)
    for path in (job.stdout, job.stderr):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    if backend.kind == "slurm":
        assert stat.S_IMODE(os.stat(job.script_path).st_mode) == 0o600


def test_submit_of_a_job_outside_the_campaign_prefix_is_refused(backend):
    job, _ = backend.jobs.spec()
    with pytest.raises(SchedulerError, match="does not start with this campaign's prefix"):
        backend.scheduler.submit(replace(job, name="sw.elsewhere.run-1"))


def test_capacity_names_both_lanes(backend):
    capacity = backend.scheduler.capacity()
    assert set(capacity) == {"cpu", "gpu"}
    if backend.kind == "local":
        assert capacity == {"cpu": 8, "gpu": 4}
    else:
        assert capacity == {"cpu": None, "gpu": None}


# a scrontab tick's own job context: none of it may reach a job the tick submits
TICK_JOB_CONTEXT = {"SLURM_RESTART_COUNT": "12", "SLURM_JOB_ID": "424242", "SLURM_JOB_NAME": "cron",
                    "SLURMD_NODENAME": "cron-node"}
# what the scheduler (and Slurm's batch shell) set in a job themselves
SCHEDULER_SET = {"local": {"SWEEP_JOB_ID"},
                 "slurm": {"SWEEP_JOB_ID", "SLURM_CONF", "ENVIRONMENT", "HOSTNAME", "PWD", "OLDPWD",
                           "SHLVL", "TMPDIR", "_",
                           "LC_CTYPE"}}    # Python's own C-locale coercion (PEP 538), without LANG


@pytest.mark.parametrize("gpus", [0, 1], ids=["cpu", "gpu"])
def test_the_job_gets_exactly_its_environment_never_the_submitters_job_context(backend, gpus):
    source = {**backend.base_env, **TICK_JOB_CONTEXT, "SWEEP_PASSED": "yes", "NOT_NAMED": "no"}
    scheduler = backend.make(backend.jobs.prefix, env=source)
    job, out = backend.jobs.spec(gpus=gpus, env={"SWEEP_TEST_VALUE": "set by sweep"},
                                 pass_env=("PATH", "SWEEP_PASSED", "SLURM_RESTART_COUNT", "ABSENT"))
    expected = scheduler.job_environment(job)
    assert not set(TICK_JOB_CONTEXT) & set(expected)
    assert expected["SWEEP_TEST_VALUE"] == "set by sweep"
    job_id = scheduler.submit(job)
    seen = read_output(out)["all_env"]

    assert "SLURM_RESTART_COUNT" not in seen, "the submitter's restart count reached the job"
    assert seen.get("SLURM_JOB_ID") in (None, job_id) and seen.get("SLURMD_NODENAME") != "cron-node"
    assert seen["SWEEP_JOB_ID"] == job_id
    for name, value in expected.items():
        assert seen.get(name) == value, name
    own = SCHEDULER_SET[backend.kind] | ({"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
                                          "ZE_AFFINITY_MASK"} if gpus else set())
    others = {k for k in set(seen) - set(expected) if k not in own and not k.startswith(("SLURM_", "SLURMD_"))}
    assert not others, f"the job got variables nobody asked for: {sorted(others)}"
    if backend.kind == "slurm":     # only the named variables pass
        assert set(expected) == {"PATH", "SWEEP_PASSED", "SWEEP_TEST_VALUE", "SWEEP_TEST_SLEEP"}
        assert "NOT_NAMED" not in seen
    else:                           # a local job is a process of this machine: it inherits the rest
        assert seen["NOT_NAMED"] == "no"
    # the backend's declared fact (init warns on it) is what its job really got
    assert type(scheduler).jobs_get_tickers_environment is (seen.get("NOT_NAMED") == "no")



# ---- the rest of the contract: end states, preflight, and what a running job asks -------------------

def test_every_backend_keeps_the_whole_protocol(backend):
    assert isinstance(backend.scheduler, Scheduler)
    cls = type(backend.scheduler)
    for name in ("preflight", "job_restart_count", "job_stop_cause"):
        assert callable(getattr(cls, name)), name
    assert cls.uses_lanes is (backend.kind == "slurm")


def test_a_job_counts_only_its_own_restarts(backend):
    cls = type(backend.scheduler)
    own = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "3"}
    assert cls.job_restart_count(own, "77") == (3 if backend.kind == "slurm" else 0)
    assert cls.job_restart_count(own, "78") == 0, "another job's restarts are never this job's"
    assert cls.job_restart_count({"SLURM_RESTART_COUNT": "12"}, "77") == 0
    assert cls.job_restart_count({"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "x"}, "77") == 0


def test_the_stop_cause_of_a_running_job_is_one_bounded_question(backend):
    cls = type(backend.scheduler)
    job, out = backend.jobs.spec(sleep=LONG)
    job_id = backend.scheduler.submit(job)
    inside = read_output(out)["all_env"]          # the job's own environment, as the job sees it
    t0 = time.monotonic()
    cause = cls.job_stop_cause(job_id, 0, inside)
    assert time.monotonic() - t0 < 10
    assert cause.cause == "cancelled" and not cause.requeued, cause
    if backend.kind == "slurm":
        assert "JobState=RUNNING" in cause.detail, cause      # asked of Slurm, about this job
    outside = cls.job_stop_cause(job_id, 0, {})  # not inside the job: nothing to ask
    assert outside.cause == "cancelled" and "JobState" not in outside.detail


def test_end_states_say_how_a_cancelled_job_ended(backend):
    scheduler = (backend.make(backend.jobs.prefix, accounting="jobcomp") if backend.kind == "slurm"
                 else backend.scheduler)
    job, out = backend.jobs.spec(sleep=LONG)
    job_id = scheduler.submit(job)
    read_output(out)
    scheduler.cancel([job_id])
    wait_for(lambda: job_id not in queue_ids(scheduler.queue()), 30, "the cancelled job to leave")
    answer = wait_for(lambda: (a := scheduler.end_states([job_id])).states.get(job_id) and a, 30,
                      "its end state to be recorded")
    assert answer.asked and answer.known and answer.states[job_id] == "CANCELLED", answer
    assert scheduler.end_states([]).asked is False


def test_preflight_checks_the_plans_lanes(backend, monkeypatch):
    from sweep.models.lanes import SchedulerSettings
    cls = type(backend.scheduler)
    if backend.kind == "slurm":
        monkeypatch.setenv("SLURM_CONF", backend.base_env["SLURM_CONF"])   # as the operator's shell has it
    good = SchedulerSettings(backend=backend.kind, lanes={"cpu": {"partition": backend.partitions["cpu"]}})
    ok = cls.preflight(good, False, 0)
    assert ok.findings == [] and ok.checked, ok
    bad = SchedulerSettings(backend=backend.kind, lanes={"cpu": {"partition": "no-such-partition"}})
    found = cls.preflight(bad, False, 0)
    if backend.kind == "slurm":
        assert [(f.level, f.field) for f in found.findings] == [("error", "scheduler.lanes.cpu.partition")]
        assert "MessageTimeout" in ok.checked
    else:                       # lanes are Slurm's: the local backend has nothing to check
        assert found.findings == []
