"""An agent reviewer's `equivalent` claims on surviving mutants are model output, untrusted: they
excuse a surviving mutant only as far as the plan allows (`quality.max_equivalent_mutants`, default
0), and never a `return_constant` one. Pure checks first, then one campaign on the real sandbox
whose reviewer (the fake command CLI with `--judge-mutants=equivalent`) vouches for every survivor."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from runstate import run_dir
from sweep.harbor import samples
from sweep.models.evidence import ProbeRecord, ReviewEvidence, read_evidence
from sweep.providers.local.bwrap import probe_bwrap
from sweep.quality.mutants import line_edits, mask_code
try:
    from sweep.quality.review import judge_equivalence
except ImportError:
    judge_equivalence = None
from tests.campaigns import status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, events, local_plan

ISOLATION = "bwrap" if probe_bwrap()[0] is not None else "none"


def survivor(name: str, kind: str) -> ProbeRecord:
    return ProbeRecord(name=name, kind="wrong_solution", outcome="survived", mutant_kind=kind)


def test_claims_excuse_within_the_bound_none_past_it_and_never_a_constant_return():
    survivors = [survivor("mutant-01", "line_reverted"), survivor("mutant-02", "hunk_left_out"),
                 survivor("mutant-03", "return_constant")]
    claims = {"mutant-01": ("equivalent", "same behaviour"), "mutant-02": ("equivalent", "a refactor"),
              "mutant-03": ("equivalent", "vouched"), "mutant-04": ("equivalent", "not a survivor")}
    default = judge_equivalence(survivors, claims, 0)
    assert (default.claimed, default.excused) == (["mutant-01", "mutant-02", "mutant-03"], [])
    assert default.refused == ["mutant-03", "mutant-01", "mutant-02"]
    assert "quality.max_equivalent_mutants = 0" in default.why and "mutant-03 (it returns a constant" in default.why
    within = judge_equivalence(survivors, claims, 2)
    assert (within.excused, within.refused) == (["mutant-01", "mutant-02"], ["mutant-03"])
    assert "max_equivalent_mutants" not in within.why
    past = judge_equivalence(survivors, claims, 1)        # past the bound no claim excuses (none is picked)
    assert past.excused == [] and set(past.refused) == {"mutant-01", "mutant-02", "mutant-03"}
    # a claim without a reason, or a weak_tests judgement, is no claim
    assert judge_equivalence(survivors, {"mutant-01": ("equivalent", " "), "mutant-02": ("weak_tests", "x")}, 5) \
        .claimed == []


def test_python_return_false_gets_no_zero_constant_mutant():
    """0 == False: `return 0` for `return False` would be a near-equivalent return_constant mutant,
    which no claim could excuse; it is not derived (None still is)."""
    text = "    return False"
    constants = [e[2] for e in line_edits(text, mask_code(text, "python"), "python") if e[3] == "return_constant"]
    assert constants == ["None"]
    text = "    return True"
    assert [e[2] for e in line_edits(text, mask_code(text, "python"), "python")
            if e[3] == "return_constant"] == ["None", "0"]


ABOVE_NOT_LOW = samples.TEST_BASE + '''

class ClampAboveTest(unittest.TestCase):
    def test_above_range_is_not_the_lower_bound(self):
        self.assertNotEqual(clamp(42, 0, 10), 0)
'''


def _pr(root: Path, name: str, head_code: str, head_tests: str, title: str) -> dict:
    repo = samples._new_repo(root, name)
    base = samples._commit(repo, {"README.md": "# mathx\n", "tests/__init__.py": "", "mathx.py": samples.MATHX_BUGGY,
                                  "tests/test_mathx.py": samples.TEST_BASE}, "base", "2024-01-01T00:00:00+00:00")
    head = samples._commit(repo, {"mathx.py": head_code, "tests/test_mathx.py": head_tests}, title,
                           "2024-01-02T00:00:00+00:00")
    return samples._source(repo, base, head, title, "clamp(42, 0, 10) should be 10.")


def ended(st: dict) -> dict[str, tuple[str, str | None, str | None]]:
    return {e["run_id"]: (e["outcome"], e["reason"], e.get("cause")) for e in st["ended"]}


def review_of(d: Path, run_id: str) -> ReviewEvidence:
    ev = read_evidence(sorted((run_dir(d, run_id) / "evidence").glob("review-r*.json"))[-1], ReviewEvidence)
    assert ev is not None
    return ev


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    """Four runs, each reviewed by a vouching reviewer (every surviving mutant `equivalent`, with a
    reason): "equiv" tasks fix clamp() and also write `value <= low` for `value < low`, so their one
    surviving mutant (that line reverted) is truly equivalent; "constant" tasks' test accepts
    `return None` above the range (their one survivor is a return_constant mutant)."""
    root = tmp_path_factory.mktemp("equivalence")
    equiv_code = samples.MATHX_FIXED.replace("    if value < low:\n", "    if value <= low:\n")
    cands = []
    for run_id, code, tests, bound in (
            ("equiv-default", equiv_code, samples.TEST_BASE + samples.TEST_ABOVE, None),
            ("equiv-raised", equiv_code, samples.TEST_BASE + samples.TEST_ABOVE, 1),
            ("constant-default", samples.MATHX_FIXED, ABOVE_NOT_LOW, None),
            ("constant-raised", samples.MATHX_FIXED, ABOVE_NOT_LOW, 5)):
        src = _pr(root / "repos", run_id, code, tests, "Fix clamp() above the range")
        cands.append(candidate(run_id, src, runtimes={"author": "oracle", "reviewer": "command", "solver": "oracle"},
                               runtime_options={"reviewer": agent_options("reviewer", "--judge-mutants=equivalent")},
                               **({"quality": {"max_equivalent_mutants": bound}} if bound is not None else {})))
    plan = local_plan(cands, isolation=ISOLATION, max_attempts=1,
                      defaults={"quality": {"max_repairs": 0}, "worker_reservation_usd": 0.1})
    d = root / "camp"
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(d))
    st = tick_until_done(d, timeout=400)
    assert ended(st) == {
        "equiv-default": ("generated_unverified", "weak_tests", "equivalence_over_bound"),
        "equiv-raised": ("verified", None, None),
        "constant-default": ("generated_unverified", "weak_tests", "equivalence_over_bound"),
        "constant-raised": ("generated_unverified", "weak_tests", "equivalence_over_bound")}
    return d


def test_under_the_default_a_vouching_reviewer_verifies_nothing_and_is_told_why(campaign):
    for run_id in ("equiv-default", "constant-default"):
        review = review_of(campaign, run_id)
        assert review.max_equivalent_mutants == 0 and review.equivalent_excused == []
        assert review.equivalent_claimed == review.equivalent_refused and len(review.equivalent_claimed) == {"equiv-default": 1, "constant-default": 3}[run_id]
        judged = {m["name"]: m for m in review.verdict.model_extra["mutants"]}
        assert judged[review.equivalent_claimed[0]]["reason"].startswith("the fake reviewer judges")   # kept
        prompts = [p.read_text() for p in sorted((run_dir(campaign, run_id) / "sessions").glob("*-reviewer/prompt.md"))]
        assert "quality.max_equivalent_mutants = 0" in prompts[0]          # told before it answers
        assert len(prompts) == 2 and "## Your previous answer was refused (equivalence over bound)" in prompts[1]
        assert "judge them `weak_tests`" in prompts[1]
        assert [e["detail"].split(":")[0] for e in events(campaign, run_id)
                if e["kind"] == "review_correction"] == ["equivalence over bound"]
        end = [e for e in events(campaign, run_id) if e["kind"] == "ended"][-1]
        assert "which does not excuse it" in end["detail"]


def test_a_raised_bound_excuses_the_claims_but_never_a_constant_return(campaign):
    raised = review_of(campaign, "equiv-raised")
    assert raised.max_equivalent_mutants == 1 and raised.equivalent_refused == []
    assert len(raised.equivalent_excused) == 1 and raised.equivalent_excused == raised.equivalent_claimed
    constant = review_of(campaign, "constant-raised")
    assert constant.equivalent_excused == [] and len(constant.equivalent_refused) == 3     # return 42, 10, None
    assert "it returns a constant or None" in constant.equivalent_refused_why
    # the excused count is shown wherever the mutation score is: status, report.md, the export
    rows = {r["run_id"]: r for r in status_json(campaign)["ended"]}
    assert rows["equiv-raised"]["quality"].startswith("mutants 9/10 (equivalent 1) solved 1/1")
    assert rows["equiv-default"]["quality"] == "mutants 9/10"          # nothing excused: no review accepted
    report = (run_dir(campaign, "equiv-raised") / "report.md").read_text()
    assert f"- excused as equivalent (quality.max_equivalent_mutants = 1): {raised.equivalent_excused[0]}" in report
    out = campaign.parent / "dataset"
    sweep("export", str(out), "--campaign", str(campaign), "--include-unverified")
    meta = tomllib.loads((out / "equiv-raised" / "task.toml").read_text())["metadata"]["sweep"]["quality"]
    assert meta["mutants_excused"] == 1 and meta["max_equivalent_mutants"] == 1
    assert [m["name"] for m in meta["mutants_equivalent"]] == raised.equivalent_excused
    assert meta["mutants_equivalent"][0]["reason"].startswith("the fake reviewer judges")
    assert meta["mutation_score"] == pytest.approx(9 / 10)
