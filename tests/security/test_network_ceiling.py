"""A runtime asking for more network than its role's RoleSpec allows is refused before anything
runs: a clear configuration reason naming the role, the manifest field and what was asked, never an
attempt spent (real sessions, and a real controller job through the local backend)."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from roles import load_roles_dir, manifest_sha256
from runstate.errors import ConfigError
from runstate.markers import outage_path
from runstate.models import RunState
from sweep.harbor.samples import make_pr_repo
from sweep.providers.local import LocalProvider
from sweep.runtimes import SessionRequest, run_session
from tests.campaigns import sweep, write_plan
from tests.fakes.runs import agent_options, candidate, events, local_plan, record, wait_until

ROLES = Path(__file__).resolve().parents[2] / "roles"


@pytest.fixture
def root():
    d = Path(tempfile.mkdtemp(prefix="sweep-test-netceiling-", dir="/var/tmp"))
    yield d
    import shutil
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("ceiling,asked", [("none", "api"), ("none", "host"), ("api", "host")])
def test_a_session_asking_more_network_than_its_role_allows_is_refused_and_nothing_runs(root, ceiling, asked):
    spec = load_roles_dir(ROLES)["reviewer"].model_copy(update={"network": ceiling})
    run = root / "runs" / f"r-{ceiling}-{asked}"
    workspace = run / "work" / "review"
    workspace.mkdir(parents=True)
    ran = root / f"ran-{ceiling}-{asked}"
    argv = [sys.executable, "-c", f"open({str(ran)!r}, 'w').close()", "{tools}", "{max_turns}", "{cost_cap_usd}"]
    req = SessionRequest(role=spec, manifest_sha256=manifest_sha256(ROLES / "reviewer.toml"), runtime="command",
                         runtime_options={"argv": argv, "network": asked, "endpoints": ["127.0.0.1:9"]},
                         workspace=workspace, session_dir=run / "sessions" / "0001-reviewer", prompt="review",
                         inputs={})
    with pytest.raises(ConfigError) as caught:
        run_session(req, LocalProvider(isolation="bwrap"))
    text = str(caught.value)
    assert f"asks for network {asked!r}" in text and "role 'reviewer'" in text and f"at most {ceiling!r}" in text, text
    assert caught.value.field == "network"
    assert not ran.exists()                                   # the program never started
    assert not (run / "sessions" / "0001-reviewer" / "stdout.txt").exists()


def test_a_campaign_whose_runtime_asks_for_host_network_parks_with_the_reason_and_spends_no_attempt(tmp_path):
    src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
    author = agent_options("author", "--repo", src["repo"])
    author["network"] = "host"                                # the shipped author manifest allows "api"
    plan = local_plan([candidate("pr", src, runtime_options={"author": author})],
                      defaults={"runtimes": {"author": "command"}})
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    sweep("tick", "--campaign", str(d))
    wait_until("the run to park", lambda: record(d, "pr").state is RunState.queued
               and record(d, "pr").parked_role == "author", 90)
    rec = record(d, "pr")
    assert rec.attempts == 0 and rec.outcome is None, rec
    assert outage_path(d, "author").exists()
    refused = [e for e in events(d, "pr") if e["kind"] == "session_done" and "refused" in e.get("detail", "")]
    assert refused and "asks for network 'host'" in refused[0]["detail"] and "allows at most 'api'" in refused[0]["detail"]
    assert not any(e["kind"] == "session_done" and "refused" not in e.get("detail", "") for e in events(d, "pr"))
    status = sweep("status", "--campaign", str(d)).stdout
    assert "cooldown: author" in status and "configuration error" in status, status
