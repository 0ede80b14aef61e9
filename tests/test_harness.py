"""sweep's harness (sweep/harbor/harness.py): what the `verifier` gate compares, the solver's test
tree put back, the reward from observed results, and ids the bundle really has. Real bundles from
real git repositories; the campaign-level attacks are in tests/security/test_verifier_forgery.py."""
from __future__ import annotations

import json
import shlex

import pytest

from sweep.harbor.harness import (TEST_IDS, differences, ghost_ids, harness_files, resolve, restore_test_tree, score,
                                  write_harness)
from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.harbor.runners import Observed, get_runner
from sweep.harbor.samples import make_verified_pr
from sweep.harbor.verification import verifier_gate
from tests.campaigns import sweep, write_plan
from tests.fakes.runs import candidate, local_plan


@pytest.fixture
def bundle(tmp_path):
    src = make_verified_pr(tmp_path / "repos", "mathx")
    out = tmp_path / "task"
    build_bundle_from_git(src, out)
    return out, resolve(shlex.split(src["test_command"]))


def test_the_oracles_bundle_carries_exactly_sweeps_harness(bundle):
    out, harness = bundle
    assert differences(out, harness) == []
    assert (out / "tests" / "runner.txt").read_text() == "unittest\n"
    for rel, data in harness_files(harness).items():
        assert (out / rel).read_bytes() == data


def test_any_change_to_the_harness_is_a_named_difference(bundle):
    out, harness = bundle
    test_sh = out / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace('exit "$status"', "exit 0"))
    (out / "tests" / "run_argv.txt").write_text("true\n")
    (out / TEST_IDS).write_text("tests.test_mathx.X.test_y\n")
    found = differences(out, harness)
    assert any(d.startswith("tests/test.sh: differs") and "exit 0" in d for d in found), found
    assert any(d.startswith("tests/run_argv.txt: differs") for d in found), found
    assert any(d.startswith(f"{TEST_IDS}: present") for d in found), found
    write_harness(out, harness)                     # what every trial does before it runs
    assert differences(out, harness) == []


def test_where_the_tests_run_is_the_plans_and_a_forged_test_workdir_is_refused(bundle, tmp_path):
    out, harness = bundle
    workdir = out / "tests" / "test_workdir.txt"
    # the plan names no test_workdir: an author's test_workdir.txt (tests run in a directory of its
    # choosing, e.g. one holding tests that always pass) fails the gate, named
    workdir.write_text("tests\n")
    _, gate = verifier_gate(out, "python3 -m unittest -q", None)
    assert gate["ok"] is False and "tests/test_workdir.txt: present" in gate["detail"], gate
    write_harness(out, harness)                     # a trial's copy loses it before anything runs
    assert not workdir.exists() and verifier_gate(out, "python3 -m unittest -q", None)[1]["ok"] is True
    # the plan names one: the bundle must say exactly it
    src = make_verified_pr(tmp_path / "repos2", "mathx")
    sub = tmp_path / "task-sub"
    build_bundle_from_git({**src, "test_workdir": "tests"}, sub)
    assert (sub / "tests" / "test_workdir.txt").read_text() == "tests\n"
    assert verifier_gate(sub, src["test_command"], None, "tests")[1]["ok"] is True
    (sub / "tests" / "test_workdir.txt").write_text("docs\n")
    _, gate = verifier_gate(sub, src["test_command"], None, "tests")
    assert gate["ok"] is False and "tests/test_workdir.txt: differs" in gate["detail"] and "'docs'" in gate["detail"]
    (sub / "tests" / "test_workdir.txt").unlink()
    _, gate = verifier_gate(sub, src["test_command"], None, "tests")
    assert gate["ok"] is False and "tests/test_workdir.txt: missing" in gate["detail"], gate
    _, gate = verifier_gate(sub, src["test_command"], None, "../elsewhere")
    assert gate["ok"] is False and "test_workdir" in gate["detail"], gate


