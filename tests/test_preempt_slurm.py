"""Issue 16 on a real Slurm cluster configured for preemption (tests/slurm_cluster.py, preempt=True).

Every stop here is a real one: Slurm's own time-limit warning (--signal=B:USR1@N), a real
higher-priority job preempting the controller (PreemptMode=REQUEUE and CANCEL), a node set DOWN,
a kill -9 of the controller's process group. The real controller (with the fake agent playing the
author) is used where the controller's own signal handling is under test; the payload stand-in
(tests/payload_controller.py, which dies on SIGTERM without a word) where the tick's judgement
of a job that vanished silently is. The cluster keeps no accounting storage (no slurmdbd), only
the job completion log that `sacct -c` reads (`accounting = "jobcomp"`); plain `sacct` fails there,
which is how a site without accounting looks (`accounting = "sacct"`).
"""
import json
import os
import signal
import tempfile
import uuid
from pathlib import Path

import pytest

from runstate import read_lease, run_dir
from runstate.models import Outcome, RunState
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import payload_plan, status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import (agent_options, candidate, count, events, local_plan, processes_under,
                              processes_with, record, wait_until)
from tests.slurm_cluster import NODE

pytestmark = pytest.mark.slurm
GPU_LANE = {"partition": "gpu", "time": "10"}


@pytest.fixture
def hold():
    """A flag file that holds the author session open while it exists (outside /tmp: sessions
    get a private /tmp)."""
    d = Path(tempfile.mkdtemp(prefix="sweep-test-hold-", dir="/var/tmp"))
    flag = d / "hold"
    flag.write_text("hold\n")
    yield flag
    flag.unlink(missing_ok=True)
    d.rmdir()


def env_of(cluster) -> dict:
    return {"SLURM_CONF": str(cluster.conf)}


def init(tmp_path: Path, plan: dict, env: dict) -> Path:
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d), env=env)
    return d


def controller_plan(tmp_path: Path, flag: Path, marker: str, lane: dict, **settings) -> dict:
    """One PR whose author session waits while `flag` exists, on a Slurm `cpu` lane `lane`."""
    src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
    options = {"author": agent_options("author", "--repo", src["repo"], f"--hold-while={flag}",
                                       "--marker", marker)}
    plan = local_plan([candidate("pr", src)],
                      defaults={"runtimes": {"author": "command"}, "runtime_options": options}, **settings)
    plan["scheduler"] = {"backend": "slurm", "accounting": "jobcomp",
                         "lanes": {"cpu": lane, "gpu": GPU_LANE}}
    return plan


def squeue_state(cluster, job_id: str) -> str | None:
    out = cluster.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()
    return out or None


def wait_job_gone(cluster, job_id: str, timeout: float = 60) -> None:
    wait_until(f"job {job_id} to leave the queue", lambda: squeue_state(cluster, job_id) is None, timeout)


def hog_the_node(cluster) -> str:
    """A short job in the high-priority partition that needs every CPU: it preempts the controller."""
    return cluster.run("sbatch", "--parsable", "-p", "urgent", "-c", "16", "-J", f"urgent-{uuid.uuid4().hex[:6]}",
                       "-o", "/dev/null", "--wrap", "sleep 2").stdout.strip()


def start_author(d: Path, env: dict, marker: str) -> str:
    sweep("tick", "--campaign", str(d), env=env)
    rec = record(d, "pr")
    assert rec.state is RunState.active, rec
    wait_until("the author session to be running",
               lambda: count(events(d, "pr"), "session_started", "author") and processes_with(marker), 90)
    return rec.job_id


def finish(d: Path, env: dict, flag: Path) -> None:
    flag.unlink(missing_ok=True)
    tick_until_done(d, env=env, timeout=240, pause=1.0)


# ---- the controller says why it stopped -----------------------------------------------------------

