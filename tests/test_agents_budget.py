"""Budget and parking with agent sessions: reservations that bind, forged usage refused, parks
stamped on the right role and counted as an attempt after `parks_per_attempt`."""
from __future__ import annotations

import json
import sys
import time

from runstate import run_dir
from runstate.runs import save_record
from runstate.markers import outage_path
from runstate.models import RunState
from sweep.runtimes.base import session_reservation
from sweep.harbor.samples import make_pr_repo
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, needs_claude, run_agent
from tests.campaigns import sweep, write_plan
from tests.fakes.anthropic_api import FakeAnthropic, Script, error
from tests.fakes.runs import candidate, count, events, local_plan, record, wait_until


def test_a_paid_session_reserves_its_role_cap_never_zero():
    assert session_reservation("claude-code", 5.0, 0.0) == 5.0
    assert session_reservation("codex", 1.5, 0.0) == 1.5
    assert session_reservation("command", 5.0, 0.2) == 0.2        # the plan's explicit figure wins
    assert session_reservation("oracle", 5.0, 0.0) == 0.0         # no API, no money
    assert session_reservation("claude-code", None, 0.0) == 0.0   # refused by the controller (tested below)


def test_a_forged_usage_line_charges_the_reservation(tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text("import json\nprint(json.dumps({'sweep_usage': {'cost_usd': 1e308, 'turns': 3}}))\n"
                     "print('{\"sweep_usage\": {\"cost_usd\": Infinity}}')\n")
    argv = [sys.executable, str(agent), "{max_turns}", "{cost_cap_usd}"]
    result, _ = run_agent(tmp_path, "solver", "command", {"argv": argv}, secrets={})
    assert result.status == "ok"
    assert result.cost_usd is None            # so the controller charges the whole reservation
    assert result.report and result.report["usage_anomalies"]


def _plan(tmp_path, fake, **settings):
    src = make_pr_repo(tmp_path / "repos", "verified")
    runtimes = {"author": "claude-code", "reviewer": "oracle", "solver": "oracle"}
    options = {"author": {"base_url": fake.url("author"), "max_retries": 0, "stall_s": 30}}
    plan = local_plan([candidate("pr-0", src, runtime_options=options)], defaults={"runtimes": runtimes},
                      secrets=ENV_SECRETS, **settings)
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d),
          env={"ANTHROPIC_API_KEY": FAKE_KEY})
    return d


def _settled(d):
    rec = record(d, "pr-0")
    return rec.state is not RunState.active and not (run_dir(d, "pr-0") / "lease.json").exists()


@needs_claude
def test_repeated_parks_for_one_role_count_an_attempt(tmp_path):
    fake = FakeAnthropic()
    try:
        fake.script("author", Script(error=error(529, "overloaded_error", "Overloaded")))
        d = _plan(tmp_path, fake, parks_per_attempt=2)
        env = {"ANTHROPIC_API_KEY": FAKE_KEY}
        sweep("tick", "--campaign", str(d), env=env)
        wait_until("the first park", lambda: _settled(d) and count(events(d, "pr-0"), "parked") == 1, 120)
        stamp = json.loads(outage_path(d, "author").read_text())
        assert stamp["role"] == "author" and stamp["kind"] == "throttle"
        assert "api_error_status 529" in stamp["detail"]
        assert not outage_path(d, "reviewer").exists()
        assert record(d, "pr-0").attempts == 0
        # the cooldown is over (moved into the past by hand, not by waiting 5 minutes): the next
        # session parks the run a second time
        stamp["stamped_at"] = time.time() - stamp["cooldown_s"] - 1
        outage_path(d, "author").write_text(json.dumps(stamp))
        rdir = run_dir(d, "pr-0")
        save_record(rdir, record(d, "pr-0").model_copy(update={"parked_until": time.time() - 1}))
        sweep("tick", "--campaign", str(d), env=env)
        wait_until("the second park", lambda: _settled(d) and count(events(d, "pr-0"), "attempt_failed") == 1, 120)
        rec = record(d, "pr-0")
        assert rec.attempts == 1 and rec.state is RunState.queued
        failed = [e for e in events(d, "pr-0") if e["kind"] == "attempt_failed"][0]
        assert "parked 2 times for role author" in failed["detail"]
        # each session reserved the author's cap and was settled at its parsed cost ($0: nothing answered)
        spend = json.loads((run_dir(d, "pr-0") / "spend.json").read_text())
        entries = [(e["reserved_usd"], e["status"], e["actual_usd"]) for e in spend["entries"]]
        assert entries == [(5.0, "settled", 0.0)] * 2
    finally:
        fake.close()


@needs_claude
def test_a_bad_key_stops_the_whole_key_family(tmp_path):
    fake = FakeAnthropic()
    try:
        fake.script("author", Script(error=error(401, "authentication_error", "invalid x-api-key")))
        d = _plan(tmp_path, fake)
        sweep("tick", "--campaign", str(d), env={"ANTHROPIC_API_KEY": FAKE_KEY})
        wait_until("the park", lambda: _settled(d) and count(events(d, "pr-0"), "parked") == 1, 120)
        for role in ("author", "reviewer", "solver"):      # every role of the anthropic family
            assert outage_path(d, role).exists(), role
        assert "key family anthropic" in json.loads(outage_path(d, "author").read_text())["detail"]
    finally:
        fake.close()


@needs_claude
def test_a_candidate_cap_below_one_agent_session_is_never_admitted(tmp_path):
    src = make_pr_repo(tmp_path / "repos", "verified")
    runtimes = {"author": "claude-code", "reviewer": "oracle", "solver": "oracle"}
    options = {"author": {"base_url": "http://127.0.0.1:9", "max_retries": 0}}
    plan = local_plan([candidate("pr-0", src, runtime_options=options, max_spend_usd=2.0)],
                      defaults={"runtimes": runtimes}, secrets=ENV_SECRETS)
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d),
          env={"ANTHROPIC_API_KEY": FAKE_KEY})
    assert record(d, "pr-0").reservation_usd == 5.0          # the author's cost cap, not the plan's 0
    sweep("tick", "--campaign", str(d))
    rec = record(d, "pr-0")
    assert rec.state is RunState.ended and rec.reason == "budget_exhausted", rec
    assert not (run_dir(d, "pr-0") / "sessions").exists()
