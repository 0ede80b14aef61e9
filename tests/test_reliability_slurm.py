"""Reliability under faults, on the real throwaway Slurm cluster (issue 13).

Each test puts the real slurmctld, sbatch and squeue into the fault it is about: a SIGSTOPped
slurmctld so that sbatch gets no answer, a job of ours that no lease knows (a ghost), a lease left
in a tombstone by a kill inside the hand-over, a lane whose partition does not exist.
"""
import json
import os
import re
import signal
import threading
import time

import pytest

from runstate import load_record, run_dir
from runstate.lease import acquire_lease, read_lease
from runstate.models import RunState
from sweep.campaign import load_campaign
from sweep.scheduler import make_scheduler
from sweep.tick import run_tick
from tests.campaigns import payload_plan, status_json, sweep, write_plan

pytestmark = pytest.mark.slurm

LANES = {"cpu": {"partition": "cpu", "time": "10"}, "gpu": {"partition": "gpu", "time": "10"}}


def _init(tmp_path, plan, env, name="camp"):
    path = write_plan(tmp_path / f"{name}.json", plan)
    d = tmp_path / name
    sweep("init", str(path), "--campaign", str(d), env=env)
    return d


# init on a machine that cannot reach Slurm: the lanes are not checked (a warning), so a lane the
# cluster refuses reaches sbatch, which is what the failing-lane tests need
UNREACHABLE = {"SLURM_CONF": "/nonexistent/slurm.conf"}


def _live(cluster, prefix):
    out = cluster.run("squeue", "--me", "-h", "-o", "%i|%j|%T").stdout
    rows = [line.split("|") for line in out.splitlines() if line]
    return [r for r in rows if r[1].startswith(prefix) and r[2] not in ("COMPLETED", "CANCELLED", "FAILED")]


def _controller_output(rdir):
    """What the run's controller job printed (why a job left the queue early)."""
    logs = rdir / "logs"
    return {p.name: p.read_text(errors="replace")[-2000:] for p in sorted(logs.glob("controller.*"))}


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _cancel_all(cluster, prefix):
    ids = [r[0] for r in _live(cluster, prefix)]
    if ids:
        cluster.run("scancel", *ids, check=False)


class StallDuringSubmit:
    """The real Slurm scheduler, with slurmctld SIGSTOPped for `stall_s` from the moment sbatch runs."""

    def __init__(self, inner, pid: int, stall_s: float):
        self.inner, self.pid, self.stall_s = inner, pid, stall_s
        self.name = inner.name
        self.resumed = threading.Event()

    def queue(self):
        return self.inner.queue()

    def capacity(self):
        return self.inner.capacity()

    def cancel(self, ids):
        return self.inner.cancel(ids)

    def end_states(self, ids):
        return self.inner.end_states(ids)

    def job_environment(self, job):
        return self.inner.job_environment(job)

    def submit(self, job):
        os.kill(self.pid, signal.SIGSTOP)

        def resume():
            time.sleep(self.stall_s)
            os.kill(self.pid, signal.SIGCONT)
            self.resumed.set()
        threading.Thread(target=resume, daemon=True).start()
        return self.inner.submit(job)


