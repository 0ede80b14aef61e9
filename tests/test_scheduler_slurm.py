"""The slurm backend against a real Slurm cluster: GPU contention, foreign jobs, the cron job,
Slurm's own error messages, and a controller outage (in a cluster of its own)."""
from __future__ import annotations

import stat
import subprocess
import time
import uuid

import pytest

from runstate.errors import SchedulerError, SubmissionUncertain
from sweep.models.lanes import GpuLaneSettings, LaneSettings, LanesSettings
from sweep.scheduler.slurm import SlurmScheduler
from tests.slurm_cluster import SlurmCluster, remove_cluster_dir, start_throwaway_cluster
from tests.tools.scheduler_kit import JobFactory, queue_ids, read_output, unique_prefix, wait_for

pytestmark = pytest.mark.slurm
LONG = 120


@pytest.fixture
def campaign(slurm_cluster, tmp_path):
    """A scheduler with a fresh prefix on the shared cluster; cancels its jobs afterwards."""
    prefix = unique_prefix("s")
    made = []

    def make(lanes: LanesSettings | None = None, **kwargs) -> SlurmScheduler:
        made.append(SlurmScheduler(prefix, lanes, env=slurm_cluster.env, **kwargs))
        return made[-1]
    yield make, JobFactory(tmp_path / "runs", prefix)
    leftovers = SlurmScheduler(prefix, env=slurm_cluster.env).queue()
    if leftovers.known and leftovers.jobs:
        SlurmScheduler(prefix, env=slurm_cluster.env).cancel(leftovers.jobs)


def _gpus_in_use(cluster: SlurmCluster) -> int:
    out = cluster.run("sinfo", "-h", "-N", "-p", "gpu", "-O", "GresUsed:").stdout.strip()
    return int(out.split("gpu:")[-1].split("(")[0]) if "gpu:" in out else 0


def test_three_two_gpu_jobs_two_run_and_the_third_pends_on_resources(slurm_cluster, campaign):
    make, jobs = campaign
    scheduler = make()
    wait_for(lambda: _gpus_in_use(slurm_cluster) == 0, 30, "GPUs of earlier tests to be released")
    ids = [scheduler.submit(jobs.spec(gpus=2, sleep=LONG)[0]) for _ in range(3)]

    def settled():
        snapshot = scheduler.queue()
        states = sorted((j.state, j.reason) for j in snapshot.jobs.values())
        return snapshot if states == [("PENDING", "Resources"), ("RUNNING", "None"),
                                      ("RUNNING", "None")] else None
    snapshot = wait_for(settled, 30, "two 2-GPU jobs running and the third pending on Resources")
    assert set(snapshot.jobs) == set(ids)
    assert all(j.gpus == 2 and j.partition == "gpu" for j in snapshot.jobs.values())
    pending = [j for j in snapshot.jobs.values() if j.state == "PENDING"]
    assert pending[0].job_id == ids[2]   # first come, first served


def test_gpus_request_is_read_from_tres_per_job(slurm_cluster, campaign):
    make, jobs = campaign
    scheduler = make(LanesSettings(gpu=GpuLaneSettings(gpu_request="gpus")))
    job, out = jobs.spec(gpus=1, sleep=LONG)
    job_id = scheduler.submit(job)
    info = scheduler.queue().jobs[job_id]
    # squeue's %b (per-node gres) prints N/A for --gpus jobs; tres-per-job carries the count
    assert (info.gpus, info.partition) == (1, "gpu")
    assert "gpu:1" in info.gres
    assert read_output(out)["env"]["CUDA_VISIBLE_DEVICES"] is not None


def test_queue_ignores_foreign_jobs_and_other_campaigns(slurm_cluster, campaign, tmp_path):
    make, jobs = campaign
    scheduler = make()
    foreign_name = f"someone-else-{uuid.uuid4().hex[:6]}"
    weird_name = f"x|{jobs.prefix}|y"   # a foreign name with our separator and our prefix inside
    for name in (foreign_name, weird_name, "sw.other" + jobs.prefix[2:]):
        slurm_cluster.run("sbatch", "--parsable", f"--job-name={name}", f"--output={tmp_path}/f.out",
                          f"--wrap=sleep {LONG}")
    mine = {scheduler.submit(jobs.spec(sleep=LONG)[0]), scheduler.submit(jobs.spec(gpus=1, sleep=LONG)[0])}
    try:
        snapshot = scheduler.queue()
        assert snapshot.known
        assert set(snapshot.jobs) == mine
        names = slurm_cluster.squeue_names()
        assert foreign_name in names and weird_name in names   # they really were queued
    finally:
        slurm_cluster.run("scancel", "--me", f"--name={foreign_name}", check=False)
        slurm_cluster.run("scancel", "--me", f"--name={weird_name}", check=False)
        slurm_cluster.run("scancel", "--me", "--name=sw.other" + jobs.prefix[2:], check=False)


def test_the_users_scrontab_tick_is_not_one_of_the_campaigns_jobs(slurm_cluster, scrontab_bin, campaign, tmp_path):
    make, jobs = campaign
    scheduler = make()
    tick_name = f"sweep-tick-{uuid.uuid4().hex[:6]}"
    crontab = f"#SCRON -J {tick_name}\n#SCRON -o {tmp_path}/tick.out\n* * * * * /bin/true\n"
    slurm_cluster.run(str(scrontab_bin), "-", input=crontab)
    try:
        job_id = scheduler.submit(jobs.spec(sleep=LONG)[0])
        wait_for(lambda: tick_name in slurm_cluster.squeue_names(), 10, "the cron job in squeue")
        show = slurm_cluster.run("scontrol", "show", "job", "--oneliner").stdout
        assert "CronJob=Yes" in show
        assert queue_ids(scheduler.queue()) == {job_id}
    finally:
        slurm_cluster.run(str(scrontab_bin), "-r", check=False)


