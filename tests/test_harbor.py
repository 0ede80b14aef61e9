"""Harbor bundles on real git repositories: the mechanical PR-to-task builder, validation, the
content digest, and trials (reference, empty, a solver's repository) through the local provider."""
from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from runstate.errors import SweepError
from sweep.harbor import bundle_sha256, is_test_path, run_trial, unsafe_relpath, validate_bundle
from sweep.harbor.pr_bundle import AuthorRefusal, build_bundle_from_git
from sweep.harbor.samples import SAMPLE_BUILDERS, make_pr_repo
from sweep.providers.local import LocalProvider
from sweep.providers.local.bwrap import probe_bwrap

HAVE_BWRAP = probe_bwrap()[0] is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not usable here (.ci/run installs it)")
ISOLATIONS = [pytest.param("bwrap", marks=needs_bwrap), "none"]


@pytest.fixture(scope="module")
def verified_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verified")
    source = make_pr_repo(root / "repos", "verified")
    build_bundle_from_git(source, root / "task")
    return root / "task"


def trial(bundle, solution, tmp_path, isolation="none", name=None):
    """A trial as the controller runs it: through sweep's harness for the bundle's test command."""
    from sweep.harbor.harness import resolve
    provider = LocalProvider(isolation=isolation, kill_grace_s=1.0)
    command = bundle / "tests" / "test_command.txt"
    harness = resolve(command.read_text().splitlines()) if command.is_file() else None
    return run_trial(bundle, solution, provider=provider, workdir=tmp_path / (name or f"trial-{solution}"),
                     timeout_s=120, harness=harness)


# --- sample repositories ------------------------------------------------------------------------

def test_every_sample_kind_is_a_real_repository_with_stable_shas(tmp_path):
    for kind in SAMPLE_BUILDERS:
        first = make_pr_repo(tmp_path / "a", kind)
        again = make_pr_repo(tmp_path / "b", kind)
        assert (first["base"], first["head"]) == (again["base"], again["head"])
        assert first["kind"] == "git" and Path(first["repo"]).is_absolute()
        assert first["test_command"] == "python3 -m unittest -q"
        log = subprocess.run(["git", "-C", first["repo"], "rev-list", "--count", first["head"]],
                             capture_output=True, text=True, check=True)
        assert log.stdout.strip() == "2"


def test_sample_tests_fail_before_and_pass_after_the_fix(tmp_path):
    source = make_pr_repo(tmp_path, "verified")

    def unittest_at(commit):
        subprocess.run(["git", "-C", source["repo"], "checkout", "-q", commit], check=True)
        return subprocess.run(["python3", "-m", "unittest", "-q"], cwd=source["repo"], capture_output=True).returncode

    assert unittest_at(source["head"]) == 0
    subprocess.run(["git", "-C", source["repo"], "checkout", "-q", source["head"], "--", "."], check=True)
    subprocess.run(["git", "-C", source["repo"], "checkout", "-q", source["base"], "--", "mathx.py"], check=True)
    assert subprocess.run(["python3", "-m", "unittest", "-q"], cwd=source["repo"], capture_output=True).returncode != 0


# --- the mechanical bundle -------------------------------------------------------------------------

def test_pr_becomes_a_harbor_bundle(verified_bundle):
    b = verified_bundle
    assert validate_bundle(b) == []
    config = tomllib.loads((b / "task.toml").read_text())
    assert config["version"] == "1.0" and config["verifier"]["timeout_sec"] > 0
    assert config["metadata"]["sweep"]["test_files"] == 1
    assert (b / "instruction.md").read_text().startswith("# Fix clamp()")
    assert "FROM " in (b / "environment" / "Dockerfile").read_text()
    repo = b / "environment" / "repo"
    assert "return low\n" in (repo / "mathx.py").read_text().split("if value > high:")[1]   # base: the bug
    assert not (repo / ".git").exists()
    assert (b / "tests" / "test_files.txt").read_text() == "tests/test_mathx.py\n"
    assert "test_above_range_gives_high" in (b / "tests" / "files" / "tests" / "test_mathx.py").read_text()
    assert (b / "tests" / "test_command.txt").read_text() == "python3\n-m\nunittest\n-q\n"
    patch = (b / "solution" / "solution.patch").read_text()
    assert "mathx.py" in patch and "test_mathx" not in patch
    assert os.access(b / "tests" / "test.sh", os.X_OK) and os.access(b / "solution" / "solve.sh", os.X_OK)
    assert 'LOGS_DIR="${LOGS_DIR:-/logs}"' in (b / "tests" / "test.sh").read_text()


