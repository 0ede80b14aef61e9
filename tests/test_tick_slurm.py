"""The tick end to end against the real throwaway Slurm cluster (issue 4, item 6; scrontab)."""
import json
import os
import time

import pytest

from runstate import load_record, run_dir
from runstate.models import RunState
from sweep.campaign import load_campaign
from tests.campaigns import payload_plan, status_json, sweep, write_plan

pytestmark = pytest.mark.slurm

LANES = {"cpu": {"partition": "cpu", "time": "10"}, "gpu": {"partition": "gpu", "time": "10"}}


def _init(tmp_path, plan, env, name="camp"):
    path = write_plan(tmp_path / f"{name}.json", plan)
    d = tmp_path / name
    sweep("init", str(path), "--campaign", str(d), env=env)
    return d


def _our_jobs(cluster, prefix):
    out = cluster.run("squeue", "--me", "-h", "-o", "%i|%j|%T|%P|%b").stdout
    rows = [line.split("|") for line in out.splitlines() if line]
    return [r for r in rows if r[1].startswith(prefix)]


def test_campaign_on_slurm_respects_limits_and_lanes_and_every_run_ends(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    gpus = {1: 1, 4: 2, 7: 1, 9: 2, 10: 1}
    plan = payload_plan(12, gpus=gpus, backend="slurm", max_parallel=4, max_gpu_parallel=2,
                        scheduler={"lanes": LANES})
    d = _init(tmp_path, plan, env)
    (d / "payload.json").write_text(json.dumps({"sleep": 1.0}))
    prefix = load_campaign(d).job_prefix
    seen_gpu_rows = []
    max_ours = max_gpu = 0
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        sweep("tick", "--campaign", str(d), env=env)
        ours = _our_jobs(slurm_cluster, prefix)
        live = [r for r in ours if r[2] in ("PENDING", "RUNNING", "CONFIGURING")]
        gpu_rows = [r for r in live if r[3] == "gpu"]
        seen_gpu_rows += gpu_rows
        max_ours, max_gpu = max(max_ours, len(live)), max(max_gpu, len(gpu_rows))
        assert len(live) <= 4 and len(gpu_rows) <= 2, ours
        st = status_json(d, env=env)
        if st["counts"]["queued"] == 0 and st["counts"]["active"] == 0:
            break
        time.sleep(0.5)
    st = status_json(d, env=env)
    assert st["outcomes"] == {"verified": 12}, st
    assert max_ours >= 2 and max_gpu >= 1
    for _jid, name, _, part, gres in seen_gpu_rows:
        run_id = name.split(".", 3)[3]
        want = gpus[int(run_id.split("-")[1])]
        assert part == "gpu" and gres.replace("gres/", "gres:") == f"gres:gpu:{want}", (name, gres)
    for i in range(12):
        rec = load_record(run_dir(d, f"pr-{i:03d}")).value
        assert rec.lane == ("gpu" if i in gpus else "cpu") and rec.attempts == 0
        assert (run_dir(d, f"pr-{i:03d}") / "logs" / f"job-{rec.submit_token}.sbatch").exists()


def test_scancelled_jobs_come_back_and_end_max_attempted(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    d = _init(tmp_path, payload_plan(2, backend="slurm", max_attempts=2, scheduler={"lanes": LANES}), env)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    for attempt in (1, 2):
        sweep("tick", "--campaign", str(d), env=env)
        recs = [load_record(run_dir(d, f"pr-{i:03d}")).value for i in range(2)]
        assert all(r.state is RunState.active for r in recs)
        slurm_cluster.run("scancel", *[r.job_id for r in recs])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:      # wait until Slurm no longer lists them as alive
            alive = [r for r in _our_jobs(slurm_cluster, load_campaign(d).job_prefix)
                     if r[2] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]
            if not alive:
                break
            time.sleep(0.2)
        sweep("tick", "--campaign", str(d), env=env)
        recs = [load_record(run_dir(d, f"pr-{i:03d}")).value for i in range(2)]
        assert all(r.attempts == attempt for r in recs), [r.attempts for r in recs]
    assert all(r.state is RunState.ended and r.reason == "max_attempted" for r in recs)


def test_drain_on_slurm_admits_nothing_and_reports_drained(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    d = _init(tmp_path, payload_plan(3, backend="slurm", scheduler={"lanes": LANES}), env)
    # long enough to still run when status looks, on a loaded machine too (1 s runs had ended by then)
    (d / "payload.json").write_text(json.dumps({"sleep": 15.0}))
    sweep("drain", "--campaign", str(d), env=env)
    sweep("tick", "--campaign", str(d), env=env)
    st = status_json(d, env=env)
    assert st["counts"]["active"] == 0 and st["drain"]["drained"]
    assert _our_jobs(slurm_cluster, load_campaign(d).job_prefix) == []
    sweep("undrain", "--campaign", str(d), env=env)
    sweep("tick", "--campaign", str(d), env=env)
    assert status_json(d, env=env)["counts"]["active"] == 2


def test_with_slurmctld_stopped_a_tick_changes_nothing_and_says_so(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    plan = payload_plan(3, backend="slurm", scheduler={"lanes": LANES, "call_timeout_seconds": 5})
    d = _init(tmp_path, plan, env)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    sweep("tick", "--campaign", str(d), env=env)
    before = {rid: (run_dir(d, rid) / "state.json").read_bytes() for rid in os.listdir(d / "runs")}
    assert sum(load_record(run_dir(d, r)).value.state is RunState.active for r in before) == 2
    slurm_cluster.stop_controller()
    try:
        out = sweep("tick", "--campaign", str(d), env=env, timeout=60).stdout
        assert "queue UNKNOWN" in out and "no run judged dead" in out
        after = {rid: (run_dir(d, rid) / "state.json").read_bytes() for rid in before}
        assert after == before
        assert json.loads((d / "tick.json").read_text())["squeue_known"] is False
        assert "queue UNKNOWN" in sweep("status", "--campaign", str(d), env=env).stdout
    finally:
        slurm_cluster.start_controller()
    recs = [load_record(run_dir(d, rid)).value for rid in before]
    slurm_cluster.run("scancel", *[r.job_id for r in recs if r.job_id])


def test_scrontab_install_merges_is_idempotent_and_shows_the_cron_job(slurm_cluster, scrontab_bin, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf), "SWEEP_SCRONTAB": str(scrontab_bin)}
    d = _init(tmp_path, payload_plan(1, backend="slurm", scheduler={"lanes": LANES}), env)
    c = load_campaign(d)
    printed = sweep("scrontab", "--print", "--campaign", str(d), env=env).stdout
    assert "* * * * * " in printed and "*/1" not in printed and f"--job-name={c.tick_job_name}" in printed
    foreign = "#SCRON --job-name=someone-else\n30 4 * * * /bin/true\n"
    slurm_cluster.run(str(scrontab_bin), "-", input=foreign, check=False)
    listing = slurm_cluster.run(str(scrontab_bin), "-l", check=False).stdout
    if "someone-else" not in listing:       # older clients do not read stdin for "-"
        f = tmp_path / "foreign.txt"
        f.write_text(foreign)
        slurm_cluster.run(str(scrontab_bin), str(f))
    try:
        sweep("scrontab", "--install", "--campaign", str(d), env=env)
        sweep("scrontab", "--install", "--campaign", str(d), env=env)
        listing = slurm_cluster.run(str(scrontab_bin), "-l").stdout
        assert listing.count(f"sweep:{c.campaign_id} begin") == 1
        assert "/bin/true" in listing and str(d) in listing
        names = slurm_cluster.squeue_names()
        assert c.tick_job_name in names and "someone-else" in names
        assert all(not n.startswith(c.job_prefix) for n in names)
        sweep("scrontab", "--remove", "--campaign", str(d), env=env)
        listing = slurm_cluster.run(str(scrontab_bin), "-l").stdout
        assert f"sweep:{c.campaign_id}" not in listing and "/bin/true" in listing
    finally:
        slurm_cluster.run(str(scrontab_bin), "-r", check=False)


def test_a_failed_sbatch_releases_the_lease_and_is_shown(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    lanes = {"cpu": {"partition": "no-such-partition"}, "gpu": {"partition": "gpu"}}
    # init where Slurm cannot be asked (it would refuse the lane up front): the tick meets the refusal
    d = _init(tmp_path, payload_plan(1, backend="slurm", scheduler={"lanes": lanes}),
              {"SLURM_CONF": "/nonexistent/slurm.conf"})
    out = sweep("tick", "--campaign", str(d), env=env).stdout
    assert "sbatch failed" in out
    rdir = run_dir(d, "pr-000")
    rec = load_record(rdir).value
    assert rec.state is RunState.queued and "invalid partition" in rec.last_error.lower()
    assert not (rdir / "lease.json").exists()
    tick = json.loads((d / "tick.json").read_text())
    assert any("sbatch failed" in e for e in tick["errors"])
    assert any(a["kind"] == "submit_failed" for a in tick["actions"])
    text = sweep("status", "--campaign", str(d), env=env).stdout
    assert "sbatch failed" in text and "pr-000" in text
    assert "submit_failed" in (rdir / "events.jsonl").read_text()


def test_a_hung_tick_ends_itself_and_frees_the_lock(slurm_cluster, tmp_path):
    """slurmctld frozen (SIGSTOP): squeue hangs; the tick's own deadline ends it."""
    import signal
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    plan = payload_plan(1, backend="slurm", scheduler={"lanes": LANES, "call_timeout_seconds": 120},
                        tick={"max_runtime_s": 10})
    d = _init(tmp_path, plan, env)
    pid = slurm_cluster.pids["slurmctld"]
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = sweep("tick", "--campaign", str(d), env=env, check=False, timeout=90)
        took = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert r.returncode != 0 and "max_runtime_s" in r.stderr, (r.stdout, r.stderr)
    assert 9 <= took < 30, took
    from filelock import FileLock
    with FileLock(str(d / "tick.lock"), timeout=0):     # the lock is free again
        pass
    assert load_record(run_dir(d, "pr-000")).value.state is RunState.queued


def test_status_shows_slurms_view_and_replans_why_runs_wait(slurm_cluster, tmp_path):
    """Issue 26 item 4, on one campaign: an active run's job is shown as the last queue snapshot
    saw it (PENDING with Slurm's reason, then RUNNING, each with since when), and a queued run's
    reason is planned again when status runs: the run that held the one slot ends, and status
    says the next tick admits the other at once, not the last tick's "limit reached"."""
    from sweep.status import collect_status
    from tests.slurm_cluster import wait_for

    def status():          # in-process (the CLI's --json and text are each run once below)
        return collect_status(d).as_json()
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    lanes = {"cpu": {"partition": "cpu", "time": "10", "extra_args": ["--hold"]}, "gpu": LANES["gpu"]}
    d = _init(tmp_path, payload_plan(2, backend="slurm", max_parallel=1, scheduler={"lanes": lanes}), env)
    (d / "payload.json").write_text(json.dumps({"sleep": 0.1}))
    (d / "payload.hold").write_text("")          # keeps pr-000's controller running until removed
    jobs = []
    try:
        sweep("tick", "--campaign", str(d), env=env)          # submits pr-000, held by Slurm (--hold)
        st = status_json(d, env=env)
        (row,) = st["active"]
        jobs.append(row["job_id"])
        assert row["run_id"] == "pr-000" and row["slurm"] is None, row   # the queue was read before sbatch
        assert st["held"][0]["reason"].startswith("limit reached: max_parallel 1 (1 running"), st["held"]
        sweep("tick", "--campaign", str(d), env=env)
        st = status()
        (row,) = st["active"]
        assert row["slurm"]["state"] == "PENDING" and row["slurm"]["reason"] == "JobHeldUser", row
        assert st["queue"]["known"] and st["queue"]["states"] == {"PENDING": 1}, st["queue"]
        assert 0 <= st["queue"]["age_s"] < 60
        text = sweep("status", "--campaign", str(d), env=env).stdout
        assert "PENDING (JobHeldUser) for " in text and "queue as the last tick read it: " in text, text
        pending_since = row["slurm"]["since"]
        slurm_cluster.run("scontrol", "release", row["job_id"])
        wait_for(lambda: any(r[0] == jobs[0] and r[2] == "RUNNING" for r in _our_jobs(
            slurm_cluster, load_campaign(d).job_prefix)), 30, "the released job to run")
        sweep("tick", "--campaign", str(d), env=env)
        (row,) = status()["active"]
        assert row["slurm"]["state"] == "RUNNING" and row["slurm"]["since"] > pending_since, row
        (d / "payload.hold").unlink()
        wait_for(lambda: load_record(run_dir(d, "pr-000")).value.state is RunState.ended, 60,
                 "pr-000 to end")
        # no tick since: its job is still in queue.json, but its ending is newer than that snapshot
        st = status()
        assert st["counts"]["active"] == 0, st["counts"]
        assert st["held"] == [{"run_id": "pr-001", "lane": "cpu",
                               "reason": "free to start: the next tick admits it"}], st["held"]
        last = json.loads((d / "tick.json").read_text())["waiting"]     # what the last tick said
        assert any(k.startswith("limit reached") and "pr-001" in v for k, v in last.items()), last
    finally:
        slurm_cluster.run("scancel", *jobs, check=False)
