"""`quality.max_spend_usd`: a budget scope inside the run's allocation around the reviews, repairs
and rollouts, reserved before and settled after each session in the run's spend.json; reaching it
ends the quality loop with the `budget` cause, never `verified`. `quality.max_probes`: the probes a
reviewer's verdict may propose, run like the mutants; one the tests accept keeps the run from
verified, and more than the plan allows is an invalid output. One campaign serves every test."""
from __future__ import annotations

import pytest

from runstate import run_dir
from runstate.models import SpendLedger
from sweep.controller.budget import Budget
from sweep.harbor.samples import make_pr_repo
from sweep.models.evidence import ProbesEvidence, read_evidence
from sweep.providers.local.bwrap import probe_bwrap
from sweep.quality.probes import ProbeListProblem, proposed_probes
from tests.campaigns import status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, local_plan

ISOLATION = "bwrap" if probe_bwrap()[0] is not None else "none"


def test_a_scope_cap_binds_inside_the_allocation(tmp_path):
    budget = Budget(tmp_path, "r", allocation_usd=10.0)
    budget.reserve("0001-author", "author session", 3.0)               # outside the scope
    budget.settle("0001-author", 3.0)
    assert budget.can_spend(0.5, scope="quality", scope_cap=0.5) == (True, "")
    budget.reserve("0002-reviewer", "reviewer session", 0.4, scope="quality")
    # an open reservation counts in its scope (and survives a killed controller as uncertain)
    assert Budget(tmp_path, "r", 10.0).mark_uncertain() == ["0002-reviewer"]
    budget = Budget(tmp_path, "r", 10.0)
    assert budget.committed_in("quality") == pytest.approx(0.4) and budget.committed == pytest.approx(3.4)
    ok, why = budget.can_spend(0.2, scope="quality", scope_cap=0.5, cap_name="quality.max_spend_usd")
    assert not ok and why.startswith("quality.max_spend_usd 0.50 USD, committed 0.40")
    assert budget.can_spend(0.2) == (True, "")                          # the allocation alone has room
    assert budget.scope_left("quality", 0.5) == pytest.approx(0.1) and budget.scope_left("quality", None) is None
    ledger = SpendLedger.model_validate_json((tmp_path / "spend.json").read_bytes())
    assert [(e.op_id, e.scope) for e in ledger.entries] == [("0001-author", None), ("0002-reviewer", "quality")]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """One campaign: three runs whose command reviewer reports a cost of $1.00: under a $0.50
    quality cap with a $0.10 reservation (it runs, then the cap is past), under a $0.50 cap with a
    $1.00 reservation (refused before it starts), and under a $2.00 cap (verified); and two whose
    reviewer proposes probes: one its tests accept, and more than quality.max_probes."""
    root = tmp_path_factory.mktemp("quality-budget")
    repos = root / "repos"
    runtimes = {"author": "oracle", "reviewer": "command", "solver": "oracle"}

    def cand(run_id: str, name: str, cap: float, reservation: float, *extra: str) -> dict:
        return candidate(run_id, make_pr_repo(repos, "verified", name=name), runtimes=runtimes,
                         runtime_options={"reviewer": agent_options("reviewer", "--cost", "1.00", *extra)},
                         worker_reservation_usd=reservation,
                         quality={"max_spend_usd": cap, "run_rollout": False, "max_probes": 1,
                                  "gate_repeats": 1, "max_mutants": 0})     # fewer trials: cheap
    # "room" is also the control of the proposed probes: a wrong solution its tests reject
    cands = [cand("charged", "m1", 0.5, 0.1), cand("refused", "m2", 0.5, 1.0),
             cand("room", "m3", 2.0, 1.0, "--propose-probe=wrong_solution:return 0")]

    def proposing(run_id: str, name: str, max_probes: int, *specs: str) -> dict:
        return candidate(run_id, make_pr_repo(repos, "verified", name=name), runtimes=runtimes,
                         runtime_options={"reviewer": agent_options("reviewer", *(f"--propose-probe={s}" for s in specs))},
                         worker_reservation_usd=0.1,
                         quality={"max_probes": max_probes, "run_rollout": False, "gate_repeats": 1, "max_mutants": 0})
    # the verified sample's tests check two inputs above the range: their two answers hard-coded pass them
    cands += [proposing("caught", "m4", 2, "wrong_solution:return 10 if value == 42 else 5", "valid_alternative:return min(value, high)"),
              proposing("too-many", "m6", 1, "wrong_solution:return 0", "wrong_solution:return 1")]
    d = root / "camp"
    sweep("init", str(write_plan(root / "plan.json", local_plan(cands, isolation=ISOLATION, max_parallel=3,
                                                                cpu_slots=3, max_attempts=1))), "--campaign", str(d))
    return d, tick_until_done(d, timeout=300)


