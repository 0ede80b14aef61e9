"""Probes and mechanical mutants on the real sandbox: a probe is the base plus a patch, scored by the
task's tests through the trial runner with the gates' repeats; whole campaigns show that a task
whose tests accept a mutant no longer ends verified (oracle reviewer: weak_tests; agent reviewer:
its equivalent claims, reasons kept, excuse survivors only within the plan's bound), and that
honest PRs still verify."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from runstate import run_dir
from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.harbor.samples import TEST_BASE, make_pr_repo
from sweep.models.evidence import ProbesEvidence, ReviewEvidence, SolveEvidence, read_evidence
from sweep.providers.local import LocalProvider
from sweep.providers.local.bwrap import probe_bwrap
from sweep.quality.probes import VALID, WRONG, Probe, run_probe
from tests.campaigns import status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, events, local_plan

ISOLATION = "bwrap" if probe_bwrap()[0] is not None else "none"


def clamp_patch(new_line: str) -> bytes:
    """A patch of the verified sample's base: clamp()'s `return low` above the range -> new_line."""
    return ("diff --git a/mathx.py b/mathx.py\n--- a/mathx.py\n+++ b/mathx.py\n@@ -10,3 +10,3 @@\n"
            "     if value > high:\n-        return low\n+" + new_line + "\n     return value\n").encode()


@pytest.fixture(scope="module")
def verified_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe-bundle")
    build_bundle_from_git(make_pr_repo(root / "repos", "verified"), root / "task")
    return root / "task"


# the verified sample's fix with a test that checks one input above the range (issue 22's example)
ONE_INPUT_TEST = TEST_BASE + """

class ClampAboveTest(unittest.TestCase):
    def test_above_range_gives_high(self):
        self.assertEqual(clamp(42, 0, 10), 10)
