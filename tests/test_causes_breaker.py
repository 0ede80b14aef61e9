"""Causes, not codes, and a campaign that stops itself (issue 28).

Real campaigns on the local backend (real git PRs from sweep's samples, the oracle roles, the
sandboxed gates): every ending carries a cause code of runstate/causes.py with a one-line detail,
shown by status, show, report.md and --json; a campaign whose test command cannot run trips the
circuit breaker after `breaker.after` runs in a row and admits nothing more until
`sweep undrain --ack CAUSE`.
"""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from runstate import run_dir
from runstate.breaker import acknowledge, note_result, read_breaker, tripped
from runstate.causes import CAUSES, DEFAULT_BREAKER_CAUSES
from sweep.controller.causes import cause_of_gates
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import demo_copy, status_json, sweep, write_plan


def _plan(root: Path, candidates: list[dict], **extra) -> Path:
    plan = {"name": "causes", "target_verified": 10_000, "max_parallel": 1, "max_attempts": 2,
            "defaults": {"provider": "local", "quality": {"max_repairs": 1, "gate_repeats": 2}},
            "scheduler": {"backend": "local"}, "candidates": candidates, **extra}
    return write_plan(root / "plan.json", plan)


def _distinct_heads(repo: Path, head: str, n: int) -> list[str]:
    """n branches, each one more commit (no change) on the PR's head: n different PRs, one git process."""
    sha = subprocess.run(["git", "rev-parse", head], cwd=repo, check=True, capture_output=True,
                         text=True).stdout.strip()
    stream = "".join(f"commit refs/heads/pr-{i:04d}\ncommitter t <t@example.invalid> {1700000000 + i} +0000\n"
                     f"data 6\npr {i:02d}\nfrom {sha}\n\n" for i in range(n))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, check=True, input=stream.encode(),
                   capture_output=True)
    return [f"pr-{i:04d}" for i in range(n)]


@pytest.fixture(scope="module")
def broken_campaign():
    """1,000 candidates whose test command does not exist, the breaker at 3 runs."""
    root = Path(tempfile.mkdtemp(prefix="sweep-breaker-", dir="/var/tmp"))
    src = make_pr_repo(root / "repos", "verified", name="fix")
    heads = _distinct_heads(Path(src["repo"]), src["head"], 1000)
    cands = [{"id": f"c-{i:04d}", "repo": src["repo"], "base": src["base"], "head": head,
              "title": src["title"], "body": src["body"],
              "options": {"test_command": "nosuch-test-runner --all"}} for i, head in enumerate(heads)]
    camp = root / "camp"
    sweep("init", str(_plan(root, cands, breaker={"after": 3})), "--campaign", str(camp), timeout=300)
    run = sweep("run", "--campaign", str(camp), "--interval", "0.3", "--timeout", "600", timeout=700, check=False)
    return camp, run


def test_a_broken_test_command_stops_the_campaign_before_anything_is_spent(broken_campaign):
    camp, run = broken_campaign
    assert run.returncode == 0, run.stderr
    st = status_json(camp)
    # the first run's readiness check (the test command on the base checkout) parked it before any
    # session; one such park trips the breaker, so no other run was admitted
    assert st["counts"] == {"queued": 1000, "active": 0, "ended": 0}
    assert st["spend"]["spent_usd"] == 0
    assert st["breaker"] and "test_command_not_found in lane cpu, 1 run in a row (c-0000)" in st["breaker"]
    assert "undrain --ack test_command_not_found" in st["breaker"]
    assert "circuit breaker" in run.stdout and "next: fix what the cause names" in run.stdout
    text = sweep("status", "--campaign", str(camp)).stdout
    assert "admission stopped: circuit breaker: test_command_not_found" in text
    rec = json.loads((run_dir(camp, "c-0000") / "state.json").read_text())
    assert rec["cause"] == "test_command_not_found" and "nosuch-test-runner" in rec["cause_detail"]
    assert rec["attempts"] == 0
    assert sweep("show", "c-0000", "--campaign", str(camp)).stdout.splitlines()[0].startswith(
        "cause (last failure): test_command_not_found")
    # the tick itself admits nothing more while it stands
    sweep("tick", "--campaign", str(camp))
    assert status_json(camp)["counts"] == {"queued": 1000, "active": 0, "ended": 0}
    assert not (run_dir(camp, "c-0001") / "sessions").exists()


def test_undrain_ack_needs_the_right_cause_then_admission_resumes(broken_campaign):
    camp, _ = broken_campaign
    r = sweep("undrain", "--ack", "no_tests_collected", "--campaign", str(camp), check=False)
    assert r.returncode != 0 and "not 'no_tests_collected'" in r.stderr and "--ack test_command_not_found" in r.stderr
    r = sweep("undrain", "--ack", "test_command_not_found", "--campaign", str(camp))
    assert "circuit breaker acknowledged: test_command_not_found" in r.stdout
    assert "cooldown ended for author" in r.stdout
    assert status_json(camp)["breaker"] is None
    # admission resumes: a canary goes first, meets the same broken command and trips it again
    run = sweep("run", "--campaign", str(camp), "--interval", "0.3", "--timeout", "300", timeout=400)
    assert "circuit breaker" in run.stdout
    st = status_json(camp)
    assert st["breaker"] and st["counts"]["active"] == 0 and st["counts"]["ended"] == 0
    acks = read_breaker(camp).value.acks
    assert acks and acks[-1]["cause"] == "test_command_not_found"
    assert st["spend"]["spent_usd"] == 0


