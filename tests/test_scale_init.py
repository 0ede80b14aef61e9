"""`sweep init` writes runs without a per-file fsync, then one syncfs before campaign.toml: still
crash-safe. A real `sweep init` subprocess is killed with SIGKILL in the middle of writing the runs;
the directory is not a campaign, and running `init` again completes it (torn and missing files
included). Campaigns live under /var/tmp.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runstate.runs import list_runs
from sweep.campaign import load_campaign, load_candidate
from tests.campaigns import payload_plan, sweep, write_plan

REPO = Path(__file__).resolve().parents[1]
N = 1500


@pytest.fixture
def root():
    d = Path(tempfile.mkdtemp(prefix="sweep-init-", dir="/var/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def kill_init_midway(plan: Path, campaign: Path, at_least: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "sweep", "init", str(plan), "--campaign", str(campaign)],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    runs = campaign / "runs"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if len(os.listdir(runs)) >= at_least:
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.005)
        assert proc.poll() is None, "init finished before it could be killed: raise N"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_a_killed_init_is_not_a_campaign_and_init_again_completes_it(root):
    plan = write_plan(root / "plan.json", payload_plan(N))
    campaign = root / "campaign"
    kill_init_midway(plan, campaign, at_least=200)
    written = len(os.listdir(campaign / "runs"))
    assert 200 <= written < N
    assert not (campaign / "campaign.toml").exists()
    r = sweep("status", "--campaign", str(campaign), check=False)
    assert r.returncode != 0 and "not a sweep campaign" in r.stderr
    # what a crash without fsync can also leave: torn and missing files in the written runs
    some = sorted(os.listdir(campaign / "runs"))[:3]
    (campaign / "runs" / some[0] / "state.json").write_bytes(b'{"run_id": "')
    (campaign / "runs" / some[1] / "candidate.json").write_bytes(b"")
    (campaign / "runs" / some[2] / "state.json").unlink()

    again = sweep("init", str(plan), "--campaign", str(campaign))
    assert "created campaign" in again.stdout, again.stdout
    c = load_campaign(campaign)
    assert c.candidate_count == N
    listing = list_runs(campaign)
    assert not listing.corrupt and len(listing.records) == N
    assert {r.state.value for r in listing.records.values()} == {"queued"}
    assert sorted(r.panel_index for r in listing.records.values()) == list(range(N))
    for rid in some:
        assert load_candidate(campaign / "runs" / rid).run_id == rid
    # and it is a campaign every verb can use; a third init is a no-op
    st = json.loads(sweep("status", "--json", "--campaign", str(campaign)).stdout)
    assert st["runs"] == N and st["counts"]["queued"] == N
    assert "nothing to do" in sweep("init", str(plan), "--campaign", str(campaign)).stdout


def test_init_files_have_private_modes(root):
    plan = write_plan(root / "plan.json", payload_plan(3))
    campaign = root / "campaign"
    sweep("init", str(plan), "--campaign", str(campaign))
    for rid in os.listdir(campaign / "runs"):
        rdir = campaign / "runs" / rid
        assert os.stat(rdir).st_mode & 0o777 == 0o700
        assert not (rdir / "logs").exists()      # made 0700 at the run's first submission
        for f in ("state.json", "candidate.json"):
            assert os.stat(rdir / f).st_mode & 0o777 == 0o600
