"""A tick started inside a Slurm job (as scrontab starts it) passes nothing of its own job to the
controllers it submits (issue 26, item 1).

scrontab runs the tick as a batch job that Slurm requeues after every run, so the tick's
environment carries SLURM_RESTART_COUNT, SLURM_JOB_ID and the rest of its own job's context.
Before, sbatch passed all of it on and each controller counted the cron job's requeues as its own:
runs admitted by the 11th cron tick ended `blocked: max_interrupted` seconds after admission.
"""
import json
import sys
from pathlib import Path

import pytest

from runstate.models import Outcome, RunState
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import PAYLOAD, payload_plan, sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, events, local_plan, record

pytestmark = pytest.mark.slurm

# what a tick inside the 12th run of a scrontab job has in its environment
CRON_JOB = {"SLURM_RESTART_COUNT": "12", "SLURM_JOB_ID": "424242", "SLURM_JOBID": "424242",
            "SLURM_JOB_NAME": "sweep-tick", "SLURM_JOB_PARTITION": "cpu", "SLURMD_NODENAME": "cron-node",
            "SLURM_SUBMIT_DIR": "/nowhere"}

# the controller command: record the environment, then be the payload controller
DUMP_ENV = ("import json, os, sys; "
            "open(os.path.join(os.environ['SWEEP_CAMPAIGN'], 'env-' + sys.argv[-1] + '.json'), 'w')"
            ".write(json.dumps(dict(os.environ))); "
            "os.execv(sys.executable, [sys.executable, sys.argv[1], *sys.argv[2:]])")


def _env_campaign(tmp_path: Path, backend: str, env: dict) -> Path:
    plan = payload_plan(1, backend=backend, scheduler={"pass_env": ["SWEEP_TEST_NAMED_IN_PLAN", "NAMED_X"]},
                        tick={"controller_command": [sys.executable, "-c", DUMP_ENV, str(PAYLOAD)]})
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d), env=env)
    (d / "payload.json").write_text(json.dumps({"sleep": 0.2, "outcome": "verified"}))
    return d


@pytest.mark.parametrize("backend", ["slurm", "local"])
def test_a_tick_inside_a_requeued_job_passes_nothing_of_its_job_to_controllers(backend, tmp_path, request):
    env = {"NAMED_X": "named", "NOT_NAMED": "dropped by slurm"}
    if backend == "slurm":
        env["SLURM_CONF"] = str(request.getfixturevalue("slurm_cluster").conf)
    d = _env_campaign(tmp_path, backend, env)
    tick_until_done(d, env={**env, **CRON_JOB}, timeout=120)
    rec = record(d, "pr-000")
    assert rec.outcome is Outcome.verified, rec
    seen = json.loads((d / "env-pr-000.json").read_text())
    assert "SLURM_RESTART_COUNT" not in seen
    assert seen.get("SLURMD_NODENAME") != "cron-node" and seen.get("SLURM_SUBMIT_DIR") != "/nowhere"
    assert seen["NAMED_X"] == "named"                  # [scheduler] pass_env
    assert seen["SWEEP_CAMPAIGN"] == str(d)            # what sweep sets
    assert seen["SWEEP_JOB_ID"] == rec.job_id
    if backend == "slurm":
        assert seen["SLURM_JOB_ID"] == rec.job_id      # Slurm's own, for this job
        assert "NOT_NAMED" not in seen
        script = next((d / "runs" / "pr-000" / "logs").glob("*.sbatch")).read_text()
        assert "--export=ALL" in script
        names = next(line for line in script.splitlines() if line.startswith("# environment"))
        assert "NAMED_X" in names and "PATH" in names and "SLURM_RESTART_COUNT" not in names
        assert "named" not in script, "a passed value was written into the job script"
    else:
        assert "SLURM_JOB_ID" not in seen


def _real_controller_plan(tmp_path: Path) -> dict:
    src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
    options = {"author": agent_options("author", "--repo", src["repo"])}
    plan = local_plan([candidate("pr", src)], defaults={"runtimes": {"author": "command"},
                                                        "runtime_options": options})
    plan["scheduler"] = {"backend": "slurm", "accounting": "jobcomp",
                         "lanes": {"cpu": {"partition": "cpu", "time": "10"}}}
    return plan


def test_slurm_restart_count_12_in_the_ticks_environment_is_no_interruption_of_the_run(slurm_cluster, tmp_path):
    """The issue's reproduction: `SLURM_RESTART_COUNT=12 sweep tick`, the real controller."""
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", _real_controller_plan(tmp_path))), "--campaign", str(d),
          env=env)
    st = tick_until_done(d, env={**env, **CRON_JOB}, timeout=240, pause=1.0)
    rec = record(d, "pr")
    assert rec.state is RunState.ended and rec.outcome is Outcome.verified, (rec, st)
    assert rec.interruptions == 0 and rec.attempts == 0, rec
    assert not [e for e in events(d, "pr") if e["kind"] == "interrupted"]


@pytest.mark.parametrize("name, words", [("SLURM_RESTART_COUNT", "the tick's own job context"),
                                         ("SWEEP_JOB_ID", "set by the scheduler"),
                                         ("BAD-NAME", "not an environment variable name")])
def test_pass_env_refuses_job_context_and_bad_names(tmp_path, name, words):
    plan = payload_plan(1, scheduler={"pass_env": [name]})
    r = sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "c"), check=False)
    assert r.returncode == 2 and "scheduler.pass_env" in r.stderr and words in r.stderr, r.stderr
    assert not (tmp_path / "c").exists()
