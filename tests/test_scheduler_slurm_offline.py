"""The slurm backend without a cluster: squeue parsing, failing/hanging clients (fake binaries on
PATH), refusals that must happen before any client runs, and the rendered job script run by sh."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runstate.errors import SchedulerError
from sweep.scheduler.base import JobSpec, parse_gpu_count
from sweep.scheduler.slurm import SlurmScheduler
from sweep.scheduler.slurm.script import render_controller_script
from sweep.scheduler.slurm.squeue import FORMAT, SqueueParseError, parse_squeue, squeue_argv
from tests.tools.scheduler_kit import JobFactory

PREFIX = "sw.c1."


@pytest.mark.parametrize("fields, expected", [
    (("gres:gpu:2", "N/A"), 2),                  # 22.05, --gres
    (("gres/gpu:2", "N/A"), 2),                  # newer Slurm spelling
    (("N/A", "gres:gpu:1"), 1),                  # --gpus: only tres-per-job has it
    (("N/A", "gres/gpu:a100:4"), 4),             # typed
    (("gres:gpu:a100:2", ""), 2),
    (("gpu:3", ""), 3),
    (("gres:gpu:1,gres:gpu:tesla:1", ""), 2),
    (("gres/shard:2", "N/A"), 0),                # not a GPU
    (("gres:gpu_mem:4", ""), 0),                 # a different GRES named gpu_*
    (("N/A", "N/A"), 0),
    (("", ""), 0),
])
def test_gpu_count_is_parsed_from_every_spelling(fields, expected):
    assert parse_gpu_count(*fields) == expected


def test_squeue_output_is_filtered_to_the_campaign_and_parsed():
    text = "\n".join([
        "11|RUNNING|gpu|gres:gpu:2|N/A|None|sw.c1.tok.run-1",
        "12|PENDING|gpu|N/A|gres/gpu:a100:2|Resources|sw.c1.tok.run-2",
        "13|PENDING|cpu|N/A|N/A|BeginTime|sweep-tick",                  # the user's scrontab job
        "14|RUNNING|cpu|N/A|N/A|None|sw.c10.tok.run-1",                 # a campaign whose id extends ours
        "15|RUNNING|cpu|N/A|N/A|None|x|sw.c1.|y",                       # foreign name with | inside
        "16          |RUNNING   |cpu     |N/A|N/A|None|sw.c1.tok.run-3   ",   # padded columns
        "",
    ])
    jobs = {j.job_id: j for j in parse_squeue(text, PREFIX)}
    assert set(jobs) == {"11", "12", "16"}
    assert (jobs["11"].gpus, jobs["11"].gres, jobs["11"].state) == (2, "gres:gpu:2", "RUNNING")
    assert (jobs["12"].gpus, jobs["12"].reason, jobs["12"].gres) == (2, "Resources", "gres/gpu:a100:2")
    assert (jobs["16"].name, jobs["16"].partition) == ("sw.c1.tok.run-3", "cpu")


def test_an_unreadable_line_mentioning_the_campaign_makes_the_queue_unknown():
    with pytest.raises(SqueueParseError):
        parse_squeue("garbage about sw.c1.tok.run-1\n", PREFIX)
    assert parse_squeue("garbage from someone else\n", PREFIX) == []


def test_squeue_argv_is_explicit():
    assert squeue_argv("me", "alice") == ["squeue", "--me", "--noheader", f"--Format={FORMAT}"]
    assert squeue_argv("user", "alice")[1:3] == ["--user", "alice"]
    assert FORMAT.endswith(",Name:") and "tres-per-job:|" in FORMAT


# -- fake Slurm clients ---------------------------------------------------------------------------
@pytest.fixture
def fake_slurm(tmp_path):
    """A PATH with scripted sbatch/squeue/scancel; each logs its argv to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"

    def install(name: str, body: str) -> None:
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho \"{name} $*\" >> {log}\n{body}\n")
        script.chmod(0o755)

    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return install, env, log


def _scheduler(env, timeout=5.0, **kwargs) -> SlurmScheduler:
    return SlurmScheduler(PREFIX, call_timeout=timeout, env=env, **kwargs)


def test_a_failing_squeue_gives_unknown_with_slurms_message(fake_slurm):
    install, env, _ = fake_slurm
    install("squeue", "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; exit 1")
    snapshot = _scheduler(env).queue()
    assert snapshot.known is False and snapshot.jobs == {}
    assert "Unable to contact slurm controller" in snapshot.error and "rc 1" in snapshot.error


def test_a_hanging_squeue_gives_unknown_within_the_timeout(fake_slurm):
    install, env, _ = fake_slurm
    install("squeue", "exec sleep 30")
    started = time.monotonic()
    snapshot = _scheduler(env, timeout=0.5).queue()
    assert time.monotonic() - started < 3
    assert not snapshot.known and "did not answer within 0.5 s" in snapshot.error


def test_a_missing_squeue_gives_unknown(tmp_path):
    snapshot = _scheduler(dict(os.environ, PATH=str(tmp_path))).queue()
    assert not snapshot.known and "cannot run squeue" in snapshot.error


def test_squeue_environment_overrides_are_ignored(fake_slurm):
    install, env, log = fake_slurm
    install("squeue", 'echo "11|RUNNING|cpu|N/A|N/A|None|sw.c1.tok.run-1"; echo "env:${SQUEUE_STATES:-unset}" >&2')
    env = dict(env, SQUEUE_STATES="RUNNING", SQUEUE_FORMAT2="JobID")
    # SQUEUE_STATES=RUNNING would hide pending controllers and make the tick resubmit them
    snapshot = _scheduler(env).queue()
    assert snapshot.known and set(snapshot.jobs) == {"11"}
    assert "squeue --me --noheader --Format=" in log.read_text()


