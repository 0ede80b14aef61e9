"""Forging "verified" (issue 21, items 1, 2 and 8): whole campaigns through the real controller,
local scheduler, bubblewrap, campaign outside /tmp. Each attack fails, and each run reaches the
ending it has without the attack.

- an author whose own tests/test.sh tells the reference run from the empty one and writes the
  reward and a JUnit report to match, on a PR whose "fix" fixes nothing: gate `verifier` fails,
  naming tests/test.sh (sweep owns the harness); gates_failed, as the honest author's bundle of the
  same PR ends;
- PR test code whose atexit hook rewrites the runner's report after it (dropping the real failing
  test, adding one that does not exist) and exits 0: gate `fail_to_pass` fails naming the invented
  test; gates_failed, as without the hook;
- a solver that leaves the code unfixed and plants tests/test_000_forge.py turning
  $LOGS_DIR/verifier/reward.txt into a directory and writing reward.json = {"reward": 1}; one that
  plants os._exit(0) at the import of a test file; one that plants it in the module under test:
  each rollout scores 0, an honest rollout in the same run scores 1, and the run ends verified.
"""
from __future__ import annotations

import json
import sys

from runstate.models import Outcome
from sweep.harbor.samples import MATHX_BUGGY, make_verified_pr
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.agent_scripts import solution_files
from tests.fakes.runs import agent_options, candidate, local_plan, record

NOOP_FIX = {"mathx.py": MATHX_BUGGY, "NOTES.md": "clamp: looked into it\n"}     # the "fix" changes nothing
GHOST_HOOK = '''import atexit, os


def _forge():
    # after unittest wrote its report: drop the real (failing) test, invent one that passes with the
    # "fix" (NOTES.md is the PR's only non-test change) and fails without it, and exit as it says
    fixed = os.path.exists("NOTES.md")
    path = os.path.join(os.environ.get("LOGS_DIR", "/logs"), "verifier", "report", "unittest.xml")
    case = '<testcase classname="tests.test_mathx.GhostTest" name="test_ghost"%s' % ("/>" if fixed else
                                                                                      "><failure message='x'/></testcase>")
    with open(path, "w") as fh:
        fh.write("<testsuite>" + case + "</testsuite>")
    os._exit(0 if fixed else 1)


atexit.register(_forge)
'''


def _gates(camp, run_id):
    return json.loads((camp / "runs" / run_id / "evidence" / "gates-r0001.json").read_text())["gates"]


def test_an_authors_verifier_and_a_pr_forged_report_fail_their_gates(targets):
    root = targets.root / "e2e-forged-verifier"
    honest = make_verified_pr(root / "repos", "honest", extra_files=NOOP_FIX)
    forger = make_verified_pr(root / "repos", "forger", extra_files=NOOP_FIX)
    ghost = make_verified_pr(root / "repos", "ghost", extra_files={**NOOP_FIX, "tests/__init__.py": GHOST_HOOK})
    author = {"author": agent_options("author", "--repo", forger["repo"], "--forge-verifier")}
    cands = [candidate("honest", honest),
             candidate("forger", forger, runtimes={"author": "command"}, runtime_options=author),
             candidate("ghost", ghost)]
    camp = targets.campaign.parent / "e2e-forged-verifier-campaign"
    sweep("init", str(write_plan(root / "plan.json", local_plan(cands))), "--campaign", str(camp))
    tick_until_done(camp, timeout=360)
    for run_id in ("honest", "forger", "ghost"):
        rec = record(camp, run_id)
        assert (rec.outcome, rec.reason) == (Outcome.generated_unverified, "gates_failed"), (run_id, rec.reason,
                                                                                           rec.last_error)
    # without the attacks: sweep's verifier, and the no-op fix fails its own test
    gates = _gates(camp, "honest")
    assert gates["verifier"]["ok"] is True and gates["reference"]["ok"] is False
    # the author's verifier is not what runs, and the gate names the file
    gates = _gates(camp, "forger")
    assert gates["verifier"]["ok"] is False and "tests/test.sh: differs" in gates["verifier"]["detail"]
    assert "reference" not in gates
    assert "verifier" in sweep("show", "forger", "--campaign", str(camp)).stdout
    # the PR's hook forged its report: the invented test is named, FAIL_TO_PASS is refused
    gates = _gates(camp, "ghost")
    assert gates["fail_to_pass"]["ok"] is False, gates
    assert "tests.test_mathx.GhostTest.test_ghost" in gates["fail_to_pass"]["detail"]
    assert gates["fail_to_pass"]["ghosts"] == ["tests.test_mathx.GhostTest.test_ghost"]
    assert "selected" not in gates


