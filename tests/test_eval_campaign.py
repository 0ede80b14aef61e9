"""An evaluation end to end on this machine: the demo's verified task exported as a Harbor dataset
(`sweep init` + `sweep run` + `sweep export` of the demo's fix-clamp PR), two command-solver arms (one
writes the fix, one changes nothing) x 3 repeats, and the report against a hand computation (a
cell's controller killed with SIGKILL is tests/test_eval_cells.py's)."""
from __future__ import annotations

import json
import sys
import tomllib

import pytest

from sweep.demo import build_panel
from sweep.tomlw import dumps
from tests.campaigns import sweep

FIX = """import os, pathlib, sys
ws, task = pathlib.Path(sys.argv[1]), pathlib.Path(os.environ["TASK_DIR"])
# blind: neither the task's tests nor its solution is in reach of the solver
if (task / "solution").exists() or (task / "tests").exists() or (ws / "tests").exists() \\
        or "ClampAboveTest" in "".join(f.read_text() for f in ws.rglob("*.py")):
    sys.exit(3)
p = ws / "repo" / "mathx.py"
p.write_text(p.read_text().replace("        return low\\n    return value", "        return high\\n    return value"))
"""


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    plan_path = build_panel(root / "demo")
    plan = tomllib.loads(plan_path.read_text())
    plan["candidates"] = [c for c in plan["candidates"] if c["id"] == "fix-clamp"]
    # the dataset is what matters here, not the depth of its verification: no mutants, no rollouts
    plan["defaults"]["quality"].update(max_mutants=0, rollouts=0, gate_repeats=1)
    plan_path.write_text(dumps(plan))
    sweep("init", str(plan_path), "--campaign", str(root / "gen"))
    sweep("run", "--campaign", str(root / "gen"), timeout=120)
    sweep("export", "--campaign", str(root / "gen"), str(root / "ds"))
    (root / "fix.py").write_text(FIX)
    (root / "eval.toml").write_text(f"""
name = "demo-eval"
dataset = "ds"
repeats = 3
seed = 7

[[arms]]
name = "fixer"
runtime = "command"
runtime_options = {{ argv = ["{sys.executable}", "{root / 'fix.py'}", "{{workspace}}"], network = "none", env = {{ TASK_DIR = "{root / 'ds' / 'fix-clamp'}" }} }}
budget = {{ wall_s = 120 }}

[[arms]]
name = "idle"
runtime = "command"
runtime_options = {{ argv = ["true"], network = "none" }}
""")
    camp = root / "camp"
    out = sweep("eval", "init", str(root / "eval.toml"), "--campaign", str(camp)).stdout
    assert "created" in out and "6 cells (1 tasks x 2 arms x 3 repeats)" in out
    assert "unchanged" in sweep("eval", "init", str(root / "eval.toml"), "--campaign", str(camp)).stdout
    assert "ran 6 cells (0 had ended before)" in sweep("eval", "run", "--campaign", str(camp), timeout=180).stdout
    before = {c: (camp / "cells" / c / "result.json").read_bytes() for c in ("c00000", "c00001")}
    rerun = sweep("eval", "run", "--campaign", str(camp), timeout=60).stdout
    return {"root": root, "camp": camp, "before": before, "rerun": rerun}


def test_every_cell_ends_with_the_reward_its_arm_implies(evaluation):
    camp = evaluation["camp"]
    manifest = json.loads((camp / "manifest.json").read_text())
    results = [json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text()) for c in manifest["cells"]]
    assert [(r["arm"], r["reward"]) for r in results] == \
        [(c["arm"], 1.0 if c["arm"] == "fixer" else 0.0) for c in manifest["cells"]]
    assert all(r["manifest_sha256"] == json.loads((camp / "eval.json").read_text())["manifest_sha256"] for r in results)
    assert all(r["digest"].startswith("sha256:") and r["session_status"] == "ok" for r in results)
    assert not any((camp / "cells" / c["cell_id"] / "work").exists() for c in manifest["cells"])
    # the fixer exits 3 (a failed session, reward 0) if it can reach the task's tests or solution
    assert all(r["detail"].startswith("reward 1") for r in results if r["arm"] == "fixer")


