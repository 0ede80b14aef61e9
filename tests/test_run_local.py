"""`sweep run`: a local-backend campaign ticked to its end by one command, resumable after Ctrl-C.

Real processes throughout: the CLI, its ticks, the local scheduler's detached controllers (the
payload controller of tests/payload_controller.py, which ends each run as its config says).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.campaigns import REPO, ctrl_c_default, payload_plan, status_json, sweep, write_plan


def _campaign(tmp_path, n=4, **kw):
    plan = write_plan(tmp_path / "plan.json", payload_plan(n, max_parallel=2, **kw))
    camp = tmp_path / "camp"
    r = sweep("init", str(plan), "--campaign", str(camp))
    return camp, r


def test_run_ticks_until_every_run_has_ended(tmp_path):
    camp, init = _campaign(tmp_path, 4, gpus={3: 3}, max_gpu_parallel=2)
    assert f"next: sweep run --campaign {camp}" in init.stdout          # not scrontab, on a local campaign
    r = sweep("run", "--campaign", str(camp), "--interval", "0.2", timeout=180)
    for rid in ("pr-000", "pr-001", "pr-002"):
        assert f"ended {rid}: verified" in r.stdout
    assert r.stdout.count("ended pr-") == 3
    assert "done after" in r.stdout and "held for good: pr-003" in r.stdout
    assert "next: sweep report" in r.stdout
    st = status_json(camp)
    assert st["counts"] == {"queued": 1, "active": 0, "ended": 3}
    text = sweep("status", "--campaign", str(camp)).stdout
    assert "scrontab" not in text


def test_ctrl_c_leaves_the_campaign_resumable(tmp_path):
    camp, _ = _campaign(tmp_path, 3)
    hold = camp / "payload.hold"
    hold.write_text("")                                   # controllers wait while it exists
    proc = subprocess.Popen([sys.executable, "-m", "sweep", "run", "--campaign", str(camp), "--interval", "0.2"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=ctrl_c_default)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and status_json(camp)["counts"]["active"] < 2:
            time.sleep(0.2)
        assert status_json(camp)["counts"]["active"] == 2
        os.killpg(proc.pid, signal.SIGINT)               # what Ctrl-C sends to the foreground group
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "interrupted" in out and "Traceback" not in err
    assert f"next: sweep run --campaign {camp}" in out
    assert status_json(camp)["counts"]["active"] == 2    # the controllers were not taken down with it
    hold.unlink()
    r = sweep("run", "--campaign", str(camp), "--interval", "0.2", timeout=180)
    st = status_json(camp)
    assert st["counts"] == {"queued": 0, "active": 0, "ended": 3}
    assert sorted(e["run_id"] for e in st["ended"]) == ["pr-000", "pr-001", "pr-002"]
    assert "done after" in r.stdout


def test_run_stops_on_a_drained_campaign(tmp_path):
    camp, _ = _campaign(tmp_path, 2)
    sweep("drain", "--campaign", str(camp), "--reason", "runtime change")
    r = sweep("run", "--campaign", str(camp), "--interval", "0.2", timeout=120)
    assert "drained after" in r.stdout and "next: sweep undrain" in r.stdout
    assert status_json(camp)["counts"]["queued"] == 2
