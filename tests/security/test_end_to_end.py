"""Whole runs through the real controller (local scheduler, real sandbox), campaign outside /tmp:
a PR whose tests attack the host at gate time still ends verified with nothing leaked, and a
solver that leaves a FIFO in its repository ends its rollout with the reason instead of crashing
the controller."""
from __future__ import annotations

import json
import sys

from runstate.models import Outcome
from sweep.harbor.samples import make_verified_pr
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, events, local_plan, record
from tests.security.conftest import HOSTILE
from tests.security.test_gate import WRAPPER

FIFO_SOLVER = "import os, sys\nos.mkfifo(os.path.join(sys.argv[1], 'repo', 'pipe'))\n"


def test_a_hostile_pr_ends_verified_and_leaks_nothing(targets):
    root = targets.root / "e2e-hostile"
    src = make_verified_pr(root / "repos", "hostile", extra_files={
        "tests/hostile_probe.py": HOSTILE.read_text(),
        "tests/test_attack.py": WRAPPER.format(arg=json.dumps(targets.argv_json(own_run="hostile")))})
    camp = targets.campaign.parent / "e2e-campaign"
    plan = local_plan([candidate("hostile", src)])
    sweep("init", str(write_plan(root.with_suffix(".plan.json"), plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=240)
    rec = record(camp, "hostile")
    assert rec.outcome is Outcome.verified, (rec.reason, rec.last_error)
    assert targets.canary_found_under(camp) == []
    assert targets.nothing_connected()
    gates = json.loads((camp / "runs" / "hostile" / "evidence" / "gates-r0001.json").read_text())
    assert gates["isolation"] == "bwrap" and gates["passed"] is True
    shown = sweep("show", "hostile", "--campaign", str(camp)).stdout
    assert "isolation bwrap  network none" in shown and "UNSANDBOXED" not in shown


def test_a_fifo_left_by_the_solver_ends_the_rollout_with_the_reason(targets):
    root = targets.root / "e2e-fifo"
    root.mkdir()
    script = root / "fifo_solver.py"
    script.write_text(FIFO_SOLVER)
    src = make_verified_pr(root / "repos", "mathx")
    solver = {"argv": [sys.executable, str(script), "{workspace}", "{tools}", "{max_turns}", "{cost_cap_usd}"],
              "network": "none"}
    plan = local_plan([candidate("fifo", src, runtimes={"solver": "command"}, runtime_options={"solver": solver})])
    camp = targets.campaign.parent / "e2e-fifo-campaign"
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=240)
    rec = record(camp, "fifo")
    assert rec.outcome is Outcome.verified, (rec.reason, rec.last_error)     # as without the FIFO
    solve = json.loads((camp / "runs" / "fifo" / "evidence" / "solve-r0001.json").read_text())
    rollout = solve["rollouts"][0]
    assert rollout["reward"] == 0.0 and rollout["detail"] == "unsafe_workspace", rollout
    assert not [e for e in events(camp, "fifo") if e["kind"] == "attempt_failed"]


GATE_BOUND_TEST = '''import os
import unittest

ATTACK = {code!r}


class Exhausts(unittest.TestCase):
    def test_exhausts_a_bound(self):
        # the attacks write under repo/: a trial runs in the repository itself (REPO_DIR, the
        # container's fixed /app), so the prefix is the working directory there
        os.chdir(os.environ["REPO_DIR"])
        exec(ATTACK.replace("'repo/", "'"), {{}})
'''
# what the ending's detail says for each attack (the gate's trial names the bound it hit)
GATE_BOUND_DETAIL = {"memory": "hit its memory bound", "fork": "hit its processes bound",
                     "disk": "hit its workspace_bytes bound", "stdout": "reached the file-size bound"}


def test_prs_whose_tests_exhaust_a_bound_end_gates_failed_naming_the_bound(targets):
    """One campaign, one PR per attack (its test allocates 2 GiB, forks without end, writes 600 MB,
    prints 200 MB) under small plan bounds: each run ends `gates_failed` (the reference solution
    cannot score 1 when its tests are stopped) with the bound in the ending's detail, report.md and
    `sweep show`; the host is untouched and nothing is left running."""
    from tests.security.test_bounds import ATTACKS
    root = targets.root / "e2e-gate-bounds"
    candidates = [candidate(name, make_verified_pr(root / "repos" / name, name, extra_files={
        "tests/test_exhausts.py": GATE_BOUND_TEST.format(code=ATTACKS[name])})) for name in GATE_BOUND_DETAIL]
    limits = {"memory_mb": 256, "processes": 64, "file_mb": 64, "workspace_mb": 100, "transcript_kb": 1024,
              "tmp_mb": 64}
    plan = local_plan(candidates, limits=limits)
    camp = targets.campaign.parent / "e2e-gate-bounds-campaign"
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=420)
    for name, said in GATE_BOUND_DETAIL.items():
        rec = record(camp, name)
        assert rec.outcome is Outcome.generated_unverified and rec.reason == "gates_failed", (name, rec.reason,
                                                                                                rec.last_error)
        assert rec.attempts == 0, f"{name}: a bound hit by the PR's tests cost an attempt"
        ending = [e for e in events(camp, name) if e["kind"] == "ended"][-1]
        assert said in ending["detail"], (name, ending["detail"])
        assert said in (camp / "runs" / name / "report.md").read_text()
        assert said in sweep("show", name, "--campaign", str(camp)).stdout
    fills = sum(p.stat().st_size for p in (camp / "runs" / "disk").rglob("fill*") if p.is_file())
    assert fills < 400 << 20, f"{fills} bytes of the 600 MB fill were kept"


