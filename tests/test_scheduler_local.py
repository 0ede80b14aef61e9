"""The local backend's own guarantees, with real processes: pid reuse, process-group cancel,
a submitter killed right after spawning, slots per lane, and launch failures."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runstate.errors import SchedulerError
from sweep.scheduler.local import LocalScheduler
from sweep.proc import boot_id, process_start_time
from sweep.scheduler.local.records import JobRecord, StateDir, is_alive
from tests.tools.scheduler_kit import JobFactory, queue_ids, read_output, unique_prefix, wait_for

REPO = Path(__file__).resolve().parents[1]
LONG = 120


@pytest.fixture
def local(tmp_path):
    prefix = unique_prefix("l")
    made = []

    def make(**kwargs) -> LocalScheduler:
        kwargs = {"cpu_slots": 4, "gpu_slots": 4, "cancel_grace": 1.0, **kwargs}
        made.append(LocalScheduler(tmp_path / "local-jobs", prefix, **kwargs))
        return made[-1]
    yield make, JobFactory(tmp_path / "runs", prefix)
    for scheduler in made:
        snapshot = scheduler.queue()
        if snapshot.known and snapshot.jobs:
            scheduler.cancel(snapshot.jobs)


def _alive(pid: int) -> bool:
    return process_start_time(pid) is not None


def test_a_record_whose_start_time_differs_is_not_alive_and_is_never_killed(local, tmp_path):
    make, jobs = local
    scheduler = make()
    # a live process that merely has the recorded pid: what pid reuse looks like
    bystander = subprocess.Popen(["sleep", str(LONG)], start_new_session=True)
    try:
        state = StateDir(tmp_path / "local-jobs")
        real_start = process_start_time(bystander.pid)
        assert real_start is not None
        state.write(JobRecord(job_id="local-77", name=f"{jobs.prefix}tok.run-x", argv=["sleep"],
                              workdir=str(tmp_path), stdout="/dev/null", stderr="/dev/null",
                              submitted_at=time.time(), pid=bystander.pid,
                              start_time=str(int(real_start) - 1), boot_id=boot_id()))
        assert not is_alive(state.read("local-77"))
        assert "local-77" not in queue_ids(scheduler.queue())
        assert state.read("local-77") is None, "a dead job's record is reaped by queue()"

        state.write(JobRecord(job_id="local-78", name=f"{jobs.prefix}tok.run-y", argv=["sleep"],
                              workdir=str(tmp_path), stdout="/dev/null", stderr="/dev/null",
                              submitted_at=time.time(), pid=bystander.pid,
                              start_time=str(int(real_start) + 1), boot_id=boot_id()))
        scheduler.cancel(["local-78"])
        assert bystander.poll() is None, "cancel killed a process that only shares the pid"
    finally:
        bystander.kill()
        bystander.wait()


def test_a_record_from_another_boot_is_not_alive(local, tmp_path):
    make, jobs = local
    scheduler = make()
    job_id = scheduler.submit(jobs.spec(sleep=LONG)[0])
    state = StateDir(tmp_path / "local-jobs")
    record = state.read(job_id)
    assert is_alive(record)
    record.boot_id = "00000000-0000-0000-0000-000000000000"
    assert not is_alive(record)


def test_cancel_kills_the_whole_process_group_even_a_child_that_ignores_term(local, tmp_path):
    make, jobs = local
    scheduler = make(cancel_grace=0.5)
    pids = tmp_path / "pids.json"
    program = textwrap.dedent(f"""
        import json, os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)      # the controller ignores TERM: needs KILL
        child = subprocess.Popen(["sleep", "{LONG}"])       # inherits the job's process group
        tmp = {str(pids)!r} + ".tmp"
        json.dump({{"parent": os.getpid(), "child": child.pid}}, open(tmp, "w"))
        os.replace(tmp, {str(pids)!r})
        time.sleep({LONG})
    """)
    job, _ = jobs.spec(argv=[sys.executable, "-c", program])
    job_id = scheduler.submit(job)
    wait_for(pids.exists, 10, "the job to start its child")
    seen = json.loads(pids.read_text())
    assert os.getpgid(seen["child"]) == seen["parent"], "the child is in the job's group"

    started = time.monotonic()
    scheduler.cancel([job_id])
    assert time.monotonic() - started < 8
    assert not _alive(seen["parent"]) and not _alive(seen["child"])
    assert job_id not in queue_ids(scheduler.queue())


def test_a_submitter_killed_right_after_spawning_leaves_a_recognisable_job(local, tmp_path):
    make, jobs = local
    job, out = jobs.spec("after-the-crash", sleep=LONG)
    # a separate submitter process that SIGKILLs itself the instant the launcher is spawned
    submitter = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        from sweep.scheduler.base import JobSpec
        import sweep.scheduler.local.scheduler as backend
        real_spawn = backend._spawn
        def spawn_then_die(*args, **kwargs):
            real_spawn(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        backend._spawn = spawn_then_die
        s = backend.LocalScheduler(Path({str(tmp_path / 'local-jobs')!r}), {jobs.prefix!r}, cpu_slots=4, gpu_slots=0)
        s.submit(JobSpec(name={job.name!r}, argv={job.argv!r}, workdir=Path({str(job.workdir)!r}),
                         stdout=Path({str(job.stdout)!r}), stderr=Path({str(job.stderr)!r}),
                         env={job.env!r}))
        print("submit returned: the submitter was supposed to die")
    """)
    result = subprocess.run([sys.executable, "-c", submitter], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr

    seen = read_output(out, timeout=15)            # the job runs without its submitter
    assert seen["argv"] == ["after-the-crash"]
    scheduler = make()
    snapshot = wait_for(lambda: (s := scheduler.queue()).jobs and s, 10, "the job in queue()")
    (info,) = snapshot.jobs.values()
    assert (info.name, info.state, info.job_id) == (job.name, "RUNNING", seen["env"]["SWEEP_JOB_ID"])
    scheduler.cancel([info.job_id])
    wait_for(lambda: not _alive(seen["pid"]), 10, "the orphaned job to be cancelled")


def test_a_full_lane_is_refused_naming_the_lane_and_slots(local):
    make, jobs = local
    scheduler = make(cpu_slots=1, gpu_slots=2)
    first = scheduler.submit(jobs.spec(sleep=LONG)[0])
    with pytest.raises(SchedulerError, match=r"lane cpu is full: 1 of 1 cpu slots in use, .* needs 1"):
        scheduler.submit(jobs.spec(sleep=LONG)[0])
    with pytest.raises(SchedulerError, match=r"needs 3 GPU, lane gpu has 2"):
        scheduler.submit(jobs.spec(gpus=3)[0])
    scheduler.submit(jobs.spec(gpus=2, sleep=LONG)[0])   # the gpu lane is separate from cpu
    with pytest.raises(SchedulerError, match=r"lane gpu is full: 2 of 2 gpu slots in use, .* needs 1"):
        scheduler.submit(jobs.spec(gpus=1)[0])
    scheduler.cancel([first])
    scheduler.submit(jobs.spec(sleep=LONG)[0])           # a freed slot is usable again


def test_no_gpu_machine_reports_zero_gpu_capacity(local, monkeypatch):
    make, jobs = local
    monkeypatch.setenv("PATH", "/nonexistent")            # no nvidia-smi to ask
    scheduler = make(gpu_slots=None)
    assert scheduler.capacity()["gpu"] == 0
    with pytest.raises(SchedulerError, match=r"needs 1 GPU, lane gpu has 0"):
        scheduler.submit(jobs.spec(gpus=1)[0])


def test_gpu_jobs_get_distinct_devices(local):
    make, jobs = local
    scheduler = make(gpu_slots=4)
    first, out1 = jobs.spec(gpus=2, sleep=LONG)
    second, out2 = jobs.spec(gpus=2, sleep=LONG)
    first_id = scheduler.submit(first)
    scheduler.submit(second)
    assert read_output(out1)["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert read_output(out2)["env"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    scheduler.cancel([first_id])
    third, out3 = jobs.spec(gpus=1, sleep=LONG)
    scheduler.submit(third)
    assert read_output(out3)["env"]["CUDA_VISIBLE_DEVICES"] == "0"


def test_a_command_that_cannot_start_is_reported_and_leaves_no_record(local, tmp_path):
    make, jobs = local
    scheduler = make()
    broken = tmp_path / "broken-controller"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    with pytest.raises(SchedulerError, match=r"did not start: .*No such file"):
        scheduler.submit(jobs.spec(argv=[str(broken)])[0])
    with pytest.raises(SchedulerError, match="command 'no-such-command-sweep' not found"):
        scheduler.submit(jobs.spec(argv=["no-such-command-sweep"])[0])
    assert scheduler.queue().jobs == {}
    assert StateDir(tmp_path / "local-jobs").job_ids() == []


def test_job_ids_are_never_reused(local):
    make, jobs = local
    scheduler = make()
    first, out = jobs.spec()
    first_id = scheduler.submit(first)
    read_output(out)
    wait_for(lambda: first_id not in queue_ids(scheduler.queue()), 10, "the first job to be reaped")
    second_id = scheduler.submit(jobs.spec()[0])
    assert second_id != first_id
    assert int(second_id.split("-")[1]) > int(first_id.split("-")[1])


def test_a_record_without_pid_is_pending_then_reaped(local, tmp_path):
    make, jobs = local
    scheduler = make()
    state = StateDir(tmp_path / "local-jobs")
    fresh = JobRecord(job_id="local-90", name=f"{jobs.prefix}tok.run-a", argv=["x"], workdir="/",
                      stdout="/dev/null", stderr="/dev/null", submitted_at=time.time())
    stale = JobRecord(job_id="local-91", name=f"{jobs.prefix}tok.run-b", argv=["x"], workdir="/",
                      stdout="/dev/null", stderr="/dev/null", submitted_at=time.time() - 3600)
    state.write(fresh)
    state.write(stale)
    snapshot = scheduler.queue()
    assert (snapshot.jobs["local-90"].state, snapshot.jobs["local-90"].reason) == ("PENDING", "Launching")
    assert "local-91" not in snapshot.jobs and state.read("local-91") is None
    # cancelled before its launcher ran: the launcher must refuse to start it
    scheduler.cancel(["local-90"])
    assert state.read("local-90").cancelled
    assert "local-90" not in scheduler.queue().jobs


def test_the_launcher_refuses_a_job_cancelled_before_it_started(tmp_path):
    state = StateDir(tmp_path / "local-jobs")
    state.create()
    marker = tmp_path / "ran"
    state.write(JobRecord(job_id="local-5", name="sw.x.run", argv=["touch", str(marker)], workdir="/",
                          stdout="/dev/null", stderr="/dev/null", submitted_at=time.time(),
                          cancelled=True))
    read_fd, write_fd = os.pipe()
    result = subprocess.run([sys.executable, "-m", "sweep.scheduler.local.launch", str(state.root),
                             "local-5", str(write_fd), "--", "touch", str(marker)],
                            pass_fds=(write_fd,), cwd=REPO, capture_output=True, text=True, timeout=30)
    os.close(write_fd)
    reason = os.read(read_fd, 4096).decode()
    os.close(read_fd)
    assert result.returncode == 127
    assert "cancelled before it started" in reason
    assert not marker.exists()


def test_state_dir_and_records_are_private(local, tmp_path):
    make, jobs = local
    scheduler = make()
    job_id = scheduler.submit(jobs.spec(sleep=LONG)[0])
    root = tmp_path / "local-jobs"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "jobs" / f"{job_id}.json").stat().st_mode) == 0o600
