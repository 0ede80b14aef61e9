"""Readiness on the real Slurm cluster: the check runs in the controller job's own environment
(issue 26, item 3).

The issue's case: `sweep init` from a shell with a venv active (its python3 has pytest, so init's
check passes), then ticks with the login PATH a scrontab job gets (`/usr/bin:/bin`, whose python3
has no pytest). The plan declares no [environment], so a controller job gets the tick's PATH. The
readiness check must run there, inside the job: the run parks with the cause named in `sweep
status` before its author (a paid session of the `command` runtime, reporting a cost) ever runs.
Before, every run paid for its author and ended `gates_failed`. A twin campaign of the same plan,
ticked from the venv shell, proceeds to verified: the job environment, not the plan, made the
difference.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runstate import load_record, run_dir
from tests.campaigns import status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, count, events, local_plan, wait_until
from tests.gitrepos import make_verified_pr

pytestmark = pytest.mark.slurm

VENV = Path(sys.prefix)
PYTEST = "python3 -m pytest -q"
VENV_SHELL = {"PATH": f"{VENV}/bin:/usr/bin:/bin"}      # a shell with the venv active
LOGIN = {"PATH": "/usr/bin:/bin"}                       # what a scrontab tick has (no venv)


def _system_python_has_pytest() -> bool:
    return subprocess.run(["/usr/bin/python3", "-c", "import pytest"], capture_output=True).returncode == 0


def _plan(tmp_path: Path) -> Path:
    src = make_verified_pr(tmp_path / "repos")
    # the author is a `command` session that reports a cost: a run of it is paid work
    author = agent_options("author", "--repo", src["repo"], "--test-command", PYTEST, "--cost", "0.01")
    cand = candidate("r1", {**src, "test_command": PYTEST}, runtime_options={"author": author})
    plan = local_plan([cand], defaults={"runtimes": {"author": "command"}})
    plan["scheduler"] = {"backend": "slurm", "accounting": "jobcomp",
                         "lanes": {"cpu": {"partition": "cpu", "time": "10"}}}
    return write_plan(tmp_path / "plan.json", plan)


def _init(plan: Path, d: Path, env: dict) -> str:
    r = sweep("init", str(plan), "--campaign", str(d), env={**VENV_SHELL, **env})
    return r.stderr


@pytest.mark.skipif(_system_python_has_pytest(), reason="the system python3 has pytest here")
def test_a_job_environment_without_pytest_parks_the_run_before_its_paid_author(slurm_cluster, tmp_path):
    conf = {"SLURM_CONF": str(slurm_cluster.conf)}
    plan = _plan(tmp_path)
    cron, shell = tmp_path / "cron", tmp_path / "shell"
    for d in (cron, shell):
        warned = _init(plan, d, conf)
        # init's own check ran in init's shell, where python3 is the venv's: it passed
        assert "readiness:" not in warned and "no [environment]" in warned, warned

    def parked():
        sweep("tick", "--campaign", str(cron), env={**LOGIN, **conf})
        rec = load_record(run_dir(cron, "r1")).value
        # parked (queued with the cause), or ended: without the check, it paid and failed its gates
        return rec if rec is not None and (rec.state.value == "ended" or rec.last_error) else None
    rec = wait_until("the scrontab-like campaign's run to park", parked, timeout=180, poll=1.0)
    want = "test_command_not_found: python3 (/usr/bin/python3) has no pytest in the job environment"
    assert rec.state.value == "queued" and rec.parked_role == "author" and rec.attempts == 0, rec
    assert want in rec.last_error, rec.last_error
    assert rec.job_id, "the check ran in a controller job"
    evs = events(cron, "r1")
    ready = [e for e in evs if e["kind"] == "readiness"]
    # a failure is confirmed by a second run before it parks the run
    assert len(ready) == 2 and all(want in e["detail"] for e in ready) \
        and ready[1]["detail"].startswith("confirming: "), ready
    # nothing was paid: no session started, nothing reserved or settled
    assert count(evs, "session_started") == 0, [e["kind"] for e in evs]
    spend = run_dir(cron, "r1") / "spend.json"
    ledger = json.loads(spend.read_text()) if spend.exists() else {}
    assert not ledger.get("entries"), ledger
    # `sweep status` names the cause, as a person reads it and as JSON
    text = sweep("status", "--campaign", str(cron), env={**LOGIN, **conf}).stdout
    assert "test_command_not_found" in text and "has no pytest in the job environment" in text, text
    assert want in json.dumps(status_json(cron, env={**LOGIN, **conf}))

    # the same plan, ticked from the venv shell: the job gets that PATH, and the run is verified
    st = tick_until_done(shell, env={**VENV_SHELL, **conf}, timeout=300, pause=1.0)
    assert st["outcomes"] == {"verified": 1}, json.dumps(st)[:2000]
    ready = [e for e in events(shell, "r1") if e["kind"] == "readiness"]
    assert len(ready) == 1 and ready[0]["detail"].startswith(f"ok: {VENV}/bin/python3 ran"), ready
    assert count(events(shell, "r1"), "session_started") >= 1
