"""`sweep init`, `sweep tick`, drain and status end to end on the local backend (real processes)."""
import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from runstate import acquire_lease, load_record, read_lease, run_dir
from runstate.models import RunState
from sweep.campaign import load_campaign
from tests.campaigns import payload_plan, status_json, sweep, tick_until_done, write_plan


@pytest.fixture
def campaign(tmp_path):
    def make(plan: dict, name: str = "camp"):
        path = write_plan(tmp_path / f"{name}.json", plan)
        d = tmp_path / name
        out = sweep("init", str(path), "--campaign", str(d))
        assert "next:" in out.stdout
        return d
    return make


def test_init_freezes_the_plan_and_is_idempotent(tmp_path, campaign):
    d = campaign(payload_plan(3))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert sorted(os.listdir(d / "runs")) == ["pr-000", "pr-001", "pr-002"]
    assert {p.name for p in (d / "roles").iterdir()} >= {"author.toml", "reviewer.toml", "solver.toml"}
    c = load_campaign(d)
    assert c.candidate_count == 3 and len(c.campaign_id) == 8
    again = sweep("init", str(tmp_path / "camp.json"), "--campaign", str(d))
    assert "nothing to do" in again.stdout
    write_plan(tmp_path / "camp.json", payload_plan(4))
    changed = sweep("init", str(tmp_path / "camp.json"), "--campaign", str(d), check=False)
    assert changed.returncode != 0 and "different plan" in changed.stderr
    assert len(os.listdir(d / "runs")) == 3


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p.update(max_paralel=3), "max_paralel"),
    (lambda p: p.update(target_verified=0), "target_verified"),
    (lambda p: p["candidates"][1].update(url="https://example.com/x"), "candidates.1"),
    (lambda p: p["candidates"][0]["options"].update(gpus=-1) if "options" in p["candidates"][0]
     else p["candidates"][0].update(options={"gpus": -1}), "candidates.0.options.gpus"),
    (lambda p: p["candidates"][2].update(id="pr-000"), "candidates.2"),
    (lambda p: p["scheduler"].update(lanes={"gpu": {"time": "soon"}}), "scheduler.lanes.gpu.time"),
    (lambda p: p["candidates"][0].update(head="--upload-pack=x"), "candidates.0.head"),
])
def test_init_errors_name_the_file_and_the_field(tmp_path, mutate, field):
    plan = payload_plan(3)
    mutate(plan)
    path = write_plan(tmp_path / "bad.json", plan)
    r = sweep("init", str(path), "--campaign", str(tmp_path / "c"), check=False)
    assert r.returncode == 2, r.stderr
    assert str(path) in r.stderr and field in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "c" / "campaign.toml").exists()


def test_init_derives_run_ids_from_github_urls(tmp_path, campaign):
    plan = payload_plan(0)
    plan["candidates"] = [{"url": "https://github.com/Owner/Repo.py/pull/3075"},
                          {"url": "https://github.com/owner/other/pull/1"}]
    d = campaign(plan)
    assert sorted(os.listdir(d / "runs")) == ["owner-other-1", "owner-repo.py-3075"]


def test_ticks_run_a_campaign_to_the_end_within_max_parallel(campaign):
    d = campaign(payload_plan(6, max_parallel=2, scheduler={"local": {"cpu_slots": 4}}))
    # held: the admitted runs stay active until the test has looked, so the limit is seen, not
    # sampled (a loaded machine finishes a short run between a tick and the next status)
    (d / "payload.hold").touch()
    for _ in range(2):
        sweep("tick", "--campaign", str(d))
        assert status_json(d)["counts"]["active"] == 2       # max_parallel, and a second tick adds none
    (d / "payload.hold").unlink()
    seen_active = []
    st = tick_until_done(d, on_tick=lambda s: seen_active.append(s["counts"]["active"]))
    assert st["outcomes"] == {"verified": 6}
    assert max(seen_active) <= 2
    tick = json.loads((d / "tick.json").read_text())
    assert tick["squeue_known"] is True
    events = (run_dir(d, "pr-000") / "events.jsonl").read_text()
    assert "admitted" in events
    for rid in os.listdir(d / "runs"):
        assert read_lease(run_dir(d, rid)) is None


def test_target_verified_stops_admission(campaign):
    d = campaign(payload_plan(5, target=2, max_parallel=4, scheduler={"local": {"cpu_slots": 4}}))
    (d / "payload.hold").touch()          # the admitted runs stay active until the test has looked
    sweep("tick", "--campaign", str(d))
    st = status_json(d)
    assert st["counts"]["active"] == 2
    (d / "payload.hold").unlink()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and status_json(d)["outcomes"].get("verified", 0) < 2:
        sweep("tick", "--campaign", str(d))
        time.sleep(0.3)
    sweep("tick", "--campaign", str(d))
    st = status_json(d)
    assert st["outcomes"] == {"verified": 2} and st["counts"]["active"] == 0 and st["counts"]["queued"] == 3