def test_time_limit_warning_checkpoints_and_the_run_resumes_without_an_attempt(slurm_preempt_cluster,
                                                                                tmp_path, hold):
    cluster = slurm_preempt_cluster
    env = env_of(cluster)
    marker = f"marker-{uuid.uuid4().hex}"
    # a 2-minute limit with the warning 100 s before it: slurmctld checks limits every ~30 s, so
    # SIGUSR1 comes 20-50 s after the start, once the author session is under way
    d = init(tmp_path, controller_plan(tmp_path, hold, marker,
                                       {"partition": "cpu", "time": "2", "warn_before_end_s": 100}), env)
    first = start_author(d, env, marker)
    script = (run_dir(d, "pr") / "logs" / f"job-{record(d, 'pr').submit_token}.sbatch").read_text()
    assert "--signal=B:USR1@100" in script and "--no-requeue" in script
    # the record is written first, then the event: wait for both
    wait_until("the controller's checkpoint at the warning", lambda: record(d, "pr").state is RunState.queued
               and count(events(d, "pr"), "interrupted"), 120)
    rec = record(d, "pr")
    assert rec.phase.value == "author" and rec.attempts == 0, rec
    assert rec.interruptions == 1 and rec.interrupted_by == {"time_limit": 1}, rec
    ev = [e for e in events(d, "pr") if e["kind"] == "interrupted"]
    assert len(ev) == 1 and ev[0]["by"] == f"job:{first}" and "SIGUSR1" in ev[0]["detail"]
    assert read_lease(run_dir(d, "pr")) is None
    wait_until("no session left", lambda: not processes_with(marker) and not processes_under(run_dir(d, "pr")), 15)
    wait_job_gone(cluster, first)
    assert "COMPLETED" in cluster.run("sacct", "-c", "-X", "-n", "-P", f"--jobs={first}",
                                      "--format=JobID,State").stdout   # it ended by itself, before the limit

    hold.unlink()
    sweep("tick", "--campaign", str(d), env=env)
    second = record(d, "pr").job_id
    assert second != first
    cluster.run("scontrol", "update", f"JobId={second}", "TimeLimit=10")   # the resumed run is not warned again
    finish(d, env, hold)
    rec = record(d, "pr")
    assert rec.outcome is Outcome.verified and rec.attempts == 0 and rec.interruptions == 1, rec
    assert count(events(d, "pr"), "phase_started", "intake") == 1      # resumed, not restarted
    shown = sweep("show", "pr", "--campaign", str(d), env=env).stdout
    assert "attempts 0/3" in shown and "interruptions 1/10" in shown and "time_limit 1" in shown


@pytest.mark.parametrize("partition,requeue", [("scavenger-cancel", "tick"), ("scavenger", "tick"),
                                               ("scavenger", "slurm")])
def test_a_preempted_controller_checkpoints_without_spending_an_attempt(slurm_preempt_cluster, tmp_path, hold,
                                                                       partition, requeue):
    """PreemptMode=CANCEL and REQUEUE with --no-requeue: Slurm ends the job and the controller
    re-queues the run itself. REQUEUE with --requeue (lane requeue = "slurm"): the run stays active
    for the same job id, which Slurm restarts, and that restart counts the interruption."""
    cluster = slurm_preempt_cluster
    env = env_of(cluster)
    marker = f"marker-{uuid.uuid4().hex}"
    d = init(tmp_path, controller_plan(tmp_path, hold, marker,
                                       {"partition": partition, "time": "10", "requeue": requeue}), env)
    job = start_author(d, env, marker)
    hog = hog_the_node(cluster)
    if requeue == "tick":
        wait_until("the controller's checkpoint", lambda: record(d, "pr").state is RunState.queued
                   and count(events(d, "pr"), "interrupted"), 60)
        rec = record(d, "pr")
        assert rec.interruptions == 1 and rec.interrupted_by == {"preempted": 1} and rec.attempts == 0, rec
        ev = next(e for e in events(d, "pr") if e["kind"] == "interrupted")
        assert ev["by"] == f"job:{job}" and "preempted at 20" in ev["detail"], ev
        assert read_lease(run_dir(d, "pr")) is None
        wait_job_gone(cluster, job)
    else:
        wait_until("the controller's note", lambda: count(events(d, "pr"), "interrupted"), 60)
        rec = record(d, "pr")
        assert rec.state is RunState.active and rec.job_id == job and rec.interruptions == 0, rec
        assert rec.pending_interruption["job_id"] == job and rec.pending_interruption["cause"] == "requeued"
        assert read_lease(run_dir(d, "pr")).lease.job_id == job           # kept for the requeued job
        sweep("tick", "--campaign", str(d), env=env)                        # sees it pending: no action
        assert record(d, "pr").job_id == job and record(d, "pr").attempts == 0
        wait_job_gone(cluster, hog)
        # Slurm holds a requeued job for ~2 min (BeginTime); let it start now
        wait_until("the requeued job to pend", lambda: squeue_state(cluster, job) == "PENDING", 30)
        cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        wait_until("the restarted job to count the interruption", lambda: record(d, "pr").interruptions == 1, 90)
        rec = record(d, "pr")
        assert rec.state is RunState.active and rec.job_id == job and rec.slurm_restarts == 1, rec
        assert rec.interrupted_by == {"requeued": 1} and rec.pending_interruption is None
        # the controller saves the record, then appends the event: wait for it rather than look once
        wait_until("the restart's event", lambda: any("SLURM_RESTART_COUNT=1" in (e.get("detail") or "")
                                                      for e in events(d, "pr")), 30)
    finish(d, env, hold)
    rec = record(d, "pr")
    assert rec.outcome is Outcome.verified and rec.attempts == 0 and rec.interruptions == 1, rec
    if requeue == "slurm":
        assert rec.job_id == job                                             # one job id all along