def test_a_reviewer_past_the_quality_cap_does_not_verify(campaign):
    d, st = campaign
    rows = {e["run_id"]: e for e in st["ended"]}
    assert {r: (e["outcome"], e["reason"]) for r, e in rows.items() if r in ("charged", "refused", "room")} == {
        "charged": ("generated_unverified", "budget_exhausted"),
        "refused": ("generated_unverified", "budget_exhausted"),
        "room": ("verified", None)}
    charged = SpendLedger.model_validate_json((run_dir(d, "charged") / "spend.json").read_bytes())
    # the first authoring is outside the scope; the review inside it
    assert [(e.scope, e.reserved_usd, e.actual_usd) for e in charged.entries] == [(None, 0.1, 0.0),
                                                                                 ("quality", 0.1, 1.0)]
    assert charged.committed_in("quality") == 1.0
    # the refused run's reviewer never started: nothing reserved, no session directory
    assert [p.name for p in (run_dir(d, "refused") / "sessions").iterdir()] == ["0001-author"]
    room = SpendLedger.model_validate_json((run_dir(d, "room") / "spend.json").read_bytes())
    assert room.committed_in("quality") == 1.0 and not room.overrun


def test_the_budget_cause_is_named(campaign):
    d, _ = campaign
    rows = {e["run_id"]: e for e in status_json(d)["ended"]}
    for run_id in ("charged", "refused"):
        state = (run_dir(d, run_id) / "state.json").read_text()
        assert '"cause":"budget"' in state.replace(" ", ""), state
        assert "quality.max_spend_usd" in state
    assert "budget" in str(rows["charged"])


def test_proposed_probes_are_bounded_by_max_probes():
    patch = "diff --git a/x b/x\n"
    probe = {"kind": "wrong_solution", "focus": "f", "rationale": "r", "patch": patch}
    assert [p.name for p in proposed_probes([probe, {**probe, "kind": "valid_alternative"}], 2)] == [
        "reviewer-01", "reviewer-02"]
    assert proposed_probes(None, 0) == []
    for items, words in (([probe, probe], "more than quality.max_probes = 1"), ([{**probe, "kind": "x"}], "kind"),
                         ([{**probe, "patch": " "}], "patch"),
                         ([{**probe, "name": "a"}, {**probe, "name": "a"}], "repeats")):
        with pytest.raises(ProbeListProblem, match=words):
            proposed_probes(items, 1 if len(items) == 2 and words.startswith("more") else 2)


def test_a_reviewer_proposed_probe_the_tests_accept_keeps_the_run_from_verified(campaign):
    d, st = campaign
    rows = {e["run_id"]: (e["outcome"], e["reason"]) for e in st["ended"]}
    assert rows["caught"] == ("generated_unverified", "weak_tests")
    assert rows["room"] == ("verified", None)
    assert rows["too-many"] == ("blocked", "max_attempted")

    def probes(run_id):
        ev = read_evidence(sorted((run_dir(d, run_id) / "evidence").glob("probes-r*.json"))[-1], ProbesEvidence)
        assert ev is not None
        return {p.name: (p.origin, p.kind, p.outcome) for p in ev.probes}
    assert probes("caught") == {"reviewer-01": ("reviewer", "wrong_solution", "survived"),
                                "reviewer-02": ("reviewer", "valid_alternative", "accepted")}
    assert probes("room") == {"reviewer-01": ("reviewer", "wrong_solution", "killed")}
    state = (run_dir(d, "too-many") / "state.json").read_text()
    assert "more than quality.max_probes = 1" in state
