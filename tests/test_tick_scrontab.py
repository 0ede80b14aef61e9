"""A campaign driven only by scrontab ends exactly as one ticked by hand (issue 26, item 8).

Real Slurm, the real scrontab client (built by tests/tools/build-scrontab.sh when the
distribution lacks it), the real controller with the fake agent as the author. Nothing ticks the
scrontab campaign but Slurm's cron: the tick runs as a scrontab batch job with the login
environment Slurm gives it (`--get-user-env`: the login shell's PATH, no variable of the test's
own environment), and Slurm requeues that job after every run, so from its second run on the
tick's environment carries SLURM_RESTART_COUNT. A twin campaign from the same plan is ticked by
hand meanwhile; both must end every PR the same way, with no interruption counted anywhere.
"""
import re
import time
from pathlib import Path

import pytest

from runstate.models import Outcome, RunState
from sweep.campaign import load_campaign
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, local_plan, record

pytestmark = pytest.mark.slurm

KINDS = {"pr-verified": "verified", "pr-no-tests": "no_tests", "pr-passes-before": "passes_before"}


def _plan(tmp_path: Path) -> dict:
    cands = []
    for run_id, kind in KINDS.items():
        src = make_pr_repo(tmp_path / "repos", kind, name=run_id)
        # the fake author reads the PR from the plan's repository (named in its argv, so the sandbox shows it)
        cands.append(candidate(run_id, src, runtime_options={"author": agent_options("author", "--repo", src["repo"])}))
    plan = local_plan(cands, defaults={"runtimes": {"author": "command"}}, max_parallel=2)
    plan["scheduler"] = {"backend": "slurm", "accounting": "jobcomp",
                         "lanes": {"cpu": {"partition": "cpu", "time": "10"}}}
    plan["tick"] = {**plan["tick"], "interval_minutes": 1}
    return plan


def _endings(d: Path) -> dict[str, tuple]:
    out = {}
    for run_id in KINDS:
        rec = record(d, run_id)
        out[run_id] = (rec.state, rec.outcome, rec.reason)
    return out


def test_a_campaign_driven_only_by_scrontab_ends_as_one_ticked_by_hand(slurm_cluster, scrontab_bin, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf), "SWEEP_SCRONTAB": str(scrontab_bin)}
    plan = write_plan(tmp_path / "plan.json", _plan(tmp_path))
    cron, manual = tmp_path / "cron", tmp_path / "manual"
    for d in (cron, manual):
        sweep("init", str(plan), "--campaign", str(d), env=env)
    c = load_campaign(cron)
    try:
        sweep("scrontab", "--install", "--campaign", str(cron), env=env)
        tick_until_done(manual, env=env, timeout=300, pause=1.0)
        deadline = time.monotonic() + 420
        while True:
            counts = status_json(cron, env=env)["counts"]      # status only: it never ticks
            if counts["queued"] == 0 and counts["active"] == 0:
                break
            assert time.monotonic() < deadline, f"the scrontab campaign did not end: {counts}"
            time.sleep(3)
        # the cron job ran the tick more than once: Slurm requeued it, so its later runs had
        # SLURM_RESTART_COUNT in the environment they ticked with
        cron_job = slurm_cluster.run("squeue", "--me", "-h", "-n", c.tick_job_name, "-o", "%i").stdout.split()
        assert cron_job, "the scrontab tick job is gone"
        shown = slurm_cluster.run("scontrol", "show", "job", cron_job[0]).stdout
        restarts = int(re.search(r"Restarts=(\d+)", shown).group(1))
        assert restarts >= 1, shown
    finally:
        sweep("scrontab", "--remove", "--campaign", str(cron), env=env, check=False)
        slurm_cluster.run(str(scrontab_bin), "-r", check=False)
    assert _endings(cron) == _endings(manual)
    # and the endings are the PRs' own: the campaign driven by scrontab verified its verifiable PR
    assert _endings(cron)["pr-verified"][1] is Outcome.verified, _endings(cron)
    assert all(state is RunState.ended for state, _, _ in _endings(cron).values())
    for run_id in KINDS:
        rec = record(cron, run_id)
        assert rec.interruptions == 0 and rec.interrupted_by == {}, rec
    assert (cron / "tick.json").exists()