def test_a_grace_preemption_that_sends_the_jobs_signal_is_a_preemption_not_a_time_limit(slurm_preempt_cluster,
                                                                                       tmp_path, hold):
    """GraceTime with SlurmctldParameters=preempt_send_user_signal: the controller gets its
    --signal (B:USR1, otherwise the time-limit warning) the moment it is preempted, and asks Slurm
    before calling it a time limit. Without the parameter the grace's first SIGTERM goes to job
    steps only, so a controller (the batch script) hears nothing until the grace ends (up to
    slurmctld's ~30 s limit check later; measured by hand, docs/slurm.md)."""
    cluster = slurm_preempt_cluster
    env = env_of(cluster)
    marker = f"marker-{uuid.uuid4().hex}"
    original = cluster.conf.read_text()
    cluster.conf.write_text(original + "SlurmctldParameters=preempt_send_user_signal\n")
    try:
        cluster.run("scontrol", "reconfigure")
        d = init(tmp_path, controller_plan(tmp_path, hold, marker, {"partition": "scavenger-grace", "time": "10"}),
                 env)
        job = start_author(d, env, marker)
        hog_the_node(cluster)
        wait_until("the controller's checkpoint", lambda: record(d, "pr").state is RunState.queued
                   and count(events(d, "pr"), "interrupted"), 60)
    finally:
        cluster.conf.write_text(original)
        cluster.run("scontrol", "reconfigure", check=False)
    rec = record(d, "pr")
    assert rec.interrupted_by == {"preempted": 1} and rec.attempts == 0 and rec.phase.value == "author", rec
    ev = next(e for e in events(d, "pr") if e["kind"] == "interrupted")
    assert ev["by"] == f"job:{job}" and "SIGUSR1 at the preemption" in ev["detail"], ev
    assert "preempted at 20" in ev["detail"], ev
    wait_job_gone(cluster, job)
    _cancel_campaign(cluster, d, env)


def test_scancel_is_still_an_attempt(slurm_preempt_cluster, tmp_path, hold):
    cluster = slurm_preempt_cluster
    env = env_of(cluster)
    marker = f"marker-{uuid.uuid4().hex}"
    d = init(tmp_path, controller_plan(tmp_path, hold, marker, {"partition": "scavenger", "time": "10"}), env)
    job = start_author(d, env, marker)
    cluster.run("scancel", job)
    wait_until("the controller's checkpoint", lambda: record(d, "pr").state is RunState.queued, 60)
    rec = record(d, "pr")
    assert rec.attempts == 1 and rec.interruptions == 0 and "cancelled" in rec.last_error, rec
    wait_job_gone(cluster, job)


# ---- the tick judges jobs that vanished without a word ----------------------------------------------

def payload_campaign(tmp_path, cluster, n: int, accounting: str, partition: str = "scavenger",
                     **kw) -> tuple[Path, dict]:
    env = env_of(cluster)
    plan = payload_plan(n, backend="slurm", max_parallel=n,
                        scheduler={"accounting": accounting,
                                   "lanes": {"cpu": {"partition": partition, "time": "10"}, "gpu": GPU_LANE}},
                        **kw)
    d = init(tmp_path, plan, env)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    sweep("tick", "--campaign", str(d), env=env)
    for i in range(n):
        rec = record(d, f"pr-{i:03d}")
        assert rec.state is RunState.active, rec
        wait_until("the payload to run", lambda tok=rec.submit_token: processes_with(tok), 60)
    return d, env