def test_a_solvers_planted_tests_are_removed_and_the_bases_restored(bundle, tmp_path):
    out, _harness = bundle
    repo = tmp_path / "solver-repo"
    import shutil
    shutil.copytree(out / "environment" / "repo", repo)
    (repo / "tests" / "test_000_forge.py").write_text("import os\nos._exit(0)\n")
    (repo / "conftest.py").write_text("raise SystemExit(0)\n")
    (repo / "tests" / "test_mathx.py").write_text("# emptied by the solver\n")
    (repo / "mathx.py").write_text((repo / "mathx.py").read_text() + "\n# the solver's change\n")
    removed = restore_test_tree(repo, out / "environment" / "repo")
    assert sorted(removed) == ["conftest.py", "tests/test_000_forge.py"]
    assert (repo / "tests" / "test_mathx.py").read_bytes() == (out / "environment/repo/tests/test_mathx.py").read_bytes()
    assert (repo / "mathx.py").read_text().endswith("# the solver's change\n")    # the code is the solver's


def test_the_reward_needs_every_recorded_id_reported_passed_and_exit_zero():
    runner = get_runner("go")
    harness = resolve(["go", "test", "./..."]).selecting(["m::TestA", "m::TestB"])

    def events(*pairs):
        return Observed(output="".join(json.dumps({"Action": a, "Package": "m", "Test": t}) + "\n"
                                       for t, a in pairs).encode())
    assert runner.name == "go"
    assert score(harness, events(("TestA", "pass"), ("TestB", "pass")), 0, file_bytes=None).reward == 1.0
    early = score(harness, events(("TestA", "pass")), 0, file_bytes=None)       # exited 0 before TestB
    assert early.reward == 0.0 and "not reported" in early.detail and "m::TestB" in early.detail
    assert score(harness, events(("TestA", "pass"), ("TestB", "fail")), 1, file_bytes=None).reward == 0.0
    assert score(harness, events(("TestA", "pass"), ("TestB", "pass")), 1, file_bytes=None).reward == 0.0
    assert score(harness, Observed(output=b"no events at all\n"), 0, file_bytes=None).reward == 0.0
    # a forged pass cannot hide a real failure of the same test
    assert score(harness, events(("TestA", "fail"), ("TestA", "pass"), ("TestB", "pass")), 0,
                 file_bytes=None).reward == 0.0
    big = score(harness, events(("TestA", "pass"), ("TestB", "pass")), 0, file_bytes=10)
    assert big.reward is None and "reached the file-size bound" in big.detail


def test_ids_must_be_tests_the_bundles_files_define(bundle):
    out, harness = bundle
    real = "tests.test_mathx.ClampAboveTest.test_above_range_gives_high"
    (out / "tests" / "files" / "tests" / "test_mathx.py").write_text(
        (out / "tests" / "files" / "tests" / "test_mathx.py").read_text() + "\n# GhostTest.test_ghost named in text\n")
    assert ghost_ids(out, harness.runner, [real, "tests.test_mathx.GhostTest.test_ghost",
                                           "tests.test_other.ClampAboveTest.test_above_range_gives_high"]) == [
        "tests.test_mathx.GhostTest.test_ghost", "tests.test_other.ClampAboveTest.test_above_range_gives_high"]
    pytest_runner = get_runner("pytest")
    assert ghost_ids(out, pytest_runner, ["tests/test_mathx.py::ClampAboveTest::test_above_range_gives_high",
                                          "tests/test_mathx.py::test_ghost[1]"]) == ["tests/test_mathx.py::test_ghost[1]"]


def test_the_plans_test_runner_is_checked_at_init(tmp_path):
    src = make_verified_pr(tmp_path / "repos", "mathx")
    bad = local_plan([candidate("r", src, test_runner="nose")])
    r = sweep("init", str(write_plan(tmp_path / "bad.json", bad)), "--campaign", str(tmp_path / "c1"), check=False)
    assert r.returncode != 0 and "test_runner" in r.stderr and "'nose'" in r.stderr and "pytest" in r.stderr
    assert not (tmp_path / "c1" / "campaign.toml").exists()
    good = local_plan([candidate("r", src, test_runner="unittest")])
    sweep("init", str(write_plan(tmp_path / "good.json", good)), "--campaign", str(tmp_path / "c2"))


def test_a_command_no_runner_reads_fails_the_verifier_gate_naming_it_and_every_runner(bundle):
    from sweep.harbor.runners import RUNNERS
    out, _ = bundle
    harness, gate = verifier_gate(out, "make check", None)
    assert harness is None and gate["ok"] is False
    assert "'make'" in gate["detail"] and "test_runner" in gate["detail"]
    assert all(f"{name} (" in gate["detail"] for name in RUNNERS), gate["detail"]      # the whole list, not cut
    _, gate = verifier_gate(out, "make check", "nose")
    assert gate["ok"] is False and "'nose'" in gate["detail"] and all(f"{n} (" in gate["detail"] for n in RUNNERS)