def test_invalid_partition_is_refused_with_slurms_own_message(campaign):
    make, jobs = campaign
    scheduler = make(LanesSettings(cpu=LaneSettings(partition="nosuchpartition")))
    with pytest.raises(SchedulerError) as excinfo:
        scheduler.submit(jobs.spec()[0])
    message = str(excinfo.value)
    assert "sbatch refused job" in message
    assert "invalid partition" in message.lower()   # Slurm's stderr, carried verbatim


def test_unknown_gpu_type_is_refused_with_slurms_own_message(campaign):
    make, jobs = campaign
    scheduler = make(LanesSettings(gpu=GpuLaneSettings(gpu_type="h900")))
    with pytest.raises(SchedulerError, match="Requested node configuration is not available"):
        scheduler.submit(jobs.spec(gpus=1)[0])


def test_job_script_is_kept_for_audit_and_holds_no_argv(slurm_cluster, campaign):
    make, jobs = campaign
    scheduler = make()
    marker = f"argv-marker-{uuid.uuid4().hex}"
    job, out = jobs.spec(marker, env={"SWEEP_TEST_VALUE": "v'1"})
    job_id = scheduler.submit(job)
    assert read_output(out)["argv"] == [marker]
    script = job.script_path.read_text()
    assert stat.S_IMODE(job.script_path.stat().st_mode) == 0o600
    assert marker not in script and 'exec "$@"' in script
    assert "export SWEEP_TEST_VALUE='v'\"'\"'1'" in script
    assert f"--job-name={job.name}" in script and "--signal=B:USR1@120" in script
    # the copy Slurm stored is the one kept in the run directory
    stored = slurm_cluster.run("scontrol", "write", "batch_script", job_id, "-").stdout
    assert stored.strip() == script.strip()


def test_controller_job_options_reach_slurm(slurm_cluster, campaign):
    make, jobs = campaign
    scheduler = make(LanesSettings(cpu=LaneSettings(time="1-00:00:00", extra_args=["--comment=sweep test"])),
                     signal="B:USR1@90")
    job, _ = jobs.spec(sleep=LONG)
    job_id = scheduler.submit(job)
    show = slurm_cluster.run("scontrol", "show", "job", job_id, "--oneliner").stdout
    assert "TimeLimit=1-00:00:00" in show
    assert "Comment=sweep test" in show
    assert "Requeue=0" in show                                  # --no-requeue
    assert f"StdOut={job.stdout}" in show and f"WorkDir={job.workdir}" in show


def test_cancel_refuses_anything_but_job_ids(campaign):
    make, _ = campaign
    with pytest.raises(SchedulerError, match="not Slurm job ids"):
        make().cancel(["--user=root"])


def test_controller_outage_gives_unknown_queue_and_clear_submit_error(tmp_path):
    """In a cluster of its own: stopping slurmctld must not disturb the shared one."""
    cluster, d = start_throwaway_cluster("sweep-outage-")
    try:
        prefix = unique_prefix("o")
        jobs = JobFactory(tmp_path / "runs", prefix)
        scheduler = SlurmScheduler(prefix, call_timeout=1, env=cluster.env)
        before = scheduler.submit(jobs.spec(sleep=LONG)[0])
        assert queue_ids(scheduler.queue()) == {before}

        cluster.stop_controller()
        started = time.monotonic()
        snapshot = scheduler.queue()
        elapsed = time.monotonic() - started
        assert not snapshot.known and snapshot.jobs == {}
        assert "did not answer within 1 s" in snapshot.error
        assert elapsed < 3, f"queue() took {elapsed:.1f} s with a 1 s call timeout"

        started = time.monotonic()
        # no answer is not a refusal: the job may exist, so the outcome is UNCERTAIN
        with pytest.raises(SubmissionUncertain, match="sbatch got no answer for job .*did not answer within 1 s") as excinfo:
            scheduler.submit(jobs.spec()[0])
        assert time.monotonic() - started < 3
        assert "may have been queued anyway" in str(excinfo.value)   # the hint: not a refusal
        with pytest.raises(SchedulerError, match="scancel"):
            scheduler.cancel([before])

        cluster.start_controller(wait_for_node=False)
        # the job submitted before the outage survived the controller restart
        def answered():
            snapshot = SlurmScheduler(prefix, env=cluster.env).queue()
            return snapshot if snapshot.known else None
        assert before in queue_ids(wait_for(answered, 15, "squeue to answer again"))
    except subprocess.SubprocessError as exc:
        pytest.fail(f"cluster client call failed: {exc}\n{cluster.log_tail()}")
    finally:
        cluster.stop()
        remove_cluster_dir(d)


def test_a_cluster_whose_daemon_dies_fails_fast_with_its_log(monkeypatch):
    """The fixture itself: a fatal config must surface the daemon's log, not a 30 s timeout."""
    import tests.slurm_cluster as sc
    reason = sc.missing_requirements()
    if reason:
        pytest.skip(reason)
    monkeypatch.setattr(sc, "SLURM_CONF", sc.SLURM_CONF.replace("SelectType=select/cons_tres",
                                                                "SelectType=select/nonexistent"))
    d = sc.new_cluster_dir("sweep-broken-")
    cluster = sc.SlurmCluster(d)
    started = time.monotonic()
    try:
        with pytest.raises(sc.ClusterError, match="(slurmctld|slurmd) exited") as excinfo:
            cluster.start(timeout=30)
        assert time.monotonic() - started < 15
        assert "nonexistent" in str(excinfo.value)
    finally:
        cluster.stop()
        remove_cluster_dir(d)