def kill_group_of(token: str) -> None:
    procs = processes_with(token)
    assert procs, token
    for pgid in set(procs.values()):
        os.killpg(pgid, signal.SIGKILL)


def down_the_node(cluster, job_ids: list[str]) -> None:
    cluster.run("scontrol", "update", f"NodeName={NODE}", "State=DOWN", "Reason=sweep-test-node-failure")
    try:
        for job in job_ids:
            wait_job_gone(cluster, job)
    finally:
        cluster.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME", check=False)
        cluster.wait_node_responding(30, want_idle=False)


def test_sigkilled_controller_group_is_an_attempt_slurm_records_failed(slurm_preempt_cluster, tmp_path):
    """kill -9 of the whole controller process group (the run's own crash, the OOM killer): Slurm
    records FAILED, so it spends an attempt, as documented in docs/slurm.md."""
    cluster = slurm_preempt_cluster
    d, env = payload_campaign(tmp_path, cluster, 1, "jobcomp")
    rec = record(d, "pr-000")
    kill_group_of(rec.submit_token)
    wait_job_gone(cluster, rec.job_id)
    sweep("tick", "--campaign", str(d), env=env)
    after = record(d, "pr-000")
    assert after.attempts == 1 and after.interruptions == 0, after
    assert f"job {rec.job_id} ended FAILED (accounting)" in after.last_error
    tick = json.loads((d / "tick.json").read_text())
    assert tick["accounting"] == "known" and tick["accounting_jobs"] == 1
    _cancel_campaign(cluster, d, env)


def test_a_failed_node_is_an_interruption_judged_by_one_accounting_call(slurm_preempt_cluster, tmp_path):
    cluster = slurm_preempt_cluster
    d, env = payload_campaign(tmp_path, cluster, 2, "jobcomp")
    recs = [record(d, f"pr-{i:03d}") for i in range(2)]
    down_the_node(cluster, [r.job_id for r in recs])
    sweep("tick", "--campaign", str(d), env=env)
    tick = json.loads((d / "tick.json").read_text())
    assert tick["accounting"] == "known" and tick["accounting_jobs"] == 2   # one call answered both
    for r in recs:
        after = record(d, r.run_id)
        assert after.attempts == 0 and after.interrupted_by == {"node_fail": 1}, after
        assert f"job {r.job_id} ended NODE_FAIL" in after.last_error
    for i in range(2):
        assert any(e["kind"] == "interrupted" for e in events(d, f"pr-{i:03d}"))
    _cancel_campaign(cluster, d, env)


def test_without_accounting_a_failed_node_counts_as_an_attempt_and_status_says_why(slurm_preempt_cluster,
                                                                                   tmp_path):
    cluster = slurm_preempt_cluster
    d, env = payload_campaign(tmp_path, cluster, 1, "sacct")     # plain sacct: no accounting storage here
    rec = record(d, "pr-000")
    down_the_node(cluster, [rec.job_id])
    sweep("tick", "--campaign", str(d), env=env)
    after = record(d, "pr-000")
    assert after.attempts == 1 and after.interruptions == 0, after
    assert "no accounting" in after.last_error and "accounting storage is disabled" in after.last_error
    text = sweep("status", "--campaign", str(d), env=env).stdout
    assert "accounting: unavailable" in text and "counts as an attempt" in text, text
    assert json.loads((d / "tick.json").read_text())["accounting"] == "unavailable"
    _cancel_campaign(cluster, d, env)


def test_jobcomp_accounting_on_a_cluster_without_a_completion_log_is_unavailable(tmp_path):
    """`accounting = "jobcomp"` where JobCompType=jobcomp/none: sacct -c says "Slurm job completion
    is disabled"; the vanished job counts as an attempt at once, and status says why."""
    from tests.slurm_cluster import remove_cluster_dir, start_throwaway_cluster
    cluster, cdir = start_throwaway_cluster("sweep-slurm-nojobcomp-", jobcomp=False)
    try:
        d, env = payload_campaign(tmp_path, cluster, 1, "jobcomp", partition="cpu")
        rec = record(d, "pr-000")
        kill_group_of(rec.submit_token)
        wait_job_gone(cluster, rec.job_id)
        sweep("tick", "--campaign", str(d), env=env)
        after = record(d, "pr-000")
        assert after.attempts == 1 and "job completion is disabled" in after.last_error, after
        assert "accounting: unavailable" in sweep("status", "--campaign", str(d), env=env).stdout
    finally:
        cluster.stop()
        remove_cluster_dir(cdir)