def test_cancelled_controllers_come_back_with_an_attempt_and_end_max_attempted(campaign):
    from sweep.scheduler import make_scheduler
    plan = payload_plan(1, max_attempts=2)
    plan["candidates"][0]["options"] = {}
    d = campaign(plan)
    (d / "payload.json").write_text(json.dumps({"hang": True}))
    c = load_campaign(d)
    sched = make_scheduler(c.settings.scheduler, d, c.job_prefix)
    for expected_attempts in (1, 2):
        sweep("tick", "--campaign", str(d))
        rec = load_record(run_dir(d, "pr-000")).value
        assert rec.state is RunState.active
        sched.cancel([rec.job_id])
        out = sweep("tick", "--campaign", str(d)).stdout
        rec = load_record(run_dir(d, "pr-000")).value
        assert rec.attempts == expected_attempts, out
    assert rec.state is RunState.ended and rec.outcome.value == "blocked" and rec.reason == "max_attempted"
    assert read_lease(run_dir(d, "pr-000")) is None


def test_drain_admits_nothing_then_reports_drained(campaign):
    d = campaign(payload_plan(4, max_parallel=2))
    (d / "payload.hold").touch()          # both runs stay active until drain and status have looked
    sweep("tick", "--campaign", str(d))
    assert status_json(d)["counts"]["active"] == 2
    out = sweep("drain", "--reason", "runtime upgrade", "--campaign", str(d)).stdout
    assert "next:" in out
    text = sweep("status", "--campaign", str(d)).stdout
    assert "draining (2 active" in text and "reason: runtime upgrade" in text
    (d / "payload.hold").unlink()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        sweep("tick", "--campaign", str(d))
        st = status_json(d)
        assert st["counts"]["active"] <= 2
        if st["drain"]["drained"]:
            break
        time.sleep(0.3)
    st = status_json(d)
    assert st["drain"]["drained"] and st["counts"]["queued"] == 2
    assert "drained: no active job, no held lease — safe to change the runtime" in \
        sweep("status", "--campaign", str(d)).stdout
    sweep("tick", "--campaign", str(d))
    assert status_json(d)["counts"]["active"] == 0
    sweep("undrain", "--campaign", str(d))
    st = tick_until_done(d)
    assert st["outcomes"] == {"verified": 4}


def test_a_second_tick_exits_quietly_while_one_runs(campaign):
    from filelock import FileLock
    d = campaign(payload_plan(1))
    with FileLock(str(d / "tick.lock"), timeout=1):
        r = sweep("tick", "--campaign", str(d))
        assert r.returncode == 0 and "another tick is running" in r.stdout
        assert not (d / "tick.json").exists()


def test_a_killed_tick_never_blocks_the_next(campaign):
    d = campaign(payload_plan(1))
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; from filelock import FileLock; "
                               f"l = FileLock({str(d / 'tick.lock')!r}); l.acquire(); print('held', flush=True); "
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert "another tick" in sweep("tick", "--campaign", str(d)).stdout
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    r = sweep("tick", "--campaign", str(d))
    assert "another tick" not in r.stdout and (d / "tick.json").exists()


def test_an_unrecorded_submission_is_adopted(campaign):
    """A tick killed between sbatch and writing the record: the next tick adopts the job."""
    from sweep.scheduler import make_scheduler
    from sweep.scheduler.base import JobSpec
    from sweep.campaign import Campaign
    from sweep.tick.act import controller_argv
    d = campaign(payload_plan(1))
    c = load_campaign(d)
    rdir = run_dir(d, "pr-000")
    token = "deadbeef0001"
    assert acquire_lease(rdir, run_id="pr-000", token=token, holder="tick")
    sched = make_scheduler(c.settings.scheduler, d, c.job_prefix)
    job_id = sched.submit(JobSpec(name=f"{c.job_prefix}{token}.pr-000",
                                  argv=controller_argv(Campaign(d, c), "pr-000", token), workdir=rdir,
                                  stdout=rdir / "logs" / "controller.out",
                                  stderr=rdir / "logs" / "controller.err"))
    hold = d / "payload.hold"          # the payload stays active while it exists: no race with a short run
    hold.write_text("")
    out = sweep("tick", "--campaign", str(d)).stdout
    assert "adopt" in out
    rec = load_record(rdir).value
    assert rec.state is RunState.active and rec.job_id == job_id and rec.submit_token == token
    hold.unlink()
    st = tick_until_done(d)
    assert st["outcomes"] == {"verified": 1}
    assert load_record(rdir).value.attempts == 0


def test_a_lease_whose_submission_never_reached_the_queue_is_reaped(campaign):
    d = campaign(payload_plan(1))
    rdir = run_dir(d, "pr-000")
    assert acquire_lease(rdir, run_id="pr-000", token="cafe00000000", holder="tick",
                         now=time.time() - 5)
    out = sweep("tick", "--campaign", str(d)).stdout       # submit_grace_s = 0 in these plans
    assert "reap" in out
    st = tick_until_done(d)
    assert st["outcomes"] == {"verified": 1}


