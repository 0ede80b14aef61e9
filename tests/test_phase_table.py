"""The phase table (runstate/phases.py) is the one declaration of the pipeline's phases.

Everything that depends on which phases exist is derived from it, so a phase added as one row plus
one function (tests/phase_extension.py, run as the real CLI in subprocesses) is run by the tick and
the controller like a shipped phase: admitted, checkpointed in order, cleared by a repair, and ended
with its own failure reason.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runstate import load_record, run_dir
from runstate.checkpoints import Checkpoint
from runstate.models import PIPELINE_ROLES, EndReason, Outcome, RunRecord, RunState
from runstate.phases import PHASE_TABLE, Phase, PhaseRow, PhaseTable
from sweep.harbor.samples import make_verified_pr
from sweep.models.evidence import Checkpoints
from tests.fakes.runs import candidate, events, local_plan

EXT = Path(__file__).resolve().parent / "phase_extension.py"
REPO = EXT.parents[1]


def test_the_shipped_table_gives_the_lookups_that_were_spelled_out_before():
    # what tick/plan.py's NEXT_ROLE and the controller's _PHASE_ROLE said, word for word
    assert {p: PHASE_TABLE.next_role(p) for p in PHASE_TABLE.names} == {
        "intake": "author", "author": "author", "gates": "reviewer", "probes": "reviewer", "review": "reviewer",
        "solve": "solver", "evaluate": None}
    assert {p: PHASE_TABLE.role_of(p) for p in PHASE_TABLE.names if PHASE_TABLE.role_of(p)} == {
        "author": "author", "review": "reviewer", "solve": "solver"}
    assert PHASE_TABLE.names == tuple(Phase)
    assert PIPELINE_ROLES == ("author", "reviewer", "solver")
    assert PHASE_TABLE.cleared_by_repair == ("gates", "probes", "review", "solve")
    assert [PHASE_TABLE.after(p) for p in PHASE_TABLE.names] == [*PHASE_TABLE.names[1:], None]
    # every failure a shipped row names is a documented ending
    for row in PHASE_TABLE.rows:
        if row.failure is not None:
            assert EndReason(row.failure).value == f"{row.phase}_failed"


def test_every_row_has_a_runner_that_returns_its_checkpoint():
    from sweep.controller import phases
    import typing
    for row in PHASE_TABLE.rows:
        fn = phases.runner(row.phase)
        assert fn.__name__ == row.phase and fn.__module__ == "sweep.controller.phases"
        hints = typing.get_type_hints(fn)
        assert "return" in hints, row.phase


def test_a_record_naming_a_phase_without_a_row_is_refused():
    with pytest.raises(ValueError, match="unknown phase 'probe': expected one of intake, author"):
        RunRecord(run_id="r", phase="probe")
    assert RunRecord(run_id="r", phase="gates").phase is Phase.gates


def test_a_table_refuses_two_rows_of_one_name():
    row = PhaseRow("x", None, Checkpoint, False, None)
    with pytest.raises(ValueError, match="unique phase names"):
        PhaseTable((row, row))


def test_checkpoints_read_an_added_phase_through_its_rows_model_in_table_order():
    class Probe(Checkpoint):
        killed: int | None = None
    PHASE_TABLE.insert(PhaseRow("probe", None, Probe, True, "probe_failed"), after="review")
    try:
        cps = Checkpoints.of({"solve": {"rewards": [1.0]}, "probe": {"killed": 3}, "gates": {"passed": True}})
        assert [name for name, _ in cps.phases()] == ["gates", "probe", "solve"]
        probe = cps.get("probe")
        assert isinstance(probe, Probe) and probe.killed == 3
        assert PHASE_TABLE.next_role("probe") == "solver" and PHASE_TABLE.cleared_by_repair[-2:] == ("probe", "solve")
        from runstate.errors import StateError
        with pytest.raises(StateError, match="killed"):
            Checkpoints.of({"probe": {"killed": "many"}})
    finally:
        PHASE_TABLE.remove("probe")
    assert "probe" not in PHASE_TABLE


# ---- a campaign through a phase added by one row plus one function ------------------------------

def ext(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, str(EXT), *args], capture_output=True, text=True, timeout=180,
                       cwd=REPO, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def run_campaign(tmp_path: Path, *, findings: list[str] | None = None, max_repairs: int = 0) -> Path:
    src = make_verified_pr(tmp_path / "repos", "verified")
    plan = local_plan([candidate("pr", src)], defaults={"quality": {"max_repairs": max_repairs}})
    plan["tick"]["controller_command"] = [sys.executable, str(EXT), "controller"]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    d = tmp_path / "camp"
    ext("init", str(tmp_path / "plan.json"), "--campaign", str(d))
    if findings:
        (d / "dummy.json").write_text(json.dumps({"findings": findings}))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ext("tick", "--campaign", str(d))
        status = json.loads(ext("status", "--json", "--campaign", str(d)).stdout)
        assert not status.get("corrupt"), status
        if status["counts"]["queued"] == 0 and status["counts"]["active"] == 0:
            return d
        time.sleep(0.3)
    raise AssertionError(f"campaign did not finish: {ext('status', '--campaign', str(d)).stdout}")


@pytest.fixture
def dummy_row():
    """The dummy row in this process's table too: a run ended in that phase names it in state.json."""
    from tests.phase_extension import ROW
    PHASE_TABLE.insert(ROW, after="review")
    yield ROW
    PHASE_TABLE.remove(ROW.phase)


