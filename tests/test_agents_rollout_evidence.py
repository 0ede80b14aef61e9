"""A rollout that could not run is not evidence (issue 25, item 5): a solver session that fails
before producing a result is retried within the run's attempts and then leaves the run unverified
(`insufficient_evidence`); a solver stopped by one of its bounds scores 0. A run never ends
verified with a rollout reward of None. Whole campaigns: oracle author and reviewer, a `command`
solver, the real tick and controller on the local backend."""
from __future__ import annotations

import json
import sys

from runstate import run_dir
from runstate.models import Outcome
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, count, events, local_plan, record

BROKEN_SOLVER = "import sys; sys.stderr.write('Missing environment variable: OPENAI_API_KEY\\n'); sys.exit(1)"
SLOW_SOLVER = "import time; time.sleep(60)"


def play(tmp_path, code: str, *, walltime_role: bool = False) -> tuple:
    src = make_pr_repo(tmp_path / "repos", "verified")
    solver = {"argv": [sys.executable, "-c", code, "{tools}", "{max_turns}", "{cost_cap_usd}"], "network": "none"}
    plan = local_plan([candidate("pr-0", src, runtimes={"solver": "command"}, runtime_options={"solver": solver})],
                      max_attempts=2)
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    if walltime_role:   # the campaign's own copy of the solver's manifest decides its walltime
        manifest = d / "roles" / "solver.toml"
        text = manifest.read_text()
        manifest.write_text(text.replace(text[text.index("walltime_s"):].split("\n", 1)[0], "walltime_s = 3"))
    tick_until_done(d, timeout=240)
    return d, record(d, "pr-0")


def test_a_solver_that_cannot_run_is_retried_then_leaves_the_run_unverified(tmp_path):
    d, rec = play(tmp_path, BROKEN_SOLVER)
    assert rec.outcome is Outcome.generated_unverified, (rec.outcome, rec.reason, rec.last_error)
    assert rec.reason == "insufficient_evidence"
    evs = events(d, "pr-0")
    assert count(evs, "attempt_failed") == 1          # retried within its bounds (max_attempts = 2)
    assert count(evs, "session_started", "solve") == 2
    assert not (run_dir(d, "pr-0") / "evidence" / "solve-r0001.json").exists(), "a rollout that never ran was recorded"


def test_a_solver_stopped_by_its_walltime_scores_zero_and_the_run_is_verified(tmp_path):
    d, rec = play(tmp_path, SLOW_SOLVER, walltime_role=True)
    assert rec.outcome is Outcome.verified, (rec.outcome, rec.reason, rec.last_error)
    solve = json.loads((run_dir(d, "pr-0") / "evidence" / "solve-r0001.json").read_text())
    assert [(r["reward"], r["detail"]) for r in solve["rollouts"]] == [(0.0, "walltime")]
