"""isolation = "bwrap" is required: with a bubblewrap that cannot start (user namespaces off, as on
some nodes) the run parks with the reason in `sweep status`, and nothing runs unsandboxed."""
from __future__ import annotations

import os
import stat

from runstate.models import RunState
from sweep.harbor.samples import make_verified_pr
from tests.campaigns import status_json, sweep, write_plan
from tests.fakes.runs import candidate, local_plan, record, wait_until

BROKEN_BWRAP = "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"


def test_broken_bwrap_parks_the_run_with_the_reason_and_runs_nothing(targets):
    root = targets.root / "isolation"
    fake_bin = root / "bin"
    fake_bin.mkdir(parents=True)
    (fake_bin / "bwrap").write_text(BROKEN_BWRAP)
    os.chmod(fake_bin / "bwrap", stat.S_IRWXU)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}"}
    src = make_verified_pr(root / "repos", "mathx")
    plan = local_plan([candidate("pr", src)])
    camp = root / "camp"
    init = sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp), env=env)
    assert "isolation = \"bwrap\" is required but unusable" in init.stderr

    sweep("tick", "--campaign", str(camp), env=env)
    wait_until("the run to park", lambda: (r := record(camp, "pr")) is not None and r.state is RunState.queued
               and r.parked_role is not None, 60)
    rec = record(camp, "pr")
    assert "bwrap" in rec.last_error and "configuration error" in rec.last_error
    assert rec.attempts == 0                      # a config problem is not the PR's fault
    run = camp / "runs" / "pr"
    assert not (run / "sessions").exists() and not (run / "work").exists()   # nothing ran at all
    status = sweep("status", "--campaign", str(camp), env=env).stdout
    assert "No permissions to create new namespace" in status
    st = status_json(camp, env=env)
    assert st["isolation"] == "bwrap" and st["counts"]["queued"] == 1


def test_isolation_none_is_said_in_status(targets):
    root = targets.root / "unsandboxed"
    root.mkdir()
    src = make_verified_pr(root / "repos", "mathx")
    plan = local_plan([candidate("pr", src)], isolation="none")
    camp = root / "camp"
    init = sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp))
    assert "UNSANDBOXED" in init.stderr
    assert "UNSANDBOXED" in sweep("status", "--campaign", str(camp)).stdout


def test_isolation_auto_is_refused_by_init(targets):
    root = targets.root / "auto"
    root.mkdir()
    src = make_verified_pr(root / "repos", "mathx")
    plan = local_plan([candidate("pr", src)], isolation="auto")
    done = sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(root / "camp"), check=False)
    assert done.returncode != 0 and "isolation" in done.stderr and "removed" in done.stderr
