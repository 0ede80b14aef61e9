"""A candidate repository whose git configuration, attributes and submodule try to run programs on
the host and read host paths, through a whole campaign (local backend, bubblewrap, campaign outside
/tmp), with the operator's global and system git config naming the same programs: no program runs
(every knob's program would leave a mark), no submodule is read, the run ends verified as the same
PR without them does, and the exported repository is the base commit's tree byte for byte
(`version.txt` keeps its `$Format$` placeholder: no export-subst)."""
from __future__ import annotations

from runstate.models import Outcome
from sweep.git import run_git
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, local_plan, record
from tests.gitrepos import VERSION_TEXT, hostile_git_home, make_hostile_git_pr


def test_a_hostile_git_configuration_runs_nothing_and_the_run_ends_verified(targets):
    root = targets.root / "git-knobs"
    marks = root / "marks"
    src = make_hostile_git_pr(root / "cand", marks, root / "canary-repo")
    env = hostile_git_home(root / "operator", marks)
    camp = targets.campaign.parent / "git-knobs-campaign"
    plan = local_plan([candidate("knobs", src)])
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp), env=env)
    tick_until_done(camp, env=env, timeout=300)
    rec = record(camp, "knobs")
    assert rec.outcome is Outcome.verified, (rec.reason, rec.last_error)
    assert sorted(p.name for p in marks.iterdir()) == []
    assert [p for p in camp.rglob("secret.txt")] == []                 # the file:// submodule was never read
    task_repo = camp / "runs" / "knobs" / "task" / "environment" / "repo"
    assert (task_repo / "version.txt").read_text() == VERSION_TEXT
    out = root / "export"
    sweep("export", str(out), "--campaign", str(camp), env=env)
    exported = out / "knobs" / "environment" / "repo"
    for rel in ("version.txt", ".gitattributes", "mathx.py"):
        assert (exported / rel).read_bytes() == run_git(["cat-file", "blob", f"{src['base']}:{rel}"], repo=src["repo"])
    assert sorted(p.name for p in marks.iterdir()) == []
