"""isolation = "bwrap" is required: with a bubblewrap that cannot start (user namespaces off, as on
some nodes) or none installed, the run parks with the reason in `sweep status`, and nothing runs
unsandboxed: no session, no trial, and for the real agent CLIs not one request to the model."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from runstate.models import RunState
from sweep.harbor.samples import make_verified_pr
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY
from tests.campaigns import status_json, sweep, write_plan
from tests.fakes.anthropic_api import FakeAnthropic, Script
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.openai_api import Script as CodexScript
from tests.fakes.runs import candidate, local_plan, record, wait_until

BROKEN_BWRAP = "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
CASES = [("broken", "oracle"), ("broken", "claude-code"), ("broken", "codex"), ("missing", "oracle")]


def path_without_bwrap(root: Path, broken: bool) -> str:
    """A PATH whose bwrap is broken (a script that fails as bwrap does without user namespaces), or
    one with every program of the real PATH but bwrap (links in one directory)."""
    fake_bin = root / "bin"
    fake_bin.mkdir(parents=True)
    if broken:
        (fake_bin / "bwrap").write_text(BROKEN_BWRAP)
        os.chmod(fake_bin / "bwrap", stat.S_IRWXU)
        return f"{fake_bin}:{os.environ['PATH']}"
    for d in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = fake_bin / name
            if name != "bwrap" and not target.exists() and os.access(os.path.join(d, name), os.X_OK):
                target.symlink_to(os.path.join(d, name))
    assert shutil.which("bwrap", path=str(fake_bin)) is None
    return str(fake_bin)


@pytest.mark.parametrize("how,runtime", CASES, ids=[f"{h}-{r}" for h, r in CASES])
def test_unusable_bwrap_parks_the_run_with_the_reason_and_runs_nothing(targets, how, runtime):
    if runtime in ("claude-code", "codex") and shutil.which("claude" if runtime == "claude-code" else runtime) is None:
        pytest.skip(f"the {runtime} CLI is not installed (.ci/run installs it)")
    root = targets.root / f"isolation-{how}-{runtime}"
    env = {"PATH": path_without_bwrap(root, how == "broken"), "ANTHROPIC_API_KEY": FAKE_KEY,
           "OPENAI_API_KEY": "sk-openai-fake-isolation"}
    why = "No permissions to create new namespace" if how == "broken" else "bubblewrap (bwrap) is not installed"
    src = make_verified_pr(root / "repos", "mathx")
    fake, openai = FakeAnthropic(), FakeOpenAI()
    try:
        runtimes, options = {}, {}
        if runtime == "claude-code":     # every role an agent CLI: a request would mean something ran
            for role in ("author", "reviewer", "solver"):
                fake.script(role, Script(steps=[]))
                runtimes[role] = runtime
                options[role] = {"base_url": fake.url(role), "max_retries": 0, "model": "claude-sonnet-4-5"}
        elif runtime == "codex":
            openai.script("solver", CodexScript(steps=[]))
            runtimes["solver"] = runtime
            options["solver"] = {"base_url": openai.url("solver"), "max_retries": 0, "model": "gpt-5",
                                 "prices": {"input_per_mtok": 1.25, "output_per_mtok": 10.0}}
        plan = local_plan([candidate("pr", src, runtimes=runtimes, runtime_options=options)], secrets=ENV_SECRETS)
        camp = root / "camp"
        plan_file = write_plan(root / "plan.json", plan)
        if runtime == "oracle":
            init = sweep("init", str(plan_file), "--campaign", str(camp), env=env)
            assert "isolation = \"bwrap\" is required but unusable" in init.stderr
        else:
            # init checks that each agent CLI runs inside the sandbox, so here it refuses outright ...
            refused = sweep("init", str(plan_file), "--campaign", str(camp), env=env, check=False)
            assert refused.returncode == 2 and "does not run inside the sandbox" in refused.stderr
            assert f"candidates.0.runtimes.{'author' if runtime == 'claude-code' else 'solver'}" in refused.stderr
            assert not camp.exists()
            # ... and a node whose user namespaces are off is met only by the controller: init where
            # bwrap works (a login node), then every tick and controller where it does not
            sweep("init", str(plan_file), "--campaign", str(camp), env={k: v for k, v in env.items() if k != "PATH"})

        sweep("tick", "--campaign", str(camp), env=env)
        wait_until("the run to park", lambda: (r := record(camp, "pr")) is not None and r.state is RunState.queued
                   and r.parked_role is not None, 60)
    finally:
        fake.close()
        openai.close()
    rec = record(camp, "pr")
    assert "bwrap" in rec.last_error and "configuration error" in rec.last_error
    assert rec.attempts == 0                      # a config problem is not the PR's fault
    run = camp / "runs" / "pr"
    assert not (run / "sessions").exists() and not (run / "work").exists()   # nothing ran at all
    assert fake.requests == [] and openai.requests == [], "an agent CLI reached its model"
    status = sweep("status", "--campaign", str(camp), env=env).stdout
    assert why in status
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