COMMAND_ROLLOUTS = ["memory", "fork", "disk", "big_file", "fifo", "stdout"]
COMMAND_SOLVER = '''import json, os, re, sys
ATTACKS = json.loads(sys.argv[2])
ROLLOUTS = json.loads(sys.argv[3])
workspace = sys.argv[1]
os.chdir(workspace)                                  # the attacks write under repo/
# the rollout (a different attack each): the session sees its workspace at /app, whatever the
# run; only the mount table's source column names the host directory (docs/security.md)
k = int(re.search(r"solve-r[0-9]{4}-([0-9]+)", open("/proc/self/mountinfo").read()).group(1))
exec(ATTACKS[ROLLOUTS[k]], {})
'''


def test_a_command_solver_exhausting_each_bound_ends_each_rollout_with_the_reason(targets):
    """The `command` runtime's solver in a whole campaign: one blind rollout per attack (2 GiB
    allocation, fork bomb, 600 MB of files, a 200 MB file, a FIFO, 200 MB of stdout) under the
    plan's small bounds. Each rollout ends with its bound's reason in the solve evidence (200 MB of
    stdout is kept head and tail and the session ends ok, its unchanged repository scoring 0), and
    the run ends `verified` as it would without the attacks, no attempt spent."""
    from tests.security.test_bounds import ATTACKS, EXPECTED
    root = targets.root / "e2e-command-bounds"
    root.mkdir()
    script = root / "command_solver.py"
    script.write_text(COMMAND_SOLVER)
    src = make_verified_pr(root / "repos", "mathx")
    solver = {"argv": [sys.executable, str(script), "{workspace}", json.dumps(ATTACKS), json.dumps(COMMAND_ROLLOUTS),
                       "{tools}", "{max_turns}", "{cost_cap_usd}"], "network": "none"}
    limits = {"memory_mb": 256, "processes": 64, "file_mb": 64, "workspace_mb": 100, "transcript_kb": 1024,
              "tmp_mb": 64}
    plan = local_plan([candidate("bounds", src, runtimes={"solver": "command"}, runtime_options={"solver": solver},
                                 quality={"max_repairs": 0, "rollouts": len(COMMAND_ROLLOUTS)})], limits=limits)
    camp = targets.campaign.parent / "e2e-command-bounds-campaign"
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=420)
    rec = record(camp, "bounds")
    assert rec.outcome is Outcome.verified, (rec.reason, rec.last_error)
    assert rec.attempts == 0
    solve = json.loads((camp / "runs" / "bounds" / "evidence" / "solve-r0001.json").read_text())
    got = {COMMAND_ROLLOUTS[r["rollout"]]: r for r in solve["rollouts"]}
    assert sorted(got) == sorted(COMMAND_ROLLOUTS)
    for attack in COMMAND_ROLLOUTS:
        r = got[attack]
        if attack == "stdout":
            assert r["session"] == "ok" and r["reward"] == 0.0, r
        else:
            assert r["session"] == "failed" and r["reward"] == 0.0 and r["detail"] == EXPECTED[attack], (attack, r)
    sessions = sorted((camp / "runs" / "bounds" / "sessions").glob("*-solver"))
    assert len(sessions) == len(COMMAND_ROLLOUTS)
    stdout = (sessions[COMMAND_ROLLOUTS.index("stdout")] / "stdout.txt").read_bytes()
    assert len(stdout) < 2 << 20 and b"bytes cut here" in stdout and b"END-OF-OUTPUT" in stdout