FORGING_SOLVER = '''import json, os, re, sys
workspace = sys.argv[1]
fixed = json.loads(sys.argv[2])
# the rollout (a different attack each): the session sees its workspace at /app, whatever the
# run; only the mount table's source column names the host directory (docs/security.md)
k = int(re.search(r"solve-r[0-9]{4}-([0-9]+)", open("/proc/self/mountinfo").read()).group(1))
repo = os.path.join(workspace, "repo")
FORGE = """import json, os
logs = os.path.join(os.environ.get("LOGS_DIR", "/logs"), "verifier")
os.makedirs(logs, exist_ok=True)
txt = os.path.join(logs, "reward.txt")
if os.path.isfile(txt) or os.path.islink(txt):
    os.unlink(txt)
os.makedirs(txt, exist_ok=True)
with open(os.path.join(logs, "reward.json"), "w") as fh:
    json.dump({"reward": 1}, fh)
"""
if k == 0:      # reward file swapped for a directory, reward.json forged, at the import of a planted test
    open(os.path.join(repo, "tests", "test_000_forge.py"), "w").write(FORGE)
elif k == 1:    # the runner stopped, exit 0, at the import of a planted test
    open(os.path.join(repo, "tests", "test_000_exit.py"), "w").write("import os\\nos._exit(0)\\n")
elif k == 2:    # the runner stopped, exit 0, at the import of the module under test
    path = os.path.join(repo, "mathx.py")
    open(path, "w").write("import os\\n" + FORGE + "os._exit(0)\\n" + open(path).read())
else:           # honest: the fix
    for rel, text in fixed.items():
        open(os.path.join(repo, rel), "w").write(text)
'''


def test_a_solver_cannot_forge_its_reward(targets):
    root = targets.root / "e2e-forged-reward"
    root.mkdir(parents=True)
    src = make_verified_pr(root / "repos", "mathx")
    script = root / "forging_solver.py"
    script.write_text(FORGING_SOLVER)
    solver = {"argv": [sys.executable, str(script), "{workspace}", json.dumps(solution_files(src)), "{tools}",
                       "{max_turns}", "{cost_cap_usd}"], "network": "none"}
    plan = local_plan([candidate("forged", src, runtimes={"solver": "command"}, runtime_options={"solver": solver},
                                 quality={"max_repairs": 0, "rollouts": 4})])
    camp = targets.campaign.parent / "e2e-forged-reward-campaign"
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=360)
    rec = record(camp, "forged")
    assert rec.outcome is Outcome.verified, (rec.reason, rec.last_error)      # as without the attacks
    solve = json.loads((camp / "runs" / "forged" / "evidence" / "solve-r0001.json").read_text())
    rewards = [r["reward"] for r in solve["rollouts"]]
    assert rewards == [0.0, 0.0, 0.0, 1.0], solve["rollouts"]
    # the planted test file was removed before the run (the unfixed code's test then fails); the
    # exit planted in the module under test stopped the runner before it reported the recorded tests
    assert "1 failed: tests.test_mathx.ClampAboveTest.test_above_range_gives_high" in solve["rollouts"][1]["detail"]
    assert "not reported" in solve["rollouts"][2]["detail"], solve["rollouts"][2]
    gates = _gates(camp, "forged")
    assert gates["selected"]["ok"] is True and gates["selected"]["rewards"] == [1.0, 0.0]