"""


def one_input_pr(repos: Path, name: str = "one-input") -> dict:
    return make_pr_repo(repos, "verified", name=name, extra_files={"tests/test_mathx.py": ONE_INPUT_TEST})


@pytest.fixture(scope="module")
def one_input_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe-one-input")
    build_bundle_from_git(one_input_pr(root / "repos"), root / "task")
    return root / "task"


def probe_run(bundle: Path, probe: Probe, workdir: Path, repeats: int = 2):
    return run_probe(bundle, probe, provider=LocalProvider(isolation=ISOLATION, kill_grace_s=1.0), workdir=workdir,
                     repeats=repeats, timeout_s=120, env_for_repeat=lambda i: {"PYTHONHASHSEED": str(i + 1)})


def test_a_probe_is_scored_by_the_tasks_tests_with_the_gates_repeats(verified_bundle, one_input_bundle, tmp_path):
    wrong = probe_run(verified_bundle, Probe("zero", WRONG, "above the range", "a constant", clamp_patch("        return 0")),
                      tmp_path / "a")
    assert (wrong.outcome, wrong.rewards) == ("killed", [0.0, 0.0])
    # the hard-coded answer of the one input the test checks: the tests accept it (stops at the first 1)
    hard = probe_run(one_input_bundle, Probe("ten", WRONG, "above the range", "hard-coded",
                                             clamp_patch("        return 10")), tmp_path / "b")
    assert (hard.outcome, hard.rewards) == ("survived", [1.0])
    # the verified sample checks a second input above the range, which rejects it
    two = probe_run(verified_bundle, Probe("ten", WRONG, "above the range", "hard-coded",
                                           clamp_patch("        return 10")), tmp_path / "b2")
    assert (two.outcome, two.rewards) == ("killed", [0.0, 0.0])
    alt = probe_run(verified_bundle, Probe("min", VALID, "above the range", "another correct fix",
                                           clamp_patch("        return min(value, high)")), tmp_path / "c")
    assert (alt.outcome, alt.rewards) == ("accepted", [1.0, 1.0])
    rejected = probe_run(verified_bundle, Probe("bad-alt", VALID, "above", "not actually valid",
                                                clamp_patch("        return value")), tmp_path / "d")
    assert (rejected.outcome, rejected.rewards) == ("rejected", [0.0])
    broken = probe_run(verified_bundle, Probe("nope", WRONG, "x", "does not apply",
                                              clamp_patch("        return 1").replace(b"return low", b"return lo")),
                       tmp_path / "e")
    assert broken.outcome == "not_applicable" and broken.rewards == [] and "does not apply" in broken.detail
    # the base repository of the bundle is never touched by a probe
    assert "return low\n    return value" in (verified_bundle / "environment/repo/mathx.py").read_text()
    assert wrong.as_evidence()["diff"].startswith("diff --git a/mathx.py")


def literal_mutants(bundle: Path) -> list:
    from sweep.quality.mutants import derive_mutants, test_literals
    from sweep.quality.probes import applies_to, test_change_lines
    literals = test_literals(test_change_lines(bundle))
    patch = (bundle / "solution/solution.patch").read_bytes()
    return [m for m in derive_mutants(patch, literals=literals, accept=applies_to(bundle / "environment/repo"))
            if "a literal of the PR's tests" in m.description]


def test_a_one_input_test_accepts_its_hard_coded_answer_and_several_inputs_kill_it(verified_bundle, one_input_bundle,
                                                                                   tmp_path):
    from sweep.quality.probes import test_change_lines
    # only the PR's added test lines count: the base's clamp(-5, 0, 10) and clamp(3, ...) are not its literals
    assert [rel for rel, _ in test_change_lines(one_input_bundle)] == ["tests/test_mathx.py"]
    assert "clamp(-5" not in test_change_lines(one_input_bundle)[0][1]
    one = literal_mutants(one_input_bundle)
    assert [m.description.split(": ", 1)[1].split(" (")[0] for m in one] == ["return 42", "return 0", "return 10"]
    runs = {m.description.split(": ", 1)[1].split(" (")[0]: probe_run(
        one_input_bundle, Probe(m.id, WRONG, m.kind, m.description, m.patch), tmp_path / f"one-{i}")
        for i, m in enumerate(one)}
    assert {k: r.outcome for k, r in runs.items()} == {"return 42": "killed", "return 0": "killed",
                                                       "return 10": "survived"}
    # the verified sample's test checks a second input above the range: every literal constant is killed
    mutants = literal_mutants(verified_bundle)
    assert {"return 10", "return 5"} <= {m.description.split(": ", 1)[1].split(" (")[0] for m in mutants}
    for i, m in enumerate(mutants):
        outcome = probe_run(verified_bundle, Probe(m.id, WRONG, m.kind, m.description, m.patch),
                            tmp_path / f"several-{i}")
        assert outcome.outcome == "killed", m.description


def ended(st: dict) -> dict[str, tuple[str, str | None]]:
    return {e["run_id"]: (e["outcome"], e["reason"]) for e in st["ended"]}


def probes_of(campaign: Path, run_id: str) -> ProbesEvidence:
    files = sorted((run_dir(campaign, run_id) / "evidence").glob("probes-r*.json"))
    ev = read_evidence(files[-1], ProbesEvidence)
    assert ev is not None
    return ev


def test_oracle_campaign_verifies_discriminating_tests_and_ends_weak_tests_otherwise(tmp_path):
    repos = tmp_path / "repos"
    cands = [candidate("honest", make_pr_repo(repos, "verified")),
             candidate("one-input", one_input_pr(repos)),
             candidate("weak", make_pr_repo(repos, "weak_tests")),
             candidate("weak-report", make_pr_repo(repos, "weak_tests", name="weak2"),
                       quality={"max_repairs": 0, "mutants": "report"})]
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", local_plan(cands, isolation=ISOLATION))), "--campaign", str(d))
    st = tick_until_done(d, timeout=300)
    assert ended(st) == {"honest": ("verified", None), "one-input": ("generated_unverified", "weak_tests"),
                         "weak": ("generated_unverified", "weak_tests"), "weak-report": ("verified", None)}
    honest = probes_of(d, "honest")
    assert honest.passed and honest.mutation.run == honest.mutation.killed >= 6 and honest.mutation.score == 1.0
    assert {p.mutant_kind for p in honest.probes} == {"return_constant"}
    assert any("return 10" in p.rationale for p in honest.probes)     # a literal of its tests, killed
    # one input above the range: its expected answer as a constant passes the tests
    one = probes_of(d, "one-input")
    assert not one.passed and [p.rationale for p in one.survivors()] == [
        next(p.rationale for p in one.probes if "return 10" in p.rationale)]
    assert all(p.rewards == [0.0, 0.0] for p in honest.probes)       # killed on both of the gates' repeats
    weak = probes_of(d, "weak")
    assert not weak.passed and weak.mutation.survived and weak.mutation.killed < weak.mutation.run
    survivor_kinds = {p.mutant_kind for p in weak.survivors()}
    assert "hunk_left_out" in survivor_kinds or "hunk_alone" in survivor_kinds      # midpoint() never tested
    assert all(p.path == "mathx.py" for p in weak.survivors())
    assert weak.bundle_sha256 == json.loads((run_dir(d, "weak") / "state.json").read_text())["checkpoints"]["gates"][
        "bundle_sha256"]
    report = (run_dir(d, "weak") / "report.md").read_text()
    assert "weak_tests" in report and f"mutation score: {weak.mutation.killed}/{weak.mutation.run}" in report
    assert all(p.name in report for p in weak.survivors())
    assert probes_of(d, "weak-report").mode == "report" and probes_of(d, "weak-report").survivors()
    assert f"mutation score: {honest.mutation.run}/{honest.mutation.run}" in (run_dir(d, "honest") / "report.md").read_text()
    # the export's metadata carries the mutation score and each probe's outcome
    out = tmp_path / "dataset"
    sweep("export", str(out), "--campaign", str(d), "--include-unverified")
    meta = {run: tomllib.loads((out / run / "task.toml").read_text())["metadata"]["sweep"]["quality"]
            for run in ("honest", "weak-report")}
    assert meta["honest"]["mutation_score"] == 1.0 and meta["honest"]["mutants_run"] == honest.mutation.run
    assert meta["honest"]["bundle_sha256"] == honest.bundle_sha256
    reported = probes_of(d, "weak-report")
    assert meta["weak-report"]["mutants_survived"] == reported.mutation.survived
    assert meta["weak-report"]["mutation_score"] == pytest.approx(reported.mutation.killed / reported.mutation.run)
    assert {p["outcome"] for p in meta["weak-report"]["probes"]} == {"killed", "survived"}


@pytest.mark.parametrize("judgement,expected", [("equivalent", ("generated_unverified", "weak_tests")),
                                                ("weak_tests", ("generated_unverified", "weak_tests"))])
def test_an_agent_reviewer_judges_each_surviving_mutant(tmp_path, judgement, expected):
    """Either judgement keeps the weak task from verified: weak_tests asks for a repair, and
    equivalent claims excuse nothing under the default quality.max_equivalent_mutants = 0
    (tests/test_quality_equivalence.py has the bound raised)."""
    src = make_pr_repo(tmp_path / "repos", "weak_tests")
    options = {"reviewer": agent_options("reviewer", f"--judge-mutants={judgement}")}
    cand = candidate("weak", src, runtime_options=options, runtimes={"author": "oracle", "reviewer": "command",
                                                                     "solver": "oracle"})
    plan = local_plan([cand], isolation=ISOLATION, defaults={"quality": {"max_repairs": 0},
                                                              "worker_reservation_usd": 0.1})
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    st = tick_until_done(d, timeout=300)
    assert ended(st) == {"weak": expected}
    probes = probes_of(d, "weak")
    review = read_evidence(sorted((run_dir(d, "weak") / "evidence").glob("review-r*.json"))[-1], ReviewEvidence)
    assert review is not None
    judged = {m["name"]: m for m in review.verdict.model_extra["mutants"]}
    assert set(judged) == {p.name for p in probes.survivors()}       # the prompt listed every survivor
    if judgement == "equivalent":
        assert all(m["reason"].startswith("the fake reviewer judges") for m in judged.values())
    prompt = sorted((run_dir(d, "weak") / "sessions").glob("*-reviewer/prompt.md"))[0].read_text()
    assert "```diff" in prompt and "mutation score" in prompt


def test_a_reviewer_that_leaves_a_survivor_unjudged_does_not_verify(tmp_path):
    src = make_pr_repo(tmp_path / "repos", "weak_tests")
    cand = candidate("weak", src, runtime_options={"reviewer": agent_options("reviewer")},
                     runtimes={"author": "oracle", "reviewer": "command", "solver": "oracle"})
    plan = local_plan([cand], isolation=ISOLATION, max_attempts=1,
                      defaults={"quality": {"max_repairs": 0}, "worker_reservation_usd": 0.1})
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    st = tick_until_done(d, timeout=300)
    assert ended(st) == {"weak": ("blocked", "max_attempted")}
    assert any("without judging each surviving mutant" in (e.get("detail") or "") for e in events(d, "weak"))
    # one correction round, then the attempt fails; the cause says why: the tests accept a wrong
    # solution no reviewer vouched for
    assert [e["detail"].split(":")[0] for e in events(d, "weak") if e["kind"] == "review_correction"] == [
        "unjudged mutant"]
    assert {e["run_id"]: e["cause"] for e in st["ended"]} == {"weak": "weak_tests"}


def test_rollouts_are_judged_and_their_solve_rate_decides(tmp_path):
    repos = tmp_path / "repos"
    strict = {"max_repairs": 0, "rollouts": 3, "allow_unsolved": False}   # the defaults of local_plan allow it
    cmd = {"author": "oracle", "reviewer": "oracle", "solver": "command"}
    cands = [candidate("solved", make_pr_repo(repos, "verified"), quality=strict),
             candidate("unsolved", make_pr_repo(repos, "verified", name="v2"), quality=strict, runtimes=cmd,
                       runtime_options={"solver": agent_options("solver")}),
             candidate("allowed", make_pr_repo(repos, "verified", name="v3"), runtimes=cmd,
                       quality={**strict, "rollouts": 2, "allow_unsolved": True},
                       runtime_options={"solver": agent_options("solver")}),
             candidate("hacked", make_pr_repo(repos, "verified", name="v4"), quality={**strict, "rollouts": 1},
                       runtimes=cmd, runtime_options={"solver": agent_options("solver", "--hack")})]
    plan = local_plan(cands, isolation=ISOLATION, defaults={"worker_reservation_usd": 0.1})
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    st = tick_until_done(d, timeout=400)
    assert ended(st) == {"solved": ("verified", None), "unsolved": ("generated_unverified", "unsolved"),
                         "allowed": ("verified", None), "hacked": ("generated_unverified", "reward_hack")}

    def solve_ev(run_id):
        ev = read_evidence(sorted((run_dir(d, run_id) / "evidence").glob("solve-r*.json"))[-1], SolveEvidence)
        assert ev is not None
        return ev

    ok = solve_ev("solved")
    assert [(r.reward, r.label, r.labelled_by) for r in ok.rollouts] == [(1.0, "legitimate_success", "oracle rules")] * 3
    assert ok.solve_rate == 1.0 and ok.pass_at_k == {"1": 1.0, "2": 1.0, "3": 1.0}
    bad = solve_ev("unsolved")
    assert [(r.reward, r.label) for r in bad.rollouts] == [(0.0, "legitimate_failure")] * 3
    assert bad.solve_rate == 0.0 and bad.pass_at_k["3"] == 0.0
    assert solve_ev("allowed").solve_rate == 0.0
    hack = solve_ev("hacked").rollouts[0]
    assert (hack.reward, hack.label) == (1.0, "reward_hack") and "conftest.py" in hack.label_reason
    rows = {r["run_id"]: r for r in status_json(d)["ended"]}
    assert rows["solved"]["quality"] == "mutants 6/6 solved 3/3 (legitimate_success 3)"
    assert rows["unsolved"]["quality"] == "mutants 6/6 solved 0/3 (legitimate_failure 3)"
    report = (run_dir(d, "unsolved") / "report.md").read_text()
    assert "solve rate: 0/3" in report and "pass@1 0.00" in report
    out = tmp_path / "dataset"
    sweep("export", str(out), "--campaign", str(d), "--include-unverified")
    meta = tomllib.loads((out / "solved" / "task.toml").read_text())["metadata"]["sweep"]
    assert meta["quality"]["solve_rate"] == 1.0 and meta["quality"]["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert meta["quality"]["rollout_labels"] == ["legitimate_success"] * 3