def finished(d: Path) -> list[str]:
    return [e["phase"] for e in events(d, "pr") if e["kind"] == "phase_done"]


def test_a_campaign_runs_through_a_phase_added_as_one_row_and_one_function(tmp_path, dummy_row):
    d = run_campaign(tmp_path)
    rec = load_record(run_dir(d, "pr")).value
    assert rec is not None and rec.state is RunState.ended and rec.outcome is Outcome.verified, rec
    assert finished(d) == ["intake", "author", "gates", "probes", "review", "dummy", "solve"]
    assert list(rec.checkpoints)[:7] == ["intake", "author", "gates", "probes", "review", "dummy", "solve"]
    assert rec.checkpoints["dummy"]["looked_at"] > 0
    assert rec.checkpoints["dummy"]["bundle_sha256"] == rec.checkpoints["gates"]["bundle_sha256"]
    assert (run_dir(d, "pr") / "evidence" / "dummy-r0001.json").exists()


def test_an_added_phase_ends_the_run_with_its_own_failure_when_repairs_are_spent(tmp_path, dummy_row):
    d = run_campaign(tmp_path, findings=["the dummy phase says no"])
    rec = load_record(run_dir(d, "pr")).value
    assert rec is not None and rec.outcome is Outcome.generated_unverified and rec.reason == "dummy_failed", rec
    assert rec.phase == "dummy" and finished(d) == ["intake", "author", "gates", "probes", "review"]
    # a sweep without the row refuses the record rather than guess what the phase was
    PHASE_TABLE.remove("dummy")
    try:
        assert load_record(run_dir(d, "pr")).value is None
    finally:
        PHASE_TABLE.insert(dummy_row, after="review")


def test_a_repair_after_an_added_phase_clears_it_and_the_author_runs_again(tmp_path, dummy_row):
    d = run_campaign(tmp_path, findings=["try again"], max_repairs=1)
    rec = load_record(run_dir(d, "pr")).value
    assert rec is not None and rec.reason == "dummy_failed", rec
    # dummy asked for a repair: back to the author, every phase after it again, then its failure
    assert finished(d) == ["intake", "author", "gates", "probes", "review", "dummy", "author", "gates", "probes",
                           "review"]
    repairs = [e for e in events(d, "pr") if e["kind"] == "repair"]
    assert len(repairs) == 1 and "after dummy" in repairs[0]["detail"]
    assert rec.checkpoints["repair"]["after"] == "dummy" and rec.checkpoints["author"]["revision"] == 2
