"""`sweep demo`: the sample panel end to end, on the local backend and through sbatch on real Slurm.

The panel (sweep/demo.py) is five real pull requests in real git repositories: a fix with a test
(verified), one without tests (blocked), one whose test already passes (not verified), one with a
flaky test (not verified, deterministically: the gates run each repeat under a different fixed
PYTHONHASHSEED and the flaky test depends on the iteration order of a set of strings) and one
that needs a GPU (held on a machine without one; verified on the test cluster, which has 4 fake
GPUs).
"""
import json
import sys
import time
from pathlib import Path

import pytest

from runstate import run_dir
from sweep.demo import build_panel
from tests.campaigns import status_json, sweep, tick_until_done
from tests.fakes.runs import record

DEMO_BUDGET_S = 120          # the demo must finish well within two minutes on a 2-core machine
LANES = {"cpu": {"partition": "cpu", "time": "10"}, "gpu": {"partition": "gpu", "time": "10"}}


def outcomes(st: dict) -> dict[str, tuple]:
    return {e["run_id"]: (e["outcome"], e["reason"]) for e in st["ended"]}


def check_flaky_gates(campaign: Path) -> None:
    """The flaky test passed under hash seed 1 and failed under seed 2: refused by evidence, not luck."""
    ev = json.loads((run_dir(campaign, "flaky-test") / "evidence" / "gates-r0001.json").read_text())
    assert ev["hash_seeds"] == [1, 2]
    assert ev["gates"]["reference"]["rewards"] == [1.0, 0.0]
    assert ev["gates"]["empty"]["rewards"] == [0.0, 0.0]
    assert ev["passed"] is False and ev["gates"]["repeat"]["ok"] is False


def test_sweep_demo_runs_the_panel_on_the_local_backend(tmp_path):
    started = time.monotonic()
    r = sweep("demo", str(tmp_path / "demo"), timeout=DEMO_BUDGET_S + 30)
    took = time.monotonic() - started
    assert took < DEMO_BUDGET_S, f"sweep demo took {took:.1f}s"
    assert "next:" in r.stdout and "Traceback" not in r.stderr
    campaign = tmp_path / "demo" / "campaign"
    st = status_json(campaign)
    ended = outcomes(st)
    assert ended["fix-clamp"] == ("verified", None)
    assert ended["no-tests"] == ("blocked", "construction_failed")
    assert ended["passes-before"][0] == "generated_unverified"
    assert ended["flaky-test"] == ("generated_unverified", "gates_failed")
    assert "gpu-kernel" not in ended and st["counts"]["queued"] == 1
    assert record(campaign, "gpu-kernel").hold_reason.startswith("needs 1 GPU, lane gpu has 0: never admitted")
    assert "[scheduler.local] gpu_slots" in record(campaign, "gpu-kernel").hold_reason
    text = sweep("status", "--campaign", str(campaign)).stdout
    held = next(line for line in text.splitlines() if line.strip().startswith("gpu-kernel"))
    assert "needs 1 GPU, lane gpu has 0" in held
    check_flaky_gates(campaign)
    # report.md names the revisions folder only where a repair made one
    assert not (run_dir(campaign, "fix-clamp") / "revisions").exists()
    assert "revisions/" not in (run_dir(campaign, "fix-clamp") / "report.md").read_text()
    # the empty solution already passes the test of passes-before: that is why it is refused
    ev = json.loads((run_dir(campaign, "passes-before") / "evidence" / "gates-r0001.json").read_text())
    assert ev["gates"]["empty"]["rewards"] == [1.0, 1.0] and ev["gates"]["empty"]["ok"] is False
    assert ended["passes-before"] == ("generated_unverified", "passes_before_fix")
    print(f"sweep demo took {took:.1f}s", file=sys.stderr)


@pytest.mark.slurm
def test_the_demo_panel_through_sbatch_on_the_test_cluster(slurm_cluster, tmp_path):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    plan = build_panel(tmp_path / "demo", scheduler={"backend": "slurm", "lanes": LANES})
    campaign = tmp_path / "demo" / "campaign"
    sweep("init", str(plan), "--campaign", str(campaign), env=env)
    st = tick_until_done(campaign, env=env, timeout=240, pause=0.5)
    ended = outcomes(st)
    assert ended["fix-clamp"] == ("verified", None)
    assert ended["no-tests"] == ("blocked", "construction_failed")
    assert ended["passes-before"][0] == "generated_unverified"
    assert ended["flaky-test"] == ("generated_unverified", "gates_failed")
    # the test cluster has 4 (fake) GPUs: the GPU run goes to the gpu partition and is verified
    assert ended["gpu-kernel"] == ("verified", None)
    gpu = record(campaign, "gpu-kernel")
    assert gpu.lane == "gpu" and gpu.gpus == 1
    script = (run_dir(campaign, "gpu-kernel") / "logs" / f"job-{gpu.submit_token}.sbatch").read_text()
    assert "--partition=gpu" in script and "gpu:1" in script
    for run_id in ("fix-clamp", "no-tests", "passes-before", "flaky-test"):
        rec = record(campaign, run_id)
        assert rec.lane == "cpu" and rec.job_id.isdigit() and rec.attempts == 0, rec
    check_flaky_gates(campaign)
