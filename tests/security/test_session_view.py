"""A fixed view for role sessions (issue 21, item 7): a hostile session records where it runs (its
working directory, argv, environment, the listings of its parents, everything it can read) and
looks there for the campaign's path, its parent and the run id. In the real sandbox it finds none
of them: the workspace is at /app (the task container's WORKDIR), the session's files at
/session, the oracle's inputs at /inputs, and what is handed to it (argv placeholders, inputs.json,
HOME) names those paths. Only the mount table's source column (/proc/self/mountinfo) still names
the host paths of the binds (docs/security.md says why).

- a `command` solver in a whole campaign (local backend, campaign outside /tmp): the run ends
  verified as a PR with a solver that changes nothing does, and the oracle author's and reviewer's
  inputs.json name only sandbox paths;
- an oracle solver session whose reference solution runs the probe (the oracle's own view: its
  argv, its inputs.json, its reference solution at /inputs/reference-solution).
"""
from __future__ import annotations

import getpass
import json
import sys
from pathlib import Path

from roles import load_roles_dir, manifest_sha256
from runstate.models import Outcome
from sweep.harbor.samples import make_verified_pr
from sweep.providers.local import LocalProvider
from sweep.runtimes import SessionRequest, run_session
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, local_plan, record

PROBE = Path(__file__).resolve().parent / "view_probe.py"
ROLES = Path(__file__).resolve().parents[2] / "roles"
RUN_ID = "pr-v21sessionview"
CHEAP = {"quality": {"gate_repeats": 1, "max_mutants": 0, "mutants": "report", "max_probes": 0, "rollouts": 1}}


def _hidden(*values: str) -> list[str]:
    user = getpass.getuser()
    # root is a name every sandbox's generated passwd carries: only another user's name is a leak
    return [*values, *([user] if user != "root" else [])]


def _hex(hidden: list[str]) -> str:
    return ",".join(h.encode().hex() for h in hidden)


def _probe_line(stdout: Path) -> dict:
    lines = [line for line in stdout.read_text().splitlines() if line.startswith('{"cwd"')]
    assert lines, stdout.read_text()[-2000:]
    return json.loads(lines[-1])


