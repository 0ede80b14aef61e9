"""Per-test evidence through sweep's harness for unittest and pytest, and FAIL_TO_PASS / PASS_TO_PASS.

Real bundles (built from real git repositories by the oracle author), real trials through the local
provider (bubblewrap where available), real test runners.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import shlex

from sweep.harbor.harness import resolve
from sweep.harbor.junit import PASSED, ReportProblem, compare_runs, parse_junit
from sweep.harbor.runners import UnknownRunner
from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.harbor.trial import run_trial
from sweep.providers import get_provider


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env)
    return done.stdout.strip()


def _repo(root: Path, base_files: dict[str, str], head_files: dict[str, str], test_command: str) -> dict:
    repo = root / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")

    def commit(files: dict[str, str], msg: str) -> str:
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", msg)
        return _git(repo, "rev-parse", "HEAD")

    base = commit(base_files, "base")
    head = commit(head_files, "fix")
    return {"kind": "git", "repo": str(repo), "base": base, "head": head, "title": "t", "body": "b",
            "test_command": test_command}


BASE = {"calc.py": "def double(x):\n    return x + x\n",
        "tests/__init__.py": "",
        "tests/test_calc.py": "import unittest\nfrom calc import double\n\n"
                              "class DoubleTest(unittest.TestCase):\n    def test_double(self):\n"
                              "        self.assertEqual(double(2), 4)\n"}
NEW_TEST = ("import unittest\nfrom calc import triple\n\n"
            "class TripleTest(unittest.TestCase):\n"
            "    def test_triple(self):\n        self.assertEqual(triple(2), 6)\n"
            "    def test_triple_cases(self):\n"
            "        for x in (0, 1, 5):\n            with self.subTest(x=x):\n"
            "                self.assertEqual(triple(x), 3 * x)\n"
            "    @unittest.skip('not yet')\n    def test_skipped(self):\n        pass\n")
HEAD = {"calc.py": BASE["calc.py"] + "\ndef triple(x):\n    return 3 * x\n", "tests/test_triple.py": NEW_TEST}


def _trials(bundle: Path, tmp: Path, command: str):
    provider = get_provider("local")
    harness = resolve(shlex.split(command))
    out = {}
    for kind in ("empty", "reference"):
        res = run_trial(bundle, kind, provider=provider, workdir=tmp / kind, timeout_s=120, harness=harness)
        out[kind] = res.results if res.results is not None else ReportProblem(res.results_problem or res.detail)
        out[kind + "_reward"] = res.reward
    return out


def test_unittest_runner_reports_each_test_and_a_module_that_fails_to_import(tmp_path):
    src = _repo(tmp_path, BASE, HEAD, "python3 -m unittest -q")
    bundle = tmp_path / "task"
    build_bundle_from_git(src, bundle)
    runs = _trials(bundle, tmp_path, src["test_command"])
    assert (runs["empty_reward"], runs["reference_reward"]) == (0.0, 1.0)
    after = runs["reference"]
    assert after["tests.test_triple.TripleTest.test_triple"] == PASSED
    assert after["tests.test_triple.TripleTest.test_triple_cases"] == PASSED
    assert after["tests.test_triple.TripleTest.test_skipped"] == "skipped"
    # before the fix `from calc import triple` fails: the module's tests never load
    before = runs["empty"]
    assert "tests.test_triple.TripleTest.test_triple" not in before
    assert before["tests.test_calc.DoubleTest.test_double"] == PASSED
    assert any(status == "error" for status in before.values())
    cmp = compare_runs([before], [after])
    assert cmp.fail_to_pass == ["tests.test_triple.TripleTest.test_triple",
                                "tests.test_triple.TripleTest.test_triple_cases"]
    assert cmp.pass_to_pass == ["tests.test_calc.DoubleTest.test_double"]
    assert cmp.as_evidence()["ok"] is True


def test_a_failing_subtest_fails_its_test(tmp_path):
    head = {"calc.py": BASE["calc.py"] + "\ndef triple(x):\n    return 3 * x if x else 1\n",
            "tests/test_triple.py": NEW_TEST}
    src = _repo(tmp_path, BASE, head, "python3 -m unittest")
    bundle = tmp_path / "task"
    build_bundle_from_git(src, bundle)
    runs = _trials(bundle, tmp_path, src["test_command"])
    assert runs["reference_reward"] == 0.0
    assert runs["reference"]["tests.test_triple.TripleTest.test_triple_cases"] == "failed"
    assert runs["reference"]["tests.test_triple.TripleTest.test_triple"] == PASSED


def test_pytest_reports_each_test_by_its_node_id(tmp_path):
    pytest_tests = {"tests/test_triple.py": "from calc import triple\n\n\ndef test_triple():\n"
                                            "    assert triple(2) == 6\n",
                    "calc.py": HEAD["calc.py"]}
    base = {"calc.py": BASE["calc.py"],
            "tests/test_calc.py": "from calc import double\n\n\ndef test_double():\n    assert double(2) == 4\n"}
    src = _repo(tmp_path, base, pytest_tests, f"{sys.executable} -m pytest -q -p no:cacheprovider")
    bundle = tmp_path / "task"
    build_bundle_from_git(src, bundle)
    runs = _trials(bundle, tmp_path, src["test_command"])
    assert (runs["empty_reward"], runs["reference_reward"]) == (0.0, 1.0)
    assert runs["reference"]["tests/test_triple.py::test_triple"] == PASSED
    cmp = compare_runs([runs["empty"]], [runs["reference"]])
    assert cmp.fail_to_pass == ["tests/test_triple.py::test_triple"]
    assert cmp.pass_to_pass == ["tests/test_calc.py::test_double"]


def test_no_runner_and_no_fail_to_pass_are_not_evidence(tmp_path):
    """A command no runner recognises (here `true`) has no per-test results: named, not ok; a
    reference run without per-test results leaves FAIL_TO_PASS unknown."""
    src = _repo(tmp_path, BASE, HEAD, "true")
    bundle = tmp_path / "task"
    build_bundle_from_git(src, bundle)
    with pytest.raises(UnknownRunner, match="'true'.*supported: pytest"):
        _trials(bundle, tmp_path, "true")
    ev = compare_runs([{}], [ReportProblem("python -m unittest (through sweep's helper) wrote no JUnit XML report")]
                      ).as_evidence()
    assert ev["ok"] is False and "no JUnit XML report" in ev["detail"]
    same = {"a.t": PASSED}
    ev = compare_runs([same, same], [same, same]).as_evidence()
    assert ev["ok"] is False and ev["fail_to_pass"] == [] and "FAIL_TO_PASS is empty" in ev["detail"]


def test_compare_runs_needs_a_pass_in_every_reference_run_and_none_before():
    a = {"t.ok": PASSED, "t.new": PASSED, "t.flaky": PASSED}
    b = {"t.ok": PASSED, "t.new": PASSED, "t.flaky": "failed"}
    before_1 = {"t.ok": PASSED, "t.new": "failed", "t.flaky": "failed"}
    before_2 = {"t.ok": PASSED, "t.new": PASSED, "t.flaky": "failed"}
    assert compare_runs([before_1], [a, b]).fail_to_pass == ["t.new"]          # flaky after: not counted
    assert compare_runs([before_1, before_2], [a, a]).fail_to_pass == ["t.flaky"]  # passed once before: not F2P


XXE = b"<!DOCTYPE x [<!ENTITY a SYSTEM 'file:///etc/passwd'>]><testsuite><testcase name='&a;'/></testsuite>"
BOMB = b"<!DOCTYPE x [<!ENTITY a 'aaaaaaaaaa'><!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;'>]><testsuite/>"


@pytest.mark.parametrize("data", [b"", b"<testsuite", XXE, BOMB])
def test_hostile_or_broken_reports_are_refused_not_trusted(data):
    with pytest.raises(ReportProblem):
        parse_junit(data)
