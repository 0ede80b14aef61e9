"""A kill -9 that lands on the bwrap probe's child, or on the readiness check, is not a
configuration error.

Every controller probes the sandbox when it starts (sweep/providers/local/bwrap.py). A CI chaos
round (tests/test_reliability_chaos.py) once SIGKILLed that probe's child: the probe "exited -9",
read as "isolation = 'bwrap' is required but unusable", the run parked as a configuration error
(`provider_config`), and one such park trips the circuit breaker at once: admission stopped with
nothing wrong in the campaign. A probe killed by a signal says nothing about the host: it is tried
again, and a probe killed every try is an ordinary failed attempt (`check_interrupted`). A probe
that does say the host cannot sandbox still parks the run and trips the breaker. A failed
readiness check is confirmed by a second run before it parks the run (a broken test command still
does: tests/test_causes_breaker.py, tests/test_readiness.py).

The kill is real: a `bwrap` on the controller's PATH that SIGKILLs itself its first N runs, then
execs the real one (tests/fakes/controller.py --bwrap-killed=N)."""
import sys
from pathlib import Path

import pytest

from runstate import read_lease, run_dir
from runstate.breaker import tripped
from runstate.markers import outage_path
from runstate.models import Outcome, RunState
from sweep.harbor.samples import make_pr_repo
from sweep.providers.local.bwrap import probe_bwrap
from tests.campaigns import sweep, write_plan
from tests.fakes.runs import candidate, events, local_plan, record, wait_until

FAKE_CONTROLLER = Path(__file__).resolve().parent / "fakes" / "controller.py"
pytestmark = pytest.mark.skipif(probe_bwrap()[0] is None, reason="bubblewrap is not usable here")


def campaign(tmp_path: Path, *controller_args: str) -> tuple[Path, str]:
    src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
    plan = local_plan([candidate("pr", src)], max_attempts=3)
    plan["tick"]["controller_command"] = [sys.executable, str(FAKE_CONTROLLER), *controller_args]
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    return d, "pr"


def first_controller_done(d: Path, run_id: str) -> list[dict]:
    sweep("tick", "--campaign", str(d))
    wait_until("the first controller to write its outcome",
               lambda: any(e["kind"] in ("parked", "attempt_failed", "ended") for e in events(d, run_id))
               and read_lease(run_dir(d, run_id)) is None, 180)
    return events(d, run_id)


def test_a_probe_killed_once_is_tried_again_and_the_run_goes_on(tmp_path):
    d, run_id = campaign(tmp_path, "--bwrap-killed=1")
    evs = first_controller_done(d, run_id)          # one controller, the whole run
    rec = record(d, run_id)
    assert rec.outcome is Outcome.verified and rec.attempts == 0, (rec, [e for e in evs if e["kind"] == "parked"])
    assert not [e for e in evs if e["kind"] in ("parked", "attempt_failed", "breaker_tripped")]
    assert tripped(d) is None


def test_a_probe_killed_every_try_fails_the_attempt_without_a_config_park(tmp_path):
    d, run_id = campaign(tmp_path, "--bwrap-killed=1000")
    evs = first_controller_done(d, run_id)
    rec = record(d, run_id)
    assert rec.state is RunState.queued and rec.attempts == 1 and rec.cause == "check_interrupted", rec
    assert "killed by signal 9" in rec.last_error and "configuration error" not in rec.last_error, rec.last_error
    assert not [e for e in evs if e["kind"] in ("parked", "breaker_tripped")]
    assert tripped(d) is None
    assert not outage_path(d, "author").exists()


def test_a_probe_that_finds_bwrap_unusable_still_parks_and_trips_the_breaker(tmp_path):
    d, run_id = campaign(tmp_path, "--no-bwrap")
    evs = first_controller_done(d, run_id)
    rec = record(d, run_id)
    assert rec.state is RunState.queued and rec.attempts == 0 and rec.cause == "provider_config", rec
    assert "configuration error" in rec.last_error and outage_path(d, "author").exists()
    assert [e for e in evs if e["kind"] == "breaker_tripped"]
    trip = tripped(d)
    assert trip is not None and trip.cause == "provider_config" and trip.runs == [run_id], trip


def test_a_readiness_check_killed_once_is_confirmed_by_a_second_run_and_the_run_goes_on(tmp_path):
    """The readiness check's `command -v` of the test program, killed: it read as "not found", a
    park with a campaign cause (test_command_not_found) that trips the breaker at once."""
    d, run_id = campaign(tmp_path, "--bwrap-killed=1:command -v")
    evs = first_controller_done(d, run_id)
    rec = record(d, run_id)
    assert rec.outcome is Outcome.verified and rec.attempts == 0, (rec, [e for e in evs if e["kind"] == "parked"])
    checks = [e["detail"] for e in evs if e["kind"] == "readiness"]
    assert len(checks) == 2 and checks[0].startswith("test_command_not_found") \
        and checks[1].startswith("confirming: ok"), checks
    assert not [e for e in evs if e["kind"] in ("parked", "attempt_failed", "breaker_tripped")]
    assert tripped(d) is None