def test_a_command_solver_sees_a_fixed_view_in_a_whole_campaign(targets):
    root = targets.root / "session-view"
    camp = targets.campaign.parent / "session-view-campaign"
    hidden = _hidden(str(camp), str(targets.root), RUN_ID)
    solver = {"argv": [sys.executable, str(PROBE), _hex(hidden), "{workspace}", "--in={workspace}/repo",
                       "{prompt_file}", "{instructions_file}", "{tools}", "{max_turns}", "{cost_cap_usd}"],
              "network": "none"}
    src = make_verified_pr(root / "repos", "mathx")
    plan = local_plan([candidate(RUN_ID, src, runtimes={"solver": "command"}, runtime_options={"solver": solver})],
                      defaults=CHEAP)
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=300)
    rec = record(camp, RUN_ID)
    assert rec.outcome is Outcome.verified, (rec.reason, rec.last_error)      # as with any solver that changes nothing
    sessions = camp / "runs" / RUN_ID / "sessions"
    (solver_dir,) = [d for d in sessions.iterdir() if d.name.endswith("-solver")]
    seen = _probe_line(solver_dir / "stdout.txt")
    assert seen["read"] > 20, seen["read"]           # it did read: its workspace, /session, /etc, /proc
    assert seen["leaks"] == [], seen["leaks"]
    assert seen["cwd"] == "/app"
    assert seen["argv"][:4] == ["/app", "--in=/app/repo", "/session/prompt.md", "/session/instructions.md"], seen["argv"]
    assert seen["env"]["HOME"] == "/tmp/sweep-home" and seen["listings"]["/"] and "var" not in seen["listings"]["/"]
    assert sorted(seen["listings"]["/session"]) == ["instructions.md", "prompt.md"], seen["listings"]
    assert {"/app", "/session/prompt.md"} <= set(seen["mount_points"])
    # the one place the host's paths remain: the mount table's source column
    assert str(camp) in seen["mountinfo_names"]
    # what the controller reads back maps to the host: the audit saw the workspace, result.json the run
    result = json.loads((solver_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["isolation"] == "bwrap", result
    launch = json.loads((solver_dir / "argv.json").read_text())
    assert ["/app", "/session"] == [shown for _, shown in launch["view"]][:2], launch["view"]
    assert Path(launch["view"][0][0]).parent.parent == (camp / "runs" / RUN_ID / "work").resolve().parent
    # the oracle author and reviewer were handed sandbox paths only
    for role in ("author", "reviewer"):
        for session in [d for d in sessions.iterdir() if d.name.endswith(f"-{role}")]:
            inputs = (session / "inputs.json").read_text()
            for host in hidden:
                assert host not in inputs, (session.name, host, inputs[:500])
    author_inputs = json.loads(next(sessions.glob("*-author")).joinpath("inputs.json").read_text())
    assert author_inputs["source"]["repo"] == "/inputs/source-repo", author_inputs["source"]
    reviewer_inputs = json.loads(next(sessions.glob("*-reviewer")).joinpath("inputs.json").read_text())
    assert reviewer_inputs["bundle_dir"] == "/app/task", reviewer_inputs


SOLVE_SH = """#!/bin/bash
exec python3 "$(dirname "$0")/view_probe.py" {hidden} "$REPO_DIR" "$0"
"""


def test_an_oracle_session_sees_a_fixed_view(targets):
    camp = targets.campaign.parent / "oracle-view-campaign"
    run = camp / "runs" / RUN_ID
    hidden = _hidden(str(camp), str(targets.root), RUN_ID)
    solution = run / "task" / "solution"
    solution.mkdir(parents=True)
    (solution / "view_probe.py").write_text(PROBE.read_text())
    (solution / "solve.sh").write_text(SOLVE_SH.format(hidden=_hex(hidden)))
    workspace = run / "work" / "solve-r0001-0"
    (workspace / "repo").mkdir(parents=True)
    (workspace / "repo" / "code.py").write_text("x = 1\n")
    session_dir = run / "sessions" / "0001-solver"
    spec = load_roles_dir(ROLES)["solver"]
    req = SessionRequest(role=spec, manifest_sha256=manifest_sha256(ROLES / "solver.toml"), runtime="oracle",
                         runtime_options={}, workspace=workspace, session_dir=session_dir, prompt="solve it",
                         inputs={"reference_solution": str(solution)})
    result = run_session(req, LocalProvider(isolation="bwrap", kill_grace_s=1.0))
    assert result.status == "ok", (result.reason, result.evidence)
    seen = _probe_line(session_dir / "stdout.txt")
    assert seen["leaks"] == [], seen["leaks"]
    assert seen["cwd"] == "/app/repo" and seen["env"]["REPO_DIR"] == "/app/repo"
    assert seen["argv"][1] == "/inputs/reference-solution/solve.sh", seen["argv"]
    assert sorted(seen["listings"]["/session"]) == ["inputs.json", "prompt.md"], seen["listings"]
    assert sorted(seen["listings"]["/inputs"]) == ["reference-solution"], seen["listings"]
    assert json.loads((session_dir / "inputs.json").read_text()) == {"reference_solution": "/inputs/reference-solution"}
    assert str(camp) in seen["mountinfo_names"]


def test_without_a_sandbox_a_session_keeps_the_host_paths(tmp_path):
    """isolation none has no mount namespace: the workspace is where it is on the host (and every
    report says UNSANDBOXED)."""
    workspace = tmp_path / "work"
    (workspace / "repo").mkdir(parents=True)
    session_dir = tmp_path / "sessions" / "0001-solver"
    spec = load_roles_dir(ROLES)["solver"]
    argv = [sys.executable, str(PROBE), "", "{workspace}", "{tools}", "{max_turns}", "{cost_cap_usd}"]
    req = SessionRequest(role=spec, manifest_sha256=manifest_sha256(ROLES / "solver.toml"), runtime="command",
                         runtime_options={"argv": argv, "network": "none"}, workspace=workspace,
                         session_dir=session_dir, prompt="solve it", inputs={})
    result = run_session(req, LocalProvider(isolation="none", kill_grace_s=1.0))
    assert result.status == "ok", (result.reason, result.evidence)
    seen = _probe_line(session_dir / "stdout.txt")
    assert seen["cwd"] == str(workspace.resolve()) and seen["argv"][0] == str(workspace.resolve())
    assert json.loads((session_dir / "argv.json").read_text())["view"] == []
