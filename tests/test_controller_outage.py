"""An outage in one role parks runs and stops only that role; a canary ends it (real jobs and sessions).

The author is played by the fake agent CLI through the `command` runtime; a mode file tells it to
fail the way a model API outage looks (`API Error: 503 Service Unavailable`) or a throttle
(`API Error: 529 overloaded`), or to work. The reviewer and solver are the oracle.
"""
import json
import tempfile
import time
from pathlib import Path

import pytest

from runstate import read_lease, run_dir
from runstate.markers import outage_path
from runstate.models import OUTAGE_COOLDOWN_S, THROTTLE_COOLDOWN_S, Outcome, RunState
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import status_json, sweep, write_plan
from tests.fakes.runs import agent_options, candidate, count, events, local_plan, record, wait_until


@pytest.fixture
def mode_file():
    """What the fake author does next; under /var/tmp because sessions get a private /tmp."""
    d = Path(tempfile.mkdtemp(prefix="sweep-test-mode-", dir="/var/tmp"))
    path = d / "mode"
    yield path
    path.unlink(missing_ok=True)
    d.rmdir()


def campaign_with_command_author(tmp_path: Path, mode_file: Path, n: int) -> tuple[Path, list[str]]:
    cands = []
    for i in range(n):
        src = make_pr_repo(tmp_path / "repos", "verified", name=f"mathx{i}")
        author = agent_options("author", "--repo", src["repo"], f"--mode-file={mode_file}")
        cands.append(candidate(f"pr-{i}", src, runtime_options={"author": author}))
    plan = local_plan(cands, defaults={"runtimes": {"author": "command"}}, max_parallel=2, cpu_slots=2)
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    return d, [c["id"] for c in cands]


def settled(d: Path, run_ids: list[str]) -> bool:
    """Every one of `run_ids` is back to queued with its lease released (its job wrote and left)."""
    return all(record(d, r).state is RunState.queued and read_lease(run_dir(d, r)) is None for r in run_ids)


def admitted(d: Path) -> list[str]:
    return [a["run_id"] for a in json.loads((d / "tick.json").read_text())["actions"] if a["kind"] == "admit"]


def test_an_author_outage_parks_runs_stamps_only_the_author_and_a_canary_ends_it(tmp_path, mode_file):
    mode_file.write_text("outage\n")
    d, runs = campaign_with_command_author(tmp_path, mode_file, 4)

    sweep("tick", "--campaign", str(d))
    first = admitted(d)
    assert first == runs[:2]
    wait_until("both admitted runs to park", lambda: settled(d, first), 60)

    stamp = json.loads(outage_path(d, "author").read_text())
    assert stamp["role"] == "author" and stamp["kind"] == "outage"
    assert stamp["cooldown_s"] == OUTAGE_COOLDOWN_S == 45 * 60
    assert "503 Service Unavailable" in stamp["detail"]
    assert not outage_path(d, "reviewer").exists() and not outage_path(d, "solver").exists()
    for run_id in first:
        rec = record(d, run_id)
        assert rec.attempts == 0 and rec.phase.value == "author", rec
        assert rec.parked_role == "author"
        assert abs(rec.parked_until - (stamp["stamped_at"] + stamp["cooldown_s"])) < 600
        assert rec.parked_until > time.time() + 40 * 60
        assert count(events(d, run_id), "parked", "author") == 1
        assert count(events(d, run_id), "phase_done", "intake") == 1

    status = sweep("status", "--campaign", str(d)).stdout
    line = next(x for x in status.splitlines() if x.startswith("cooldown: author"))
    assert "(outage)" in line and ("45m left" in line or "44m left" in line), line

    # while the cooldown is active no run that needs the author is admitted
    sweep("tick", "--campaign", str(d))
    assert admitted(d) == []
    assert all(record(d, r).state is RunState.queued for r in runs)
    for run_id in runs[2:]:
        assert record(d, run_id).hold_reason.startswith("role author cooling down (outage)")

    # the cooldown passes (the stamp is moved into the past) and the model API is back: exactly
    # one canary is admitted; the parked runs keep their own parked_until
    stamp["stamped_at"] = time.time() - stamp["cooldown_s"] - 1
    outage_path(d, "author").write_text(json.dumps(stamp))
    mode_file.write_text("ok\n")
    assert "cooldown over for author: admitting one canary run" in sweep("status", "--campaign", str(d)).stdout
    sweep("tick", "--campaign", str(d))
    canary = admitted(d)
    assert canary == [runs[2]], canary
    assert record(d, runs[2]).canary_for == "author"
    assert record(d, runs[3]).hold_reason == "waiting for the author canary after its cooldown"
    for run_id in first:
        assert record(d, run_id).hold_reason.startswith("parked until")

    # a successful author session clears the stamp
    wait_until("the canary's author session to clear the stamp", lambda: not outage_path(d, "author").exists(), 60)
    # the stamp is removed before the event is appended: wait for the event, then check it is the only one
    wait_until("the cooldown_cleared event", lambda: count(events(d, runs[2]), "cooldown_cleared") >= 1, 30)
    assert count(events(d, runs[2]), "cooldown_cleared") == 1
    deadline = time.monotonic() + 120
    while record(d, runs[3]).state is not RunState.ended or record(d, runs[2]).state is not RunState.ended:
        assert time.monotonic() < deadline, status_json(d)
        sweep("tick", "--campaign", str(d))
        time.sleep(0.3)
    assert record(d, runs[2]).outcome is Outcome.verified and record(d, runs[3]).outcome is Outcome.verified
    assert record(d, runs[3]).canary_for is None
    for run_id in first:                  # still waiting out their own park
        assert record(d, run_id).state is RunState.queued and record(d, run_id).attempts == 0


def test_a_throttle_parks_for_five_minutes(tmp_path, mode_file):
    mode_file.write_text("throttle\n")
    d, runs = campaign_with_command_author(tmp_path, mode_file, 1)
    sweep("tick", "--campaign", str(d))
    wait_until("the run to park", lambda: settled(d, runs), 60)
    stamp = json.loads(outage_path(d, "author").read_text())
    assert stamp["kind"] == "throttle" and stamp["cooldown_s"] == THROTTLE_COOLDOWN_S == 5 * 60
    rec = record(d, runs[0])
    assert rec.attempts == 0 and rec.parked_role == "author" and rec.parked_until < time.time() + 5 * 60 + 1
    line = next(x for x in sweep("status", "--campaign", str(d)).stdout.splitlines() if x.startswith("cooldown:"))
    assert line.startswith("cooldown: author (throttle)") and ("5m left" in line or "4m left" in line), line
    assert not outage_path(d, "reviewer").exists() and not outage_path(d, "solver").exists()


def test_a_bad_key_stops_every_role_of_that_key_family(tmp_path, mode_file):
    mode_file.write_text("badkey\n")
    d, runs = campaign_with_command_author(tmp_path, mode_file, 1)
    sweep("tick", "--campaign", str(d))
    wait_until("the run to park", lambda: settled(d, runs), 60)
    from roles import load_roles_dir
    specs = load_roles_dir(d / "roles")
    family = specs["author"].key_family
    for role, spec in specs.items():
        stamped = outage_path(d, role).exists()
        assert stamped == (spec.key_family == family), role
    stamp = json.loads(outage_path(d, "author").read_text())
    assert "configuration error (key family" in stamp["detail"] and "Invalid API key" in stamp["detail"]
    assert record(d, runs[0]).attempts == 0 and record(d, runs[0]).parked_role == "author"
    status = sweep("status", "--campaign", str(d)).stdout
    assert "cooldown: author" in status and "configuration error" in status