def test_a_timed_out_sbatch_keeps_its_lease_and_the_job_is_adopted_not_submitted_twice(
        slurm_cluster, tmp_path, monkeypatch):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    plan = payload_plan(1, backend="slurm", max_parallel=3,
                        scheduler={"lanes": LANES, "call_timeout_seconds": 30},
                        tick={"uncertain_submit_s": 300})
    d = _init(tmp_path, plan, env)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    c = load_campaign(d)
    rdir = run_dir(d, "pr-000")
    stalled = StallDuringSubmit(make_scheduler(c.settings.scheduler, d, c.job_prefix),
                                slurm_cluster.pids["slurmctld"], stall_s=13)
    try:
        outcome = run_tick(d, scheduler=stalled)
        # Slurm's own MessageTimeout (10 s) fires first: "Socket timed out on send/recv operation"
        assert any(a["kind"] == "submit_uncertain" for a in outcome.report.actions), outcome.report.actions
        rec = load_record(rdir).value
        lease = read_lease(rdir).lease
        assert rec.state is RunState.queued and rec.submitting_since is not None
        assert lease is not None and lease.token == rec.submit_token and lease.job_id is None
        assert "submit_uncertain" in (rdir / "events.jsonl").read_text()
    finally:
        stalled.resumed.wait(30)
        os.kill(slurm_cluster.pids["slurmctld"], signal.SIGCONT)
    try:
        # the job slurmctld created when it resumed carries the token: the next tick adopts it
        for _ in range(40):
            sweep("tick", "--campaign", str(d), env=env)
            rec = load_record(rdir).value
            if rec.state is RunState.active:
                break
            time.sleep(0.5)
        assert rec.state is RunState.active and rec.submitting_since is None, rec
        assert rec.submit_token == lease.token
        for _ in range(3):     # and never a second job for the run
            sweep("tick", "--campaign", str(d), env=env)
            live = _live(slurm_cluster, c.job_prefix)
            assert len(live) == 1, (live, _controller_output(rdir))
        events = (rdir / "events.jsonl").read_text()
        assert "adopted" in events
    finally:
        _cancel_all(slurm_cluster, c.job_prefix)


