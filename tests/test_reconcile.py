"""Receipts and `sweep reconcile` against the real daytona SDK over HTTP to the local fake.

The orphan scenario: two real controller-like jobs (the local scheduler backend, real processes)
each create a sandbox with a receipt; one is killed -9. `sweep reconcile` (the real CLI, a
subprocess) must terminate exactly that one: not the live job's sandbox, not a sandbox with
another campaign's tags, not one with our campaign tag but no receipt.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("daytona")

from runstate.atomic import make_private_dir  # noqa: E402
from sweep.campaign import Campaign  # noqa: E402
from sweep.providers import get_sandbox_provider  # noqa: E402
from sweep.providers.base import SandboxError, SandboxSpec, sandbox_name  # noqa: E402
from sweep.providers.receipts import (create_with_receipt, iter_receipts, new_tags, read_receipt,  # noqa: E402
                                      reconcile, terminate_with_receipt)
from sweep.scheduler.base import JobSpec  # noqa: E402
from tests.campaigns import payload_plan, sweep, write_plan  # noqa: E402
from tests.fakes.daytona_api import FakeDaytona  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

CONTROLLER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {repo!r})
    from pathlib import Path
    from sweep.providers import get_sandbox_provider
    from sweep.providers.base import SandboxSpec, sandbox_name
    from sweep.providers.receipts import create_with_receipt, current_job_id, new_tags
    provider, options, campaign_id, run_dir, ready = sys.argv[1:6]
    p = get_sandbox_provider(provider, **json.loads(options))
    tags = new_tags(campaign_id=campaign_id, run_id=Path(run_dir).name, job_id=current_job_id(),
                    role="solver", attempt=1)
    h = create_with_receipt(p, SandboxSpec(name=sandbox_name(tags), tags=tags, image="python:3.12-slim",
                                           timeout_s=3600, idle_timeout_s=900),
                            Path(run_dir), options=p.receipt_options)
    Path(ready).write_text(json.dumps({{"pid": os.getpid(), "name": h.name, "id": h.sandbox_id}}))
    time.sleep(600)
""")


@pytest.fixture
def fake():
    f = FakeDaytona().start()
    yield f
    f.stop()


class Remote:
    """One remote provider's fake, seen the same way by the orphan test."""

    def __init__(self, kind, tmp_path, monkeypatch):
        self.kind = kind
        if kind == "daytona":
            self.fake = FakeDaytona().start()
            key = tmp_path / "daytona.key"
            key.write_text(self.fake.api_key)
            self.options = {"api_url": self.fake.api_url, "api_key_file": str(key)}
        else:
            pytest.importorskip("modal")
            from tests.fakes.modal_api import FakeModal
            self.fake = FakeModal().start()
            monkeypatch.setenv("MODAL_SANDBOX_V2", "0")      # the jobs inherit it
            (tmp_path / "mid").write_text("ak-fake")
            (tmp_path / "msecret").write_text(self.fake.token_secret)
            self.options = {"server_url": self.fake.url, "app_name": "sweep-test",
                            "token_id_file": str(tmp_path / "mid"), "token_secret_file": str(tmp_path / "msecret")}

    def live_ids(self):
        return {s["id"] for s in self.fake.live()} if self.kind == "daytona" else self.fake.live_ids()

    def labels(self, sid):
        return dict(self.fake.sandboxes[sid]["labels" if self.kind == "daytona" else "tags"])

    def add_foreign(self, name, tags):
        if self.kind == "daytona":
            return self.fake.add_foreign(name, tags)
        return self.fake.add_foreign("sweep-test", name, tags)

    def terminated(self):
        if self.kind == "daytona":
            return [p.rsplit("/", 1)[1] for m, p, _ in self.fake.requests if m == "DELETE"]
        return list(self.fake.terminated)

    def secrets(self):
        return [self.fake.api_key] if self.kind == "daytona" else [self.fake.token_secret]