def test_a_second_run_repeats_no_finished_cell(evaluation):
    camp = evaluation["camp"]
    assert "ran 0 cells (6 had ended before)" in evaluation["rerun"]
    # the cells are the campaign's runs: `sweep status` counts them, and points at the evaluation's report
    status = sweep("status", "--campaign", str(camp))
    assert "verified 6" in status.stdout and "sweep eval report --campaign" in status.stdout + status.stderr
    for cell, data in evaluation["before"].items():
        assert (camp / "cells" / cell / "result.json").read_bytes() == data


def test_report_matches_a_hand_computation(evaluation):
    camp = evaluation["camp"]
    report = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json").stdout)
    arms = {a["arm"]: a for a in report["arms"]}
    assert report["ended"] == report["cells"] == 6
    # fixer 3/3: Wilson low = 3 / (3 + 1.96^2) = .4385; idle 0/3: high = 1.96^2 / (3 + 1.96^2) = .5615
    assert arms["fixer"]["solved"] == 3 and arms["fixer"]["ci95"] == [pytest.approx(0.43850, abs=1e-4), 1.0]
    assert arms["idle"]["solved"] == 0 and arms["idle"]["ci95"] == [0.0, pytest.approx(0.56150, abs=1e-4)]
    assert arms["fixer"]["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert arms["idle"]["pass_at_k"] == {"1": 0.0, "2": 0.0, "3": 0.0}
    assert arms["fixer"]["cost_per_solved_usd"] is None         # the command runtime reports no cost
    (paired,) = report["paired"]
    assert (paired["tasks"], paired["first_only"], paired["second_only"]) == (1, 1, 0)
    assert paired["p_value"] == 1.0 and paired["effect"] == 1.0   # one discordant task: 2 * 1/2, capped at 1
    assert report["solved_by"] == {"fix-clamp": ["fixer"]}
    text = sweep("eval", "report", "--campaign", str(camp)).stdout
    assert "fixer vs idle" in text and "[0.44, 1.00]" in text


def test_a_changed_plan_needs_a_new_directory(evaluation):
    root = evaluation["root"]
    changed = root / "eval2.toml"
    changed.write_text((root / "eval.toml").read_text().replace("seed = 7", "seed = 8"))
    r = sweep("eval", "init", str(changed), "--campaign", str(evaluation["camp"]), check=False)
    assert r.returncode == 2 and "new campaign directory" in r.stderr


def test_an_arms_budget_and_instructions_reach_its_session(evaluation):
    """wall_s stops the session (a timeout scores 0), max_turns and max_usd reach the runtime's
    template, instructions follow the task's instruction in the prompt."""
    root = evaluation["root"]
    (root / "bounded.toml").write_text("""
name = "bounded"
dataset = "ds"
seed = 1

[[arms]]
name = "sleeper"
runtime = "command"
runtime_options = { argv = ["sleep", "30", "{max_turns}", "{cost_cap_usd}"], network = "none" }
instructions = "Keep the change small."
budget = { wall_s = 2, max_turns = 7, max_usd = 0.5 }
""")
    camp = root / "bounded"
    sweep("eval", "init", str(root / "bounded.toml"), "--campaign", str(camp))
    sweep("eval", "run", "--campaign", str(camp), timeout=60)
    result = json.loads((camp / "cells" / "c00000" / "result.json").read_text())
    assert result["reward"] == 0.0 and result["session_status"] == "timeout" and result["wall_s"] < 20
    # its Harbor trial: reward 0 with Harbor's own AgentTimeoutError (whose policy keeps the reward valid)
    trial = json.loads((camp / "jobs" / "bounded" / "fix-clamp__c00000" / "result.json").read_text())
    assert trial["verifier_result"] == {"rewards": {"reward": 0.0}} and trial["verifier"] is None
    assert trial["exception_info"]["exception_type"] == "AgentTimeoutError"
    session = camp / "cells" / "c00000" / "sessions" / "0001-solver"
    assert json.loads((session / "argv.json").read_text())["argv"][-2:] == ["7", "0.5"]
    prompt = (session / "prompt.md").read_text()
    assert prompt.startswith((root / "ds" / "fix-clamp" / "instruction.md").read_text())
    assert prompt.endswith("\n\nKeep the change small.")