def test_every_demo_ending_carries_its_cause(tmp_path_factory):
    camp = demo_copy(tmp_path_factory) / "campaign"
    st = status_json(camp)
    causes = {e["run_id"]: e["cause"] for e in st["ended"]}
    assert causes == {"fix-clamp": None, "no-tests": "no_test_changes", "passes-before": "passes_before_fix",
                      "flaky-test": "flaky_reference"}
    assert st["breaker"] is None                     # PR-level causes never trip the breaker
    text = sweep("status", "--all", "--campaign", str(camp)).stdout
    assert re.search(r"passes-before\s+passes_before_fix", text) and "flaky_reference (gates_failed)" in text


def _evidence(tmp_path: Path, gates: dict) -> Path:
    rdir = tmp_path / "run"
    (rdir / "evidence").mkdir(parents=True)
    (rdir / "evidence" / "gates-r0001.json").write_text(json.dumps(
        {"bundle_sha256": "0" * 64, "revision": 1, "repeats": 2, "passed": False, "gates": gates}))
    return rdir


@pytest.mark.parametrize("gates,cause", [
    ({"valid": {"ok": True}, "reference": {"ok": False, "rewards": [0.0, 0.0],
      "detail": "reward 0: bash: line 3: pytest: command not found; sweep test.sh: tests exited 127"}},
     "test_command_not_found"),
    ({"reference": {"ok": False, "rewards": [0.0, 0.0], "detail": "reward 0: collected 0 items"}},
     "no_tests_collected"),
    ({"reference": {"ok": False, "rewards": [0.0, 0.0], "detail": "reward 0: AssertionError"}}, "reference_fails"),
    ({"reference": {"ok": False, "rewards": [1.0, 0.0]}, "repeat": {"ok": False, "detail": "flaky"}},
     "flaky_reference"),
    ({"reference": {"ok": True, "rewards": [1.0, 1.0]}, "empty": {"ok": False, "rewards": [1.0, 1.0]}},
     "passes_before_fix"),
    ({"reference": {"ok": True, "rewards": [1.0]}, "empty": {"ok": True, "rewards": [0.0]},
      "fail_to_pass": {"ok": False, "detail": "the test runner wrote no JUnit report"}}, "no_per_test_results"),
    ({"reference": {"ok": True, "rewards": [1.0]}, "empty": {"ok": True, "rewards": [0.0]},
      "fail_to_pass": {"ok": False, "detail": "no test fails before and passes after"}}, "no_fail_to_pass"),
    ({"valid": {"ok": False, "detail": "task.toml missing"}}, "invalid_bundle"),
    ({"image": {"ok": False, "detail": "the task's image: build failed"}}, "image_build_failed"),
])
def test_the_failed_gate_names_the_cause(tmp_path, gates, cause):
    assert cause_of_gates(_evidence(tmp_path, gates))[0] == cause
    assert cause in CAUSES


def test_breaker_counts_distinct_runs_in_a_row_per_lane(tmp_path):
    c = tmp_path
    kw = {"after": 3, "causes": DEFAULT_BREAKER_CAUSES}
    assert note_result(c, lane="cpu", run_id="a", cause="no_tests_collected", **kw) is None
    assert note_result(c, lane="cpu", run_id="a", cause="no_tests_collected", **kw) is None   # same run again
    assert note_result(c, lane="gpu", run_id="g", cause="no_tests_collected", **kw) is None   # another lane
    assert note_result(c, lane="cpu", run_id="b", cause="no_tests_collected", **kw) is None
    assert note_result(c, lane="cpu", run_id="v", cause=None, **kw) is None                   # verified: reset
    for rid in ("c", "d"):
        assert note_result(c, lane="cpu", run_id=rid, cause="no_tests_collected", **kw) is None
    assert note_result(c, lane="cpu", run_id="e", cause="passes_before_fix", **kw) is None    # a PR cause: reset
    assert tripped(c) is None
    for rid in ("f", "g2"):
        note_result(c, lane="cpu", run_id=rid, cause="test_command_not_found", **kw)
    trip = note_result(c, lane="cpu", run_id="h", cause="test_command_not_found", **kw)
    assert trip is not None and trip.count == 3 and trip.runs == ["f", "g2", "h"]
    assert tripped(c) == trip
    assert note_result(c, lane="cpu", run_id="i", cause="test_command_not_found", **kw) is None  # already tripped
    assert acknowledge(c, "test_command_not_found").cause == "test_command_not_found"
    assert tripped(c) is None
    assert note_result(c, lane="cpu", run_id="j", cause="test_command_not_found", after=0, causes=kw["causes"]) is None


def test_an_unreadable_breaker_file_stops_admission_until_acknowledged(tmp_path):
    (tmp_path / "breaker.json").write_text("{torn")
    trip = tripped(tmp_path)
    assert trip is not None and trip.cause == "unreadable_breaker"
    acknowledge(tmp_path, "unreadable_breaker")
    assert tripped(tmp_path) is None


def test_the_plan_refuses_an_unknown_breaker_cause(tmp_path):
    src = make_pr_repo(tmp_path / "repos", "verified", name="fix")
    cands = [{"id": "c", "repo": src["repo"], "base": src["base"], "head": src["head"]}]
    plan = _plan(tmp_path, cands, breaker={"after": 2, "causes": ["tests_on_fire"]})
    r = sweep("init", str(plan), "--campaign", str(tmp_path / "camp"), check=False)
    assert r.returncode == 2 and "breaker.causes" in r.stderr and "tests_on_fire" in r.stderr