def test_an_uncertain_submission_is_given_up_after_its_bound_and_the_run_admitted_again(
        slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    # the bound leaves a loaded machine time for the first tick (start-up included) to see the
    # submission still within it; the test then waits for the bound itself, not a fixed sleep
    bound = 10
    plan = payload_plan(1, backend="slurm", scheduler={"lanes": LANES}, tick={"uncertain_submit_s": bound})
    d = _init(tmp_path, plan, env)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    c = load_campaign(d)
    rdir = run_dir(d, "pr-000")
    # what an sbatch that never reached slurmctld leaves: a tick-held lease + the submitting mark
    token = "0123456789ab"
    acquire_lease(rdir, run_id="pr-000", token=token, holder="tick")
    from runstate import save_record
    rec = load_record(rdir).value
    since = time.time()
    save_record(rdir, rec.model_copy(update={"submit_token": token, "submitting_since": since,
                                             "last_error": "sbatch uncertain: Socket timed out"}))
    try:
        sweep("tick", "--campaign", str(d), env=env)
        st = status_json(d, env=env)
        assert "waiting out the submit grace" in st["held"][0]["reason"], st["held"]
        assert read_lease(rdir).lease.token == token and _live(slurm_cluster, c.job_prefix) == []
        time.sleep(max(0.0, since + bound + 0.5 - time.time()))
        sweep("tick", "--campaign", str(d), env=env)       # bound passed: given up
        assert read_lease(rdir) is None
        assert "submission_given_up" in (rdir / "events.jsonl").read_text()
        sweep("tick", "--campaign", str(d), env=env)       # admitted afresh
        rec = load_record(rdir).value
        assert rec.state is RunState.active and rec.submit_token != token
    finally:
        _cancel_all(slurm_cluster, c.job_prefix)


def test_a_ghost_job_counts_against_max_parallel_and_is_cancelled_after_the_grace(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    plan = payload_plan(2, backend="slurm", max_parallel=1, scheduler={"lanes": LANES},
                        tick={"ghost_grace_s": 3})
    d = _init(tmp_path, plan, env)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    c = load_campaign(d)
    ghost_name = f"{c.job_prefix}deadbeef0000.pr-000"
    ghost = slurm_cluster.run("sbatch", "--parsable", f"--job-name={ghost_name}", "--partition=cpu",
                              "--output=/dev/null", "--wrap=sleep 300").stdout.strip()
    try:
        _wait(lambda: _live(slurm_cluster, c.job_prefix), 10, "the ghost in squeue")
        out = sweep("tick", "--campaign", str(d), env=env).stdout
        assert "ghost" in out, out
        st = status_json(d, env=env)
        assert st["counts"]["active"] == 0, "a ghost takes the only slot"
        assert [g["job_id"] for g in st["tick"]["ghosts"]] == [ghost]
        assert any("max_parallel 1" in h["reason"] for h in st["held"]), st["held"]
        assert "ghost job" in sweep("status", "--campaign", str(d), env=env).stdout
        time.sleep(3.2)
        sweep("tick", "--campaign", str(d), env=env)
        tick = json.loads((d / "tick.json").read_text())
        assert any(a["kind"] == "cancel_ghost" and ghost in a["detail"] for a in tick["actions"])
        assert "ghost_cancelled" in (run_dir(d, "pr-000") / "events.jsonl").read_text()
        _wait(lambda: ghost not in [r[0] for r in _live(slurm_cluster, c.job_prefix)], 20, "scancel")
        sweep("tick", "--campaign", str(d), env=env)
        assert status_json(d, env=env)["counts"]["active"] == 1
        live = _live(slurm_cluster, c.job_prefix)
        assert len(live) == 1 and live[0][0] != ghost
    finally:
        _cancel_all(slurm_cluster, c.job_prefix)


def test_a_tick_killed_inside_the_hand_over_leaves_a_lease_the_next_tick_restores_and_adopts(
        slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    d = _init(tmp_path, payload_plan(1, backend="slurm", scheduler={"lanes": LANES},
                                     tick={"ghost_grace_s": 0}), env)
    c = load_campaign(d)
    rdir = run_dir(d, "pr-000")
    token = "abcdef012345"
    acquire_lease(rdir, run_id="pr-000", token=token, holder="tick")
    job = slurm_cluster.run("sbatch", "--parsable", f"--job-name={c.job_prefix}{token}.pr-000",
                            "--partition=cpu", "--output=/dev/null", "--wrap=sleep 300").stdout.strip()
    # killed between the hand-over's rename and its link: no lease.json, the lease in a tombstone
    tomb = rdir / ".lease.json.tomb.host.1.x"
    os.rename(rdir / "lease.json", tomb)
    os.utime(tomb, (time.time() - 60, time.time() - 60))
    try:
        _wait(lambda: _live(slurm_cluster, c.job_prefix), 10, "the job in squeue")
        for _ in range(3):
            sweep("tick", "--campaign", str(d), env=env)
        rec = load_record(rdir).value
        assert rec.state is RunState.active and rec.job_id == job, rec
        assert [r[0] for r in _live(slurm_cluster, c.job_prefix)] == [job]
        assert not [n for n in os.listdir(rdir) if ".tomb." in n or ".new." in n]
        events = (rdir / "events.jsonl").read_text()
        assert "lease_strays" in events and "adopted" in events
    finally:
        _cancel_all(slurm_cluster, c.job_prefix)


def test_a_failing_lane_backs_off_while_the_other_lane_keeps_admitting(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    lanes = {"cpu": {"partition": "no-such-partition"}, "gpu": {"partition": "gpu", "time": "10"}}
    plan = payload_plan(5, gpus={3: 1, 4: 1}, backend="slurm", max_parallel=3,
                        scheduler={"lanes": lanes}, tick={"lane_backoff_s": 10, "lane_backoff_max_s": 60})
    d = _init(tmp_path, plan, UNREACHABLE)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    c = load_campaign(d)
    try:
        sweep("tick", "--campaign", str(d), env=env)
        tick = json.loads((d / "tick.json").read_text())
        assert [a["kind"] for a in tick["actions"]].count("submit_failed") == 1, tick["actions"]
        sweep("tick", "--campaign", str(d), env=env)       # cpu lane backing off: the gpu runs go
        st = status_json(d, env=env)
        assert sorted(a["run_id"] for a in st["active"]) == ["pr-003", "pr-004"], st
        lane = st["lanes_backing_off"][0]
        assert lane["lane"] == "cpu" and lane["failures"] == 1
        assert "Invalid partition name specified" in lane["message"], lane
        text = sweep("status", "--campaign", str(d), env=env).stdout
        line = next(x for x in text.splitlines() if "slurm said" in x)
        assert line.rstrip().endswith("Invalid partition name specified"), line
        # status plans at its own time: the back-off left, or the probe the next tick makes
        want = "lane cpu backing off" if lane["left_s"] > 0 else "lane cpu's probe after its back-off"
        assert any(want in h["reason"] for h in st["held"]), st["held"]
        time.sleep(max(0.0, lane["left_s"]) + 0.3)
        sweep("tick", "--campaign", str(d), env=env)       # one probe, refused again: 20 s now
        tick = json.loads((d / "tick.json").read_text())
        assert [a["kind"] for a in tick["actions"]].count("submit_failed") == 1
        lane = status_json(d, env=env)["lanes_backing_off"][0]
        assert lane["failures"] == 2 and 12 < lane["left_s"] <= 20.0, lane
    finally:
        _cancel_all(slurm_cluster, c.job_prefix)


def test_every_queued_run_has_a_reason_with_max_gpu_parallel_zero(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    plan = payload_plan(3, gpus={0: 2}, backend="slurm", max_parallel=1, max_gpu_parallel=0,
                        scheduler={"lanes": LANES})
    d = _init(tmp_path, plan, env)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    c = load_campaign(d)
    try:
        sweep("tick", "--campaign", str(d), env=env)
        st = status_json(d, env=env)
        reasons = {h["run_id"]: h["reason"] for h in st["held"]}
        assert set(reasons) == {"pr-000", "pr-002"}, reasons
        assert reasons["pr-000"] == ("needs 2 GPUs and max_gpu_parallel is 0: never admitted under this plan "
                                     "(raise max_gpu_parallel)")
        assert "limit reached: max_parallel 1" in reasons["pr-002"]
        text = sweep("status", "--campaign", str(d), env=env).stdout
        assert "needs 2 GPUs and max_gpu_parallel is 0" in text and "max_parallel 1" in text
        sweep("drain", "--campaign", str(d), env=env)
        sweep("tick", "--campaign", str(d), env=env)
        reasons = {h["run_id"]: h["reason"] for h in status_json(d, env=env)["held"]}
        assert reasons["pr-002"].startswith("draining"), reasons
    finally:
        _cancel_all(slurm_cluster, c.job_prefix)


def _init_result(tmp_path, plan, env):
    path = write_plan(tmp_path / "p.json", plan)
    return sweep("init", str(path), "--campaign", str(tmp_path / "c"), env=env, check=False)


@pytest.mark.parametrize("lanes, gpus, field, words", [
    ({"cpu": {"partition": "no-such-partition"}, "gpu": {"partition": "gpu"}}, {},
     "scheduler.lanes.cpu.partition", "no partition 'no-such-partition'"),
    ({"cpu": {"partition": "cpu"}, "gpu": {"partition": "gpu", "gpu_type": "h100"}}, {0: 1},
     "scheduler.lanes.gpu.partition", "GPU of type 'h100'"),
    ({"cpu": {"partition": "cpu"}, "gpu": {"partition": "gpu"}}, {0: 8},
     "scheduler.lanes.gpu.partition", "needs 8 GPUs"),
    ({"cpu": {"partition": "cpu"}}, {1: 2}, "candidates.1.options.gpus", "configures no GPU lane"),
])
def test_init_checks_the_lanes_against_the_cluster(slurm_cluster, tmp_path, lanes, gpus, field, words):
    plan = payload_plan(2, gpus=gpus, backend="slurm", scheduler={"lanes": lanes})
    r = _init_result(tmp_path, plan, {"SLURM_CONF": str(slurm_cluster.conf)})
    assert r.returncode == 2 and field in r.stderr and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "c" / "campaign.toml").exists()


def test_init_warns_when_the_timeout_is_below_message_timeout(slurm_cluster, tmp_path):
    plan = payload_plan(1, backend="slurm", scheduler={"lanes": LANES, "call_timeout_seconds": 5})
    r = _init_result(tmp_path, plan, {"SLURM_CONF": str(slurm_cluster.conf)})
    assert r.returncode == 0, r.stderr
    assert "call_timeout_seconds" in r.stderr and "MessageTimeout (10 s)" in r.stderr, r.stderr


@pytest.mark.parametrize("how", ["no conf file", "controller down"])
def test_init_says_in_one_line_that_it_cannot_reach_the_cluster(slurm_cluster, tmp_path, how):
    """Which command, what it said, what to check; one line, and no second call to wait for."""
    plan = payload_plan(1, backend="slurm", scheduler={"lanes": LANES, "call_timeout_seconds": 15})
    env = UNREACHABLE
    if how == "controller down":     # the cluster's own conf, pointing at a port nothing listens on
        dead = tmp_path / "dead.conf"
        dead.write_text(re.sub(r"^SlurmctldPort=\d+", "SlurmctldPort=1", slurm_cluster.conf.read_text(),
                               flags=re.MULTILINE))
        env = {"SLURM_CONF": str(dead)}
    t0 = time.monotonic()
    r = _init_result(tmp_path, plan, env)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    # a Slurm job does not start from this shell's environment (the backend's declared fact): a plan
    # with no [environment] is warned
    assert "the plan declares no [environment]" in r.stderr, r.stderr
    # the warnings about the cluster (the plan's other warnings, e.g. no [environment], are not this test's)
    lines = [line for line in r.stderr.splitlines() if line.startswith("warning: scheduler:")]
    assert len(lines) == 1, r.stderr
    assert not [x for x in r.stderr.splitlines() if "slurm" in x.lower() and x not in lines], r.stderr
    line = lines[0]
    assert line.startswith("warning: scheduler: cannot reach the Slurm cluster"), line
    assert env["SLURM_CONF"] in line and "check that SLURM_CONF" in line, line
    if how == "controller down":
        assert "`sinfo -h -o %R|%G|%P` said: slurm_load_partitions: Unable to contact slurm controller" in line
        assert elapsed < 15 + 10, "scontrol was asked after sinfo had already failed"
    else:
        assert "is not a file" in line and elapsed < 10, (line, elapsed)


def test_permissions_after_a_slurm_run_are_exactly_as_docs_state_md_says(slurm_cluster, tmp_path):
    from sweep.harbor.samples import make_pr_repo
    from tests.fakes.runs import candidate, local_plan
    from tests.test_reliability import _modes
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    src = make_pr_repo(tmp_path / "repos", "verified")
    plan = local_plan([candidate("pr-0", src)], scheduler={"backend": "slurm", "lanes": LANES})
    d = tmp_path / "c"
    sweep("init", str(write_plan(tmp_path / "p.json", plan)), "--campaign", str(d), env=env)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        sweep("tick", "--campaign", str(d), env=env)
        if load_record(run_dir(d, "pr-0")).value.state is RunState.ended:
            break
        time.sleep(1)
    rec = load_record(run_dir(d, "pr-0")).value
    assert rec.state is RunState.ended and rec.outcome.value == "verified", rec
    assert (run_dir(d, "pr-0") / "task" / "tests" / "test.sh").exists()
    assert _modes(d) == []


def test_doctor_checks_the_lanes_against_the_cluster(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    lanes = {"cpu": {"partition": "cpu"}, "gpu": {"partition": "gpu", "gpu_type": "h100"}}
    plan = payload_plan(2, gpus={1: 1}, backend="slurm", scheduler={"lanes": lanes})
    d = _init(tmp_path, plan, UNREACHABLE)          # made where Slurm could not be asked
    r = sweep("doctor", "--no-network", "--campaign", str(d), env=env, check=False)
    assert r.returncode == 1 and "scheduler.lanes.gpu.partition" in r.stdout and "h100" in r.stdout, r.stdout
    d2 = _init(tmp_path, payload_plan(1, backend="slurm", scheduler={"lanes": LANES}), env, name="ok")
    r = sweep("doctor", "--no-network", "--campaign", str(d2), env=env, check=False)
    assert r.returncode == 0 and "lanes match" in r.stdout, (r.stdout, r.stderr)


def test_a_requeued_job_of_an_indexed_ended_run_holds_its_slot_and_is_not_cancelled_as_a_ghost(
        slurm_cluster, tmp_path):
    """The ended-runs index only takes a run whose controller job had left the queue, but Slurm can
    bring a finished job back under the same id (`scontrol requeue`; a node failure on a lane with
    `requeue = "slurm"`). The tick reads that run from its files again: the job is the run's own
    controller, so it keeps its slot while it lives and is never scancelled as a ghost."""
    from runstate.index import load_index
    from runstate.runs import save_record
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    lanes = {"cpu": {"partition": "cpu", "time": "10", "requeue": "slurm"},
             "gpu": {"partition": "gpu", "time": "10"}}
    plan = payload_plan(2, backend="slurm", max_parallel=1, scheduler={"lanes": lanes},
                        tick={"ghost_grace_s": 1})
    d = _init(tmp_path, plan, env)
    (d / "payload.json").write_text(json.dumps({"sleep": 0, "runs": {"pr-001": {"hang": True}}}))
    c = load_campaign(d)
    rdir = run_dir(d, "pr-000")
    try:
        sweep("tick", "--campaign", str(d), env=env)
        rec = _wait(lambda: (r := load_record(rdir).value).state is RunState.ended and r, 60, "pr-000 ended")
        job = rec.job_id
        _wait(lambda: job not in [r[0] for r in _live(slurm_cluster, c.job_prefix)], 30, "its job to leave")
        sweep("drain", "--campaign", str(d), "--reason", "test", env=env)
        # the run ended long ago (past the tick's stray window): the next tick indexes it
        save_record(rdir, rec.model_copy(update={"updated": time.time() - 3 * 3600}), touch=False)
        time.sleep(1.1)                 # the index refuses a state.json changed within a second
        sweep("tick", "--campaign", str(d), env=env)
        assert "pr-000" in load_index(d).entries
        # Slurm brings the finished job back (held, so it stays as long as the test needs it)
        slurm_cluster.run("scontrol", "requeuehold", job)
        _wait(lambda: job in [r[0] for r in _live(slurm_cluster, c.job_prefix)], 20, "the requeued job")
        sweep("undrain", "--campaign", str(d), env=env)
        for _ in range(2):
            sweep("tick", "--campaign", str(d), env=env)
            time.sleep(1.2)             # past ghost_grace_s: a ghost would be cancelled now
        sweep("tick", "--campaign", str(d), env=env)
        tick = json.loads((d / "tick.json").read_text())
        assert tick["ghosts"] == [], tick["ghosts"]
        assert not [a for a in tick["actions"] if a["kind"] == "cancel_ghost"], tick["actions"]
        assert "ghost" not in (rdir / "events.jsonl").read_text()
        assert job in [r[0] for r in _live(slurm_cluster, c.job_prefix)], "the run's own job was cancelled"
        st = status_json(d, env=env)
        assert load_record(run_dir(d, "pr-001")).value.state is RunState.queued, "its job holds the only slot"
        assert any("max_parallel 1" in h["reason"] for h in st["held"]), st["held"]
        assert st["outcomes"].get("verified") == 1, st["outcomes"]
        # once it leaves the queue the slot is free again
        slurm_cluster.run("scancel", job)
        _wait(lambda: job not in [r[0] for r in _live(slurm_cluster, c.job_prefix)], 30, "the job to leave")
        sweep("tick", "--campaign", str(d), env=env)
        assert load_record(run_dir(d, "pr-001")).value.state is RunState.active
        assert load_record(rdir).value.state is RunState.ended
    finally:
        _cancel_all(slurm_cluster, c.job_prefix)