def test_slurm_conf_passes_through_to_the_clients(fake_slurm):
    install, env, _ = fake_slurm
    install("squeue", 'echo "11|RUNNING|cpu|N/A|N/A|None|sw.c1.$(basename "$SLURM_CONF")"')
    snapshot = _scheduler(dict(env, SLURM_CONF="/site/etc/slurm.conf")).queue()
    assert [j.name for j in snapshot.jobs.values()] == ["sw.c1.slurm.conf"]


def test_sbatch_failure_carries_its_stderr(fake_slurm, tmp_path):
    install, env, _ = fake_slurm
    install("sbatch", "echo 'sbatch: error: QOSMaxSubmitJobPerUserLimit' >&2; exit 1")
    job, _ = JobFactory(tmp_path / "runs", PREFIX).spec()
    with pytest.raises(SchedulerError, match="sbatch refused job sw.c1.*QOSMaxSubmitJobPerUserLimit"):
        _scheduler(env).submit(job)


def test_sbatch_parsable_output_with_a_cluster_name_is_understood(fake_slurm, tmp_path):
    install, env, log = fake_slurm
    install("sbatch", "echo 'sbatch: warning: something harmless' >&2; echo '4242;clusterA'")
    job, _ = JobFactory(tmp_path / "runs", PREFIX).spec("an arg")
    assert _scheduler(env).submit(job) == "4242"
    call = log.read_text()
    assert f"{job.script_path} {sys.executable}" in call and call.rstrip().endswith("an arg")


def test_sbatch_without_a_job_id_is_an_error(fake_slurm, tmp_path):
    install, env, _ = fake_slurm
    install("sbatch", "echo 'Submitted batch job'")
    job, _ = JobFactory(tmp_path / "runs", PREFIX).spec()
    with pytest.raises(SchedulerError, match="printed no job id"):
        _scheduler(env).submit(job)


@pytest.mark.parametrize("field, value", [("stdout", "/tmp/x/%j.out"), ("stderr", "/tmp/a\\b"),
                                          ("workdir", Path("relative/dir"))])
def test_paths_sbatch_would_rewrite_are_refused_before_sbatch_runs(fake_slurm, tmp_path, field, value):
    install, env, log = fake_slurm
    install("sbatch", "echo 1")
    job, _ = JobFactory(tmp_path / "runs", PREFIX).spec()
    from dataclasses import replace
    with pytest.raises(SchedulerError, match="refusing to submit"):
        _scheduler(env).submit(replace(job, **{field: Path(value)}))
    assert not log.exists()


def test_cancel_refuses_non_ids_before_scancel_runs(fake_slurm):
    install, env, log = fake_slurm
    install("scancel", "exit 0")
    for bad in (["--user=root"], ["-u", "1"], ["1;2"], [" 1"]):
        with pytest.raises(SchedulerError, match="not Slurm job ids"):
            _scheduler(env).cancel(bad)
    assert not log.exists()
    _scheduler(env).cancel(["12", "12", "13_4"])
    assert log.read_text().split() == ["scancel", "12", "13_4"]


def test_cancel_failure_is_reported(fake_slurm):
    install, env, _ = fake_slurm
    install("scancel", "echo 'Kill job error on job id 35: Unable to contact slurm controller' >&2; exit 8")
    with pytest.raises(SchedulerError, match="Unable to contact slurm controller"):
        _scheduler(env).cancel(["35"])


def test_a_bad_prefix_is_refused():
    with pytest.raises(SchedulerError):
        SlurmScheduler("sw c1.")
    with pytest.raises(SchedulerError):
        SlurmScheduler("")


# -- the rendered script, run by a real /bin/sh ----------------------------------------------------
def test_the_rendered_script_execs_argv_verbatim_and_quotes_env(tmp_path):
    value = "'; touch INJECTED; echo '\n$(touch INJECTED2)`touch INJECTED3`"
    script = tmp_path / "job.sh"
    script.write_text(render_controller_script(
        "sw.c1.x\n#SBATCH --evil", ["--job-name=sw.c1.x", "--comment=a\nb"], {"SWEEP_TEST_VALUE": value}))
    out = tmp_path / "out.json"
    args = ["$(touch INJECTED4)", "a b", ""]
    result = subprocess.run(["/bin/sh", str(script), sys.executable,
                             str(Path(__file__).parent / "tools" / "write_argv.py"), str(out), *args],
                            cwd=tmp_path, env=dict(os.environ, SLURM_JOB_ID="777"),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    import json
    seen = json.loads(out.read_text())
    assert seen["argv"] == args
    assert seen["env"]["SWEEP_JOB_ID"] == "777" and seen["env"]["SWEEP_TEST_VALUE"] == value
    assert not list(tmp_path.glob("INJECTED*"))
    assert "\n#SBATCH" not in script.read_text(), "a newline in the header must stay inside the comment"


def test_a_job_spec_is_frozen_and_names_its_lane():
    job = JobSpec(name="sw.c1.x", argv=["true"], workdir=Path("/"), stdout=Path("/o"), stderr=Path("/e"), gpus=2)
    assert job.lane == "gpu" and JobSpec(**{**job.__dict__, "gpus": 0}).lane == "cpu"
    with pytest.raises(AttributeError):
        job.name = "other"  # type: ignore[misc]