@pytest.fixture(params=["daytona", "modal"])
def remote(request, tmp_path, monkeypatch):
    r = Remote(request.param, tmp_path, monkeypatch)
    yield r
    r.fake.stop()


@pytest.fixture
def campaign(tmp_path):
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", payload_plan(2))), "--campaign", str(d))
    return Campaign.load(d)


def wait_for(pred, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill9_controller_orphan_is_terminated_and_nothing_else(remote, campaign, tmp_path):
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER.format(repo=str(REPO)))
    sched = campaign.scheduler()
    cid = campaign.file.campaign_id
    jobs = {}
    for run in ("pr-000", "pr-001"):
        rdir = make_private_dir(campaign.dir / "runs" / run)
        make_private_dir(rdir / "logs")
        ready = tmp_path / f"{run}.ready"
        job = JobSpec(name=f"{campaign.file.job_prefix}t1.{run}",
                      argv=[sys.executable, str(script), remote.kind, json.dumps(remote.options), cid, str(rdir),
                            str(ready)],
                      workdir=rdir, stdout=rdir / "logs" / "c.out", stderr=rdir / "logs" / "c.err")
        jobs[run] = (sched.submit(job), ready)
    info = {run: json.loads(wait_for(lambda r=r: r.exists() and r.read_text(), what=f"{run} sandbox"))
            for run, (_, r) in jobs.items()}
    orphan_job, live_job = jobs["pr-000"][0], jobs["pr-001"][0]

    # Neighbours reconcile must never touch: another campaign's sandbox (even with the orphan's
    # instance id and job id), and one with our campaign tag that no receipt of ours names.
    orphan_tags = remote.labels(info["pr-000"]["id"])
    foreign = remote.add_foreign("other-campaign-box", dict(orphan_tags, **{"sweep.campaign": "0ther0ca"}))
    unowned = remote.add_foreign("hand-made-box", dict(orphan_tags, **{"sweep.instance": "feedfacecafe"}))

    os.kill(info["pr-000"]["pid"], signal.SIGKILL)
    wait_for(lambda: (s := sched.queue()).known and orphan_job not in s.jobs and live_job in s.jobs,
             what="the killed job to leave the queue")

    r = sweep("reconcile", "--campaign", str(campaign.dir), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"terminated: {info['pr-000']['name']}" in r.stdout
    live_ids = remote.live_ids()
    assert info["pr-000"]["id"] not in live_ids
    assert {info["pr-001"]["id"], foreign, unowned} <= live_ids
    assert remote.terminated() == [info["pr-000"]["id"]]

    states = {read_receipt(p).tags["sweep.run"]: read_receipt(p).state for _, p in iter_receipts(campaign.dir)}
    assert states == {"pr-000": "terminated", "pr-001": "created"}
    for _, p in iter_receipts(campaign.dir):
        assert p.stat().st_mode & 0o777 == 0o600
        assert not any(secret in p.read_text() for secret in remote.secrets())

    again = sweep("reconcile", "--campaign", str(campaign.dir))
    assert "terminated" not in again.stdout.replace("left alone", "")

    sched.cancel([live_job])
    wait_for(lambda: live_job not in sched.queue().jobs, what="the live job to end")


def test_unknown_queue_terminates_nothing(fake, tmp_path):
    key = tmp_path / "k"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    run_dir = make_private_dir(make_private_dir(tmp_path / "c" / "runs") / "r1")
    t = new_tags(campaign_id="ab12cd34", run_id="r1", job_id="77", role="solver", attempt=1)
    create_with_receipt(p, SandboxSpec(name=sandbox_name(t), tags=t), run_dir, options=p.receipt_options)
    rep = reconcile(tmp_path / "c", "ab12cd34", queue_known=False, live_jobs=set(), queue_error="squeue timed out",
                    provider_for=lambda n, o: get_sandbox_provider(n, **o))
    assert rep.refused and "UNKNOWN" in rep.refused and len(fake.live()) == 1
    # the same call with a known queue that lacks job 77 terminates it
    rep = reconcile(tmp_path / "c", "ab12cd34", queue_known=True, live_jobs=set(),
                    provider_for=lambda n, o: get_sandbox_provider(n, **o))
    assert len(rep.terminated) == 1 and fake.live() == []


def test_receipt_is_written_before_create_and_a_never_created_sandbox_is_settled_gone(fake, tmp_path):
    key = tmp_path / "k"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    run_dir = make_private_dir(make_private_dir(tmp_path / "c" / "runs") / "r1")
    t = new_tags(campaign_id="ab12cd34", run_id="r1", job_id="77", role="solver", attempt=1)
    fake.fail(503, times=10, path_contains="/api/sandbox")
    with pytest.raises(SandboxError):
        create_with_receipt(p, SandboxSpec(name=sandbox_name(t), tags=t), run_dir, options=p.receipt_options)
    (path,) = [q for _, q in iter_receipts(tmp_path / "c")]
    assert read_receipt(path).state == "requested"      # the receipt exists although create failed
    # while the provider is down, reconcile reports an error and settles nothing
    rep = reconcile(tmp_path / "c", "ab12cd34", queue_known=True, live_jobs=set(),
                    provider_for=lambda n, o: get_sandbox_provider(n, **o))
    assert rep.errors and "outage" in rep.errors[0] and read_receipt(path).state == "requested"
    fake.faults.clear()
    rep = reconcile(tmp_path / "c", "ab12cd34", queue_known=True, live_jobs=set(),
                    provider_for=lambda n, o: get_sandbox_provider(n, **o))
    assert rep.settled_gone == [sandbox_name(t)] and read_receipt(path).state == "gone"


def test_terminate_with_receipt_settles(fake, tmp_path):
    key = tmp_path / "k"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    run_dir = make_private_dir(tmp_path / "r1")
    t = new_tags(campaign_id="ab12cd34", run_id="r1", job_id="77", role="judge", attempt=2)
    h = create_with_receipt(p, SandboxSpec(name=sandbox_name(t), tags=t), run_dir)
    assert terminate_with_receipt(p, h, run_dir) == "confirmed"
    (path,) = list((run_dir / "sandboxes").glob("*.json"))
    assert read_receipt(path).state == "terminated" and fake.live() == []


def test_a_sandbox_created_before_its_receipt_said_so_is_terminated(fake, tmp_path):
    """The crash window between the provider's create call and the receipt's `created` settle: the
    sandbox exists, its receipt still says `requested` and has no sandbox id. Reconcile finds it by
    its tags and terminates it."""
    from sweep.providers.receipts import Receipt, _write
    key = tmp_path / "k"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    run_dir = make_private_dir(make_private_dir(tmp_path / "c" / "runs") / "r1")
    t = new_tags(campaign_id="ab12cd34", run_id="r1", job_id="77", role="solver", attempt=1)
    spec = SandboxSpec(name=sandbox_name(t), tags=t)
    _write(run_dir, Receipt(instance=t["sweep.instance"], name=spec.name, provider=p.name, tags=dict(t),
                            state="requested", options=dict(p.receipt_options), requested_at=time.time()))
    p.create(spec)                                      # ...and the controller dies here
    (path,) = [q for _, q in iter_receipts(tmp_path / "c")]
    assert read_receipt(path).state == "requested" and len(fake.live()) == 1
    rep = reconcile(tmp_path / "c", "ab12cd34", queue_known=True, live_jobs={"77"},
                    provider_for=lambda n, o: get_sandbox_provider(n, **o))
    assert rep.left_live == [spec.name] and len(fake.live()) == 1       # its job still runs: left alone
    rep = reconcile(tmp_path / "c", "ab12cd34", queue_known=True, live_jobs=set(),
                    provider_for=lambda n, o: get_sandbox_provider(n, **o))
    assert rep.terminated == [spec.name] and fake.live() == [] and read_receipt(path).state == "terminated"