def test_a_run_preempted_every_time_ends_max_interrupted_with_no_attempt_spent(slurm_preempt_cluster, tmp_path):
    cluster = slurm_preempt_cluster
    d, env = payload_campaign(tmp_path, cluster, 1, "jobcomp", extra={"max_interruptions": 2})
    for n in (1, 2):
        if n == 2:
            sweep("tick", "--campaign", str(d), env=env)
            wait_until("the payload to run", lambda: processes_with(record(d, "pr-000").submit_token), 60)
        rec = record(d, "pr-000")
        assert rec.state is RunState.active
        hog = hog_the_node(cluster)
        wait_job_gone(cluster, rec.job_id)
        wait_job_gone(cluster, hog)
        sweep("tick", "--campaign", str(d), env=env)
    rec = record(d, "pr-000")
    assert rec.state is RunState.ended and rec.reason == "max_interrupted", rec
    assert rec.attempts == 0 and rec.interrupted_by == {"preempted": 2}
    st = status_json(d, env=env)
    assert st["interruptions"] == 2 and st["interrupted_by"] == {"preempted": 2} and st["attempts_spent"] == 0


def _cancel_campaign(cluster, d: Path, env: dict) -> None:
    for rid in os.listdir(d / "runs"):
        rec = record(d, rid)
        if rec.job_id:
            cluster.run("scancel", rec.job_id, check=False)


# ---- the resolution: a campaign preempted repeatedly ends as it would without preemption -----

def test_a_campaign_preempted_repeatedly_ends_every_pr_as_without_preemption(slurm_preempt_cluster, tmp_path,
                                                                             hold):
    """Three PRs (three different endings) whose controllers are all preempted twice in the author
    phase end exactly as the same campaign ends on the local backend with nothing stopping it,
    and spend the same attempts."""
    cluster = slurm_preempt_cluster
    env = env_of(cluster)
    repos = tmp_path / "repos"
    marker = f"marker-{uuid.uuid4().hex}"
    srcs = {f"pr-{kind.replace('_', '-')}": make_pr_repo(repos, kind) for kind in
            ("verified", "no_tests", "passes_before")}

    def plan(backend: dict, flag: Path) -> dict:
        cands = [candidate(rid, src, runtime_options={"author": agent_options(
            "author", "--repo", src["repo"], f"--hold-while={flag}", "--marker", marker)})
                 for rid, src in srcs.items()]
        p = local_plan(cands, max_parallel=3, defaults={"runtimes": {"author": "command"}})
        p["scheduler"] = backend
        return p

    # the same PRs without preemption (the local backend: same controller, nothing stops it)
    base_dir = tmp_path / "baseline"
    base_dir.mkdir()
    baseline = init(base_dir, plan({"backend": "local", "local": {"cpu_slots": 3}}, base_dir / "no-flag"), env)
    tick_until_done(baseline, env=env, timeout=240, pause=0.5)
    want = {rid: (record(baseline, rid).outcome, record(baseline, rid).reason) for rid in srcs}

    d = init(tmp_path, plan({"backend": "slurm", "accounting": "jobcomp",
                             "lanes": {"cpu": {"partition": "scavenger", "time": "10"}, "gpu": GPU_LANE}},
                            hold), env)
    for _ in range(2):
        sweep("tick", "--campaign", str(d), env=env)
        recs = [record(d, rid) for rid in srcs]
        assert all(r.state is RunState.active for r in recs), recs
        wait_until("every author session to be running",
                   lambda: len(processes_with(marker)) >= len(srcs), 120)
        hog = hog_the_node(cluster)
        for r in recs:
            wait_job_gone(cluster, r.job_id)
        wait_job_gone(cluster, hog)
        wait_until("every run's interruption", lambda recs=recs: all(
            record(d, r.run_id).state is RunState.queued for r in recs), 30)
    finish(d, env, hold)
    got = {rid: (record(d, rid).outcome, record(d, rid).reason) for rid in srcs}
    assert got == want, (got, want)
    for rid in srcs:
        rec = record(d, rid)
        assert rec.interrupted_by == {"preempted": 2} and rec.attempts == record(baseline, rid).attempts, rec
    shown = sweep("show", "pr-verified", "--campaign", str(d), env=env).stdout
    assert "interruptions 2/10" in shown and "preempted 2" in shown