@pytest.mark.parametrize("kind,reason", [("no_tests", "no_test_changes")])
def test_prs_that_cannot_become_tasks_are_refused(tmp_path, kind, reason):
    with pytest.raises(AuthorRefusal) as info:
        build_bundle_from_git(make_pr_repo(tmp_path, kind), tmp_path / "task")
    assert info.value.reason == reason
    assert not (tmp_path / "task").exists()


def test_a_pr_that_only_changes_tests_has_no_reference_solution(tmp_path):
    source = make_pr_repo(tmp_path, "verified")
    repo = source["repo"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}
    Path(repo, "tests", "test_more.py").write_text("import unittest\n")
    subprocess.run(["git", "-C", repo, "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "tests only"], check=True, env=env)
    head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    with pytest.raises(AuthorRefusal) as info:
        build_bundle_from_git({**source, "base": source["head"], "head": head}, tmp_path / "task")
    assert info.value.reason == "no_source_changes"


@pytest.mark.parametrize("bad", [{"kind": "svn"}, {"repo": "relative/path"}, {"base": "HEAD~1"},
                                 {"head": "--output=/tmp/x"}, {"test_command": ""}, {"test_command": "a 'b"}])
def test_bad_sources_are_refused_before_git_runs(tmp_path, bad):
    source = {**make_pr_repo(tmp_path, "verified"), **bad}
    with pytest.raises(AuthorRefusal) as info:
        build_bundle_from_git(source, tmp_path / "task")
    assert info.value.reason == "bad_source"


@pytest.mark.parametrize("path,is_test", [
    ("tests/test_x.py", True), ("pkg/tests/helpers.py", True), ("test_x.py", True), ("x_test.go", True),
    ("src/app.spec.ts", True), ("conftest.py", True), ("src/app.py", False), ("docs/testing.md", False),
    ("latest/x.py", False), ("contest.py", False),
])
def test_test_paths_are_recognised(path, is_test):
    assert is_test_path(path) is is_test


@pytest.mark.parametrize("path", ["", "/abs", "a/../b", "a//b", "./a", "a\nb", "a\x00b", "a\\b", "a/\x7f"])
def test_unsafe_relative_paths_are_named(path):
    assert unsafe_relpath(path)


# --- trials ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_reference_scores_1_and_empty_scores_0(verified_bundle, tmp_path, isolation):
    ref = trial(verified_bundle, "reference", tmp_path, isolation)
    empty = trial(verified_bundle, "empty", tmp_path, isolation)
    assert (ref.reward, ref.ok) == (1.0, True), ref.detail
    assert (empty.reward, empty.ok) == (0.0, True), empty.detail
    assert ref.environment_fidelity == "host" and ref.isolation == isolation
    assert (tmp_path / "trial-reference" / "logs" / "verifier" / "reward.txt").read_text() == "1\n"
    assert "FAIL" in (tmp_path / "trial-empty" / "logs" / "verifier" / "test-output.txt").read_text()


def test_a_trial_never_changes_the_bundle(verified_bundle, tmp_path):
    digest = bundle_sha256(verified_bundle)
    trial(verified_bundle, "reference", tmp_path)
    assert bundle_sha256(verified_bundle) == digest


def test_a_solvers_repository_is_scored_as_it_is(verified_bundle, tmp_path):
    solved = tmp_path / "solver-repo"
    shutil.copytree(verified_bundle / "environment" / "repo", solved)
    text = (solved / "mathx.py").read_text().replace("    if value > high:\n        return low",
                                                     "    if value > high:\n        return high")
    (solved / "mathx.py").write_text(text)
    assert trial(verified_bundle, solved, tmp_path, name="t-solved").reward == 1.0
    # A solver that edits the tests instead of the code gains nothing: test.sh reinstalls them.
    cheat = tmp_path / "cheat-repo"
    shutil.copytree(verified_bundle / "environment" / "repo", cheat)
    (cheat / "tests" / "test_mathx.py").write_text("import unittest\n")
    assert trial(verified_bundle, cheat, tmp_path, name="t-cheat").reward == 0.0


def test_a_symlink_planted_at_a_test_path_cannot_redirect_the_copy(verified_bundle, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    repo = tmp_path / "planted"
    shutil.copytree(verified_bundle / "environment" / "repo", repo)
    (repo / "tests" / "test_mathx.py").unlink()
    os.symlink(target, repo / "tests" / "test_mathx.py")
    result = trial(verified_bundle, repo, tmp_path, name="t-planted")
    assert target.read_text() == "keep me"
    assert result.reward == 0.0


def test_tests_that_pass_before_the_fix_make_empty_score_1(tmp_path):
    build_bundle_from_git(make_pr_repo(tmp_path / "repos", "passes_before"), tmp_path / "task")
    assert trial(tmp_path / "task", "empty", tmp_path).reward == 1.0


def test_flaky_sample_with_a_counter_alternates(tmp_path):
    counter = tmp_path / "flaky-counter"
    build_bundle_from_git(make_pr_repo(tmp_path / "repos", "flaky", counter_file=counter), tmp_path / "task")
    rewards = [trial(tmp_path / "task", "reference", tmp_path, name=f"t{i}").reward for i in range(3)]
    assert rewards == [1.0, 0.0, 1.0]
    assert counter.read_text() == "3"


def test_a_broken_solution_gives_no_reward_and_says_why(verified_bundle, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(verified_bundle, broken)
    (broken / "solution" / "solution.patch").write_text("not a patch\n")
    result = trial(broken, "reference", tmp_path)
    assert result.reward is None and not result.ok and "solve.sh" in result.detail


def test_an_invalid_bundle_is_not_run(tmp_path):
    (tmp_path / "b").mkdir()
    result = trial(tmp_path / "b", "reference", tmp_path)
    assert result.reward is None and result.detail.startswith("invalid bundle")
    assert not (tmp_path / "trial-reference").exists()


def test_the_workdir_must_be_fresh(verified_bundle, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("old")
    with pytest.raises(SweepError):
        trial(verified_bundle, "reference", tmp_path, name="used")


# --- validation and digest -------------------------------------------------------------------------

def broken_copy(bundle: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(bundle, dst, symlinks=True)
    return dst


@pytest.mark.parametrize("damage,expected", [
    (lambda b: (b / "task.toml").unlink(), "task.toml: missing file"),
    (lambda b: (b / "task.toml").write_text("version = "), "not valid TOML"),
    (lambda b: (b / "task.toml").write_text("[verifier]\ntimeout_sec = 1\n"), "missing version"),
    (lambda b: (b / "instruction.md").write_text("  \n"), "instruction.md: blank"),
    (lambda b: shutil.rmtree(b / "solution"), "solution/: missing directory"),
    (lambda b: shutil.rmtree(b / "environment" / "repo"), "environment/repo/: missing"),
    (lambda b: (b / "tests" / "test.sh").write_text("#!/bin/sh\nexit 0\n"), "never mentions the reward"),
    (lambda b: os.symlink("/etc/passwd", b / "environment" / "repo" / "leak"), "leaves the bundle"),
    (lambda b: os.symlink("../../../../x", b / "tests" / "up"), "leaves the bundle"),
    (lambda b: (b / "tests" / "test_files.txt").write_text("../../etc/passwd\n"), "'..'"),
    (lambda b: (b / "tests" / "test_files.txt").write_text("tests/ghost.py\n"), "has no copy"),
    (lambda b: (b / "tests" / "test_command.txt").write_text(""), "test_command.txt"),
    (lambda b: os.mkfifo(b / "tests" / "pipe"), "not a regular file"),
])
def test_validate_bundle_names_each_problem(verified_bundle, tmp_path, damage, expected):
    bundle = broken_copy(verified_bundle, tmp_path)
    damage(bundle)
    problems = validate_bundle(bundle)
    assert any(expected in p for p in problems), problems


def test_a_symlink_inside_the_bundle_is_fine(verified_bundle, tmp_path):
    bundle = broken_copy(verified_bundle, tmp_path)
    os.symlink("mathx.py", bundle / "environment" / "repo" / "alias.py")
    assert validate_bundle(bundle) == []


def test_bundle_digest_depends_on_paths_and_content_only(verified_bundle, tmp_path):
    digest = bundle_sha256(verified_bundle)
    copy = broken_copy(verified_bundle, tmp_path)
    assert bundle_sha256(copy) == digest
    os.utime(copy / "instruction.md", (0, 0))
    os.chmod(copy / "instruction.md", 0o600)
    (copy / "empty-dir").mkdir()
    assert bundle_sha256(copy) == digest
    (copy / "instruction.md").write_text((copy / "instruction.md").read_text() + " ")
    assert bundle_sha256(copy) != digest
    copy2 = broken_copy(verified_bundle, tmp_path / "2")
    (copy2 / "instruction.md").rename(copy2 / "instructions.md")
    assert bundle_sha256(copy2) != digest
