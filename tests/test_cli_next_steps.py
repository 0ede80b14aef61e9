"""Small promises of the CLI: every verb names the next step, user mistakes are one line (exit 2),
counts read as English, and the demo's default directory is not left untracked in a checkout."""
from __future__ import annotations

import subprocess

from tests.campaigns import REPO, payload_plan, sweep, write_plan


def _campaign(tmp_path, n=1):
    plan = write_plan(tmp_path / "plan.json", payload_plan(n))
    camp = tmp_path / "camp"
    sweep("init", str(plan), "--campaign", str(camp))
    return camp


def test_tick_names_the_next_step_unless_quiet(tmp_path):
    camp = _campaign(tmp_path)
    assert "next: sweep status" in sweep("tick", "--campaign", str(camp)).stdout
    assert sweep("tick", "--quiet", "--campaign", str(camp)).stdout == ""


def test_report_out_to_a_directory_or_a_missing_parent_is_one_clear_line(tmp_path):
    camp = _campaign(tmp_path)
    r = sweep("report", "--campaign", str(camp), "--out", str(tmp_path), check=False)
    assert r.returncode == 2 and "is a directory" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2
    r = sweep("report", "--campaign", str(camp), "--out", str(tmp_path / "no" / "such" / "r.html"), check=False)
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    r = sweep("report", "--campaign", str(camp), "--out", str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").is_file() and "next:" in r.stdout


def test_one_run_is_one_run(tmp_path):
    camp = _campaign(tmp_path, 1)
    out = sweep("status", "--campaign", str(camp)).stdout
    assert "1 run," in out or "1 run " in out
    assert "1 runs" not in out


def test_reconcile_names_the_next_step(tmp_path):
    camp = _campaign(tmp_path)
    r = sweep("reconcile", "--campaign", str(camp))
    assert "nothing to reconcile" in r.stdout and f"next: sweep status --campaign {camp}" in r.stdout


def test_the_demo_directory_is_ignored_in_a_checkout():
    r = subprocess.run(["git", "check-ignore", "-q", "sweep-demo/campaign/state.json"], cwd=REPO)
    assert r.returncode == 0
