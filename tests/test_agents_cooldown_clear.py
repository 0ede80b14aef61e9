"""`sweep clear-cooldown`: after fixing a key, the operator ends the family's 45-minute config park
now (issue 25, item 7): the stamps are kept expired (one canary first), the parked run is released
with a `cooldown_cleared` event, and the next tick admits it. Real CLI, tick and controller on the
local backend; a `command` solver whose key is refused."""
from __future__ import annotations

import sys
import time

from runstate.markers import read_outage
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import sweep, write_plan
from tests.fakes.runs import candidate, count, events, local_plan, record, wait_until

BAD_KEY = "import sys; print('Error: invalid x-api-key'); sys.exit(1)"


def test_clearing_a_key_familys_cooldown_releases_its_parked_run(tmp_path):
    src = make_pr_repo(tmp_path / "repos", "verified")
    solver = {"argv": [sys.executable, "-c", BAD_KEY, "{tools}", "{max_turns}", "{cost_cap_usd}"], "network": "none"}
    plan = local_plan([candidate("pr-0", src, runtimes={"solver": "command"}, runtime_options={"solver": solver})])
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))

    def parked():
        sweep("tick", "--campaign", str(d))
        rec = record(d, "pr-0")
        return rec.parked_until is not None and rec.state.value == "queued"
    wait_until("the run parks on the refused key", parked, timeout=240, poll=0.5)
    assert read_outage(d, "solver").value.is_active(time.time())
    assert read_outage(d, "author").value is not None       # the whole family was stopped

    out = sweep("clear-cooldown", "--family", "anthropic", "--campaign", str(d), "--reason", "key rotated").stdout
    assert "1 parked run(s) released" in out and "sweep tick" in out
    # the refused key parked a run for the campaign's set-up, which trips the breaker at once: fixing
    # the key is the acknowledgement (else admission stays stopped after the cooldown is gone)
    assert "the circuit breaker it tripped" in out, out
    from runstate.breaker import tripped
    assert tripped(d) is None
    rec = record(d, "pr-0")
    assert rec.parked_until is None
    for role in ("author", "reviewer", "solver"):
        stamp = read_outage(d, role).value
        assert stamp is not None and not stamp.is_active(time.time()) and "key rotated" in (stamp.detail or "")
    assert count(events(d, "pr-0"), "cooldown_cleared") == 1
    # the next tick admits it as the canary (the key is still bad here: it parks again)
    wait_until("the released run is admitted", lambda: (sweep("tick", "--campaign", str(d)),
                                                         count(events(d, "pr-0"), "parked") >= 2)[1],
               timeout=240, poll=0.5)


def test_clear_cooldown_refuses_a_name_that_is_no_role(tmp_path):
    src = make_pr_repo(tmp_path / "repos", "verified")
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", local_plan([candidate("pr-0", src)]))), "--campaign", str(d))
    r = sweep("clear-cooldown", "judge", "--campaign", str(d), check=False)
    assert r.returncode != 0 and "'judge' is not a role" in r.stderr