def _runs(bundle, harness, reference: list[tuple[float | None, dict | None]], empty: list[tuple[float | None, dict | None]]):
    from sweep.harbor.trial import TrialResult
    from sweep.harbor.verification import GateRuns
    runs = GateRuns(bundle, harness)
    for kind, trials in (("reference", reference), ("empty", empty)):
        for reward, results in trials:
            runs.add(kind, TrialResult(reward, True, f"reward {reward}", 1.0, solution=kind, results=results,
                                       results_problem=None if results is not None else "no report"))
    return runs.standard_gates()["reference"]


def test_a_test_failing_with_and_without_the_fix_does_not_fail_the_reference(bundle):
    """The whole suite's exit was the reference's reward: one unrelated test that cannot pass in the
    sandbox (before and after the fix) blocked a fix whose FAIL_TO_PASS was right."""
    out, harness = bundle
    P, F, E = "passed", "failed", "error"
    before = {"t.old": P, "t.new": F, "t.needs_metadata": E}
    after = {"t.old": P, "t.new": P, "t.needs_metadata": E}
    gate = _runs(out, harness, [(0.0, after), (0.0, after)], [(0.0, before), (0.0, before)])
    assert gate["ok"] is True and gate["fails_regardless"] == ["t.needs_metadata"], gate
    assert "1 test(s) fail with and without the fix" in gate["detail"]
    # it is not the reference's to break: a test passing before the fix and failing after it
    gate = _runs(out, harness, [(0.0, {**after, "t.old": F})], [(0.0, before)])
    assert gate["ok"] is False and "fails_regardless" not in gate
    # a test only the reference has, failing; one empty run where the test passed; no per-test results
    assert _runs(out, harness, [(0.0, {**after, "t.added": F})], [(0.0, before)])["ok"] is False
    assert _runs(out, harness, [(0.0, after)], [(0.0, before), (0.0, {**before, "t.needs_metadata": P})])["ok"] is False
    assert _runs(out, harness, [(0.0, None)], [(0.0, before)])["ok"] is False
    # nothing failed, yet the runner exited non-zero (it crashed after its report): that still fails
    assert _runs(out, harness, [(0.0, {"t.old": P, "t.new": P})], [(0.0, before)])["ok"] is False
    assert _runs(out, harness, [(None, after)], [(0.0, before)])["ok"] is False
    # a fix that fixes nothing (its new test fails after it too): the reference fails, as before
    assert _runs(out, harness, [(0.0, {**after, "t.new": F})], [(0.0, before)])["ok"] is False


BROKEN_REGARDLESS = ("import importlib.metadata\nimport unittest\n\n\nclass MetadataTest(unittest.TestCase):\n"
                     "    def test_needs_an_installed_distribution(self):\n"
                     "        importlib.metadata.version('sweep-no-such-distribution')\n")


def test_a_fix_verifies_though_an_unrelated_test_fails_before_and_after_it(tmp_path):
    """One campaign: the PR's repository has a test that needs installed package metadata, which
    the sandbox does not have; the fix still ends verified, that test in neither list."""
    import json as _json

    from runstate import load_record, run_dir
    from tests.campaigns import tick_until_done
    src = make_verified_pr(tmp_path / "repos", extra_files={"tests/test_metadata.py": BROKEN_REGARDLESS})
    plan = local_plan([candidate("r1", src)], defaults={"quality": {"gate_repeats": 1, "run_rollout": False}})
    camp = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(camp))
    st = tick_until_done(camp, timeout=240)
    rec = load_record(run_dir(camp, "r1")).value
    gates = _json.loads(sorted((run_dir(camp, "r1") / "evidence").glob("gates-r*.json"))[-1].read_text())["gates"]
    assert st["outcomes"] == {"verified": 1}, (rec, _json.dumps(gates)[:2000])
    assert gates["reference"]["fails_regardless"] == ["tests.test_metadata.MetadataTest.test_needs_an_installed_distribution"]
    f2p = gates["fail_to_pass"]["fail_to_pass"]
    assert len(f2p) == 1 and "above" in f2p[0], gates["fail_to_pass"]
    assert not [i for i in gates["fail_to_pass"]["pass_to_pass"] if "metadata" in i.lower()]
    assert gates["selected"]["ok"] is True