def test_corrupt_run_is_reported_and_the_tick_carries_on(campaign):
    d = campaign(payload_plan(3))
    (run_dir(d, "pr-001") / "state.json").write_text('{"run_id": "pr-0')
    st = tick_until_done(d, timeout=60)
    assert st["outcomes"] == {"verified": 2} and "pr-001" in st["corrupt"]
    assert "corrupt: pr-001" in sweep("status", "--campaign", str(d)).stdout


def test_status_warns_when_the_last_tick_is_old(campaign):
    d = campaign(payload_plan(1))
    sweep("tick", "--campaign", str(d))
    tick = json.loads((d / "tick.json").read_text())
    tick["finished_at"] -= 3600
    (d / "tick.json").write_text(json.dumps(tick))
    # nothing ticks a local campaign by itself: no scrontab to blame, so no warning about one
    out = sweep("status", "--campaign", str(d)).stdout
    assert "WARNING: older than 3 intervals" not in out and "scrontab" not in out
    # a Slurm campaign's old tick means its scrontab entry is not running
    from dataclasses import replace

    from sweep.status import collect_status, render_status
    st = replace(collect_status(d), backend="slurm")
    text = render_status(st)
    assert "WARNING: older than 3 intervals" in text and "is the scrontab entry installed and enabled?" in text


def test_not_a_campaign_is_a_clear_error(tmp_path):
    r = sweep("tick", "--campaign", str(tmp_path), check=False)
    assert r.returncode == 2 and "not a sweep campaign" in r.stderr and "Traceback" not in r.stderr
    r = sweep("status", "--campaign", str(tmp_path / "nope"), check=False)
    assert r.returncode == 2 and "sweep init" in r.stderr


@pytest.mark.parametrize("options, field", [
    ({"provider": "no-such-provider"}, "candidates.1.options.provider"),
    ({"runtimes": {"solver": "no-such-agent"}}, "candidates.1.options.runtimes.solver"),
])
def test_init_refuses_a_provider_or_runtime_it_cannot_run(tmp_path, options, field):
    plan = payload_plan(2)
    plan["candidates"][1]["options"] = options
    r = sweep("init", str(write_plan(tmp_path / "p.json", plan)), "--campaign", str(tmp_path / "c"),
              check=False)
    # an unknown runtime is "not available"; an unknown provider names the ones that exist
    expected = "'local', 'modal' or 'daytona'" if field.endswith("provider") else "not available"
    assert r.returncode == 2 and field in r.stderr and expected in r.stderr, r.stderr
    assert not (tmp_path / "c").exists()


def test_tick_removes_stale_lease_tombstones_of_the_runs_it_acts_on(campaign):
    """A killed lease operation leaves `.lease.json.tomb.*` / `.new.*`; the tick cleans old ones."""
    d = campaign(payload_plan(2, max_parallel=2))
    rdir = run_dir(d, "pr-000")
    old = [rdir / ".lease.json.tomb.host.1.ab", rdir / ".lease.json.new.host.2.cd"]
    fresh = rdir / ".lease.json.tomb.host.3.ef"      # could belong to an operation in flight
    other = rdir / ".state.json.tmp.host.4.gh"        # not a lease leftover: never touched here
    for p in (*old, fresh, other):
        p.write_bytes(b"{}")
    for p in (*old, other):
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    (d / "payload.hold").write_text("")      # the payload stays active while it exists: no race with a short run
    sweep("tick", "--campaign", str(d))
    assert load_record(rdir).value.state is RunState.active      # the tick acted on this run
    (d / "payload.hold").unlink()
    assert not any(p.exists() for p in old)
    assert fresh.exists() and other.exists()


def test_logs_dir_is_made_at_first_submission_and_a_failure_there_leaves_the_run_queued(campaign):
    """init makes no logs/; the tick makes it 0700 before taking the lease, so a run whose logs/
    cannot be made (here a file sits in its place) keeps no lease, stays queued, and the tick
    says why while the other run starts."""
    d = campaign(payload_plan(2, max_parallel=2, scheduler={"local": {"cpu_slots": 4}}))
    bad, good = run_dir(d, "pr-000"), run_dir(d, "pr-001")
    assert not (bad / "logs").exists() and not (good / "logs").exists()
    (bad / "logs").write_text("in the way")
    (d / "payload.hold").write_text("")      # the payload stays active while it exists: no race with a short run
    out = sweep("tick", "--campaign", str(d))
    assert stat.S_IMODE(os.stat(good / "logs").st_mode) == 0o700
    assert load_record(good).value.state is RunState.active
    rec = load_record(bad).value
    assert rec.state is RunState.queued and rec.submit_token is None
    assert read_lease(bad) is None
    tick = json.loads((d / "tick.json").read_text())
    assert any("pr-000" in e for e in tick["errors"]), (out.stdout, tick["errors"])
    (d / "payload.hold").unlink()


def test_a_local_plan_without_environment_is_not_warned_about_one(tmp_path):
    """Local jobs start from the ticking process's environment (the backend's declared fact)."""
    r = sweep("init", str(write_plan(tmp_path / "p.json", payload_plan(1))), "--campaign", str(tmp_path / "c"))
    assert "declares no [environment]" not in r.stderr, r.stderr
