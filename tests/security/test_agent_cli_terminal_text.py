"""Terminal escapes emitted through the REAL agent CLIs reach the operator escaped.

One whole campaign per runtime (the author played by claude-code, or by codex), its campaign outside
/tmp, run by `sweep tick` and a real controller process. The fake model server answers the author's
requests with an API error whose message is `ESC]0;pwned BEL ESC[2J ESC[H CR ALL GOOD BS CSI bidi`
(status 422: a request error, not an outage, so the attempt fails). Each CLI relays that message in
its own protocol (claude's `API Error: 422 ...` result, codex's `turn.failed` event); sweep's parser
takes the raw text into the session's evidence, and from there it is the attempt's error, the run's
last error and, with one attempt allowed, the detail of its `blocked: max_attempted` ending.

A second run's author gets the same message with status 503, an outage: the CLI's text becomes the
author role's cooldown detail, which `sweep status` shows, and the run's last error.

Asserted: the raw sequence really reached the runs' state (so the attack is live, not stopped by
the CLI), and `sweep status` and `sweep show` (piped and on a real pseudo-terminal), `status --json`
and report.md carry none of its control bytes and show it as visible escapes.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from runstate import run_dir
from runstate.models import Outcome
from sweep.harbor.samples import make_pr_repo
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, needs_claude
from tests.campaigns import sweep, write_plan
from tests.fakes.anthropic_api import FakeAnthropic, Script
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.openai_api import Script as CodexScript
from tests.fakes.runs import candidate, events, local_plan, record, wait_until
from tests.security.test_agent_clis import OPENAI_KEY, needs_codex
from tests.test_terminal_text_campaign import ATTACK, FORBIDDEN, assert_escaped, on_a_pty, piped

pytestmark = [needs_claude, needs_codex]

RUNTIMES = ["claude-code", "codex"]
ENV = {"ANTHROPIC_API_KEY": FAKE_KEY, "OPENAI_API_KEY": OPENAI_KEY}


def play(runtime: str, root: Path) -> Path:
    base = root / f"termtext-{runtime}"
    srcs = {run_id: make_pr_repo(base / "repos" / run_id, "verified") for run_id in ("pr-0", "pr-1")}
    fake, openai = FakeAnthropic(), FakeOpenAI()
    try:
        options = {}
        for run_id, status in (("pr-0", 422), ("pr-1", 503)):
            route = f"author-{status}"
            if runtime == "codex":
                options[run_id] = {"base_url": openai.url(route), "max_retries": 0, "stall_s": 60, "model": "gpt-5",
                                   "prices": {"input_per_mtok": 1.25, "output_per_mtok": 10.0}}
                openai.script(route, CodexScript(error=(status, "invalid_request_error", ATTACK)))
            else:
                options[run_id] = {"base_url": fake.url(route), "max_retries": 0, "stall_s": 60,
                                   "model": "claude-sonnet-4-5"}
                fake.script(route, Script(error=(status, "invalid_request_error", ATTACK)))
        # both runs are admitted by the first tick, before the outage cools the author role down
        plan = local_plan([candidate(r, srcs[r], runtime_options={"author": o}) for r, o in options.items()],
                          defaults={"runtimes": {"author": runtime}}, max_attempts=1, max_parallel=2,
                          secrets=ENV_SECRETS)
        camp = base / "campaign"
        sweep("init", str(write_plan(base / "plan.json", plan)), "--campaign", str(camp), env=ENV)

        def settled() -> bool:
            sweep("tick", "--campaign", str(camp), env=ENV)
            return record(camp, "pr-0").outcome is not None and record(camp, "pr-1").parked_until is not None
        wait_until("pr-0 to end and pr-1 to park", settled, timeout=300, poll=0.5)
        return camp
    finally:
        fake.close()
        openai.close()


@pytest.fixture(scope="module", params=RUNTIMES)
def ended(request, targets) -> tuple[str, Path]:
    return request.param, play(request.param, targets.root)


def test_the_raw_sequence_reached_the_runs_state(ended):
    runtime, camp = ended
    rec = record(camp, "pr-0")
    assert rec.outcome is Outcome.blocked and rec.reason == "max_attempted", (rec.reason, rec.last_error)
    # live: the CLI passed the control bytes on and sweep stored them (escaping happens at display)
    ending = [e for e in events(camp, "pr-0") if e["kind"] == "ended"]
    assert ending and "\x1b]0;pwned\x07\x1b[2J" in ending[-1]["detail"], ending
    parked = record(camp, "pr-1")
    assert "\x1b]0;pwned\x07\x1b[2J" in (parked.last_error or ""), parked.last_error
    for run_id in ("pr-0", "pr-1"):
        session = json.loads(next((run_dir(camp, run_id) / "sessions").glob("*-author/result.json")).read_text())
        assert session["runtime"] == runtime and session["status"] == "failed"


def test_status_escapes_it_piped_and_on_a_terminal(ended):
    _, camp = ended
    for out in (piped("status", "--campaign", str(camp)), on_a_pty("status", "--campaign", str(camp))):
        assert b"cooldown: author" in out and b"max_attempted" in out
        assert_escaped(out)


def test_status_json_escapes_c1_and_bidi(ended):
    _, camp = ended
    out = piped("status", "--json", "--campaign", str(camp))
    for bad in FORBIDDEN:
        assert bad not in out
    assert b"\\u001b]0;pwned\\u0007" in out and b"\\u009b31m\\u202e" in out


@pytest.mark.parametrize("run_id,shown", [("pr-0", b"max_attempted"), ("pr-1", b"last error:")])
def test_show_escapes_it_piped_and_on_a_terminal(ended, run_id, shown):
    _, camp = ended
    for out in (piped("show", run_id, "--campaign", str(camp)),
                on_a_pty("show", run_id, "--campaign", str(camp))):
        assert shown in out
        assert_escaped(out)


def test_report_md_escapes_it(ended):
    _, camp = ended
    report = (run_dir(camp, "pr-0") / "report.md").read_bytes()
    assert b"max_attempted" in report
    assert_escaped(report)
