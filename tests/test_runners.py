"""The runner modules against RECORDED outputs of the real tools (tests/fixtures/runners/, made by
tests/fixtures/runners/record.py; each NOTE.txt names the command and the tool's version), and
each runner's detection and selection.

The fixtures hold what the tools really printed and wrote, including the traps: a pytest test that
prints a forged `PASSED` line, a go test that prints a forged -json event, a cargo test that prints
a forged libtest line, a node test that prints TAP, two tests of one name, a module that does not
import, a planted unittest module that calls os._exit(0) when discovery imports it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from sweep.harbor.runners import RUNNERS, Observed, RunnerProblem, UnknownRunner, get_runner, runner_for
from sweep.harbor.runners.base import MAX_OUTPUT_BYTES, unique_ids
from sweep.harbor.runners.junit_xml import junit_cases

FIXTURES = Path(__file__).parent / "fixtures" / "runners"
P, F, E, S = "passed", "failed", "error", "skipped"


def observed(tool: str, kind: str = "full") -> Observed:
    root = FIXTURES / tool / kind
    reports = {str(p.relative_to(root / "report")): p.read_bytes()
               for p in sorted((root / "report").rglob("*")) if p.is_file()} if (root / "report").is_dir() else {}
    return Observed(output=(root / "output.txt").read_bytes(), reports=reports, repo_dir="/repo")


JS_FULL = {"test/calc.test.js > adds": P, "test/calc.test.js > triple > of two": P,
           "test/calc.test.js > triple > of five": F, "test/calc.test.js > triple > same name": P,
           "test/calc.test.js > triple > same name #2": F, "test/calc.test.js > triple > skipped one": S,
           "test/calc.test.js > triple > nested > deep": P, "test/other.test.js > adds": P}

EXPECTED_FULL = {
    "pytest": {"tests/test_calc.py::test_adds": P, "tests/test_calc.py::TestTriple::test_of_two": P,
               "tests/test_calc.py::test_cases[1-3]": P, "tests/test_calc.py::test_cases[2-6]": P,
               "tests/test_other.py::test_adds": P, "tests/test_broken.py": E,
               "tests/test_calc.py::TestTriple::test_of_five": F, "tests/test_calc.py::test_cases[5-15]": F},
    "go": {"example.com/calc/sub::TestAdd": P, "example.com/calc::TestAdd": P, "example.com/calc::TestTriple/of_2": P,
           "example.com/calc::TestTriple/of_5": F, "example.com/calc::TestTriple/same": P,
           "example.com/calc::TestTriple/same#01": P, "example.com/calc::TestTriple": F,
           "example.com/calc::TestSkipped": S},
    "cargo": {"calc:src/lib.rs::tests::skipped": S, "calc:src/lib.rs::tests::adds": P,
              "calc:src/lib.rs::tests::triple_of_five": F, "it:tests/it.rs::adds": P,
              "calc:doc::src/lib.rs - add (line 3)": P},
    "nextest": {"calc tests::skipped": S, "calc tests::adds": P, "calc tests::triple_of_two": P, "calc::it adds": P,
                "calc tests::triple_of_five": F},
    "node": JS_FULL,
    "jest": {**JS_FULL, "test/calc.test.js > triple 1 is 3": P, "test/calc.test.js > triple 2 is 6": P},
    "vitest": JS_FULL,
    "mocha": {**{k: v for k, v in JS_FULL.items() if "nested" not in k}, "test/calc.test.js > triple nested > deep": P},
    "maven": {"com.example.CalcTest.tripleCases(int)[1]": P, "com.example.CalcTest.tripleCases(int)[2]": P,
              "com.example.CalcTest.adds": P, "com.example.CalcTest.tripleOfFive": F,
              "com.example.CalcTest.skipped": S, "com.example.OtherTest.adds": P},
    "gradle": {"com.example.CalcTest.adds": P, "com.example.CalcTest.tripleOfFive": F,
               "com.example.CalcTest.skipped": S, "com.example.OtherTest.adds": P},
    "tap": {"adds": P, "triple > of two": P, "triple > of five": F, "triple > same name": P,
            "triple > same name #2": F, "triple > skipped one": S, "triple > nested > deep": P, "adds #2": P},
    "junit": {"test.adds": P, "test.of two": P, "test.of five": F, "test.same name": P, "test.same name #2": F,
              "test.skipped one": S, "test.deep": P, "test.adds #2": P},
}


@pytest.mark.parametrize("tool", sorted(EXPECTED_FULL))
def test_recorded_full_run_parses_to_every_test_with_its_outcome(tool):
    assert get_runner(tool).parse(observed(tool)) == EXPECTED_FULL[tool]


def test_forged_lines_printed_by_tests_are_not_results():
    # each fixture's tests print a line in the runner's own result format for a test that does not exist
    assert "tests/test_calc.py::test_ghost" not in get_runner("pytest").parse(observed("pytest"))
    assert "example.com/calc::TestGhost" not in get_runner("go").parse(observed("go"))
    assert not [t for t in get_runner("cargo").parse(observed("cargo")) if "ghost" in t]
    assert not [t for t in get_runner("node").parse(observed("node")) if "printed" in t]
    # nextest shows a failing test's output after its summary (the invocation asks for that)
    assert b"PASS [   0.001s] calc tests::ghost" in observed("nextest").output
    assert "calc tests::ghost" not in get_runner("nextest").parse(observed("nextest"))
    # a Java test that prints a JUnit element: Gradle's report keeps it as text of system-out
    assert b'<testcase name="ghost"' in observed("gradle").reports["collected/0/test/TEST-com.example.CalcTest.xml"]
    assert "com.example.CalcTest.ghost" not in get_runner("gradle").parse(observed("gradle"))


def test_unittest_discovery_imports_a_planted_module_and_selection_does_not():
    # the full run's discovery imported tests/test_planted.py, which called os._exit(0): exit 0,
    # no report at all; the selected run loaded only the named tests
    assert "exit 0" in (FIXTURES / "unittest" / "NOTE.txt").read_text().split("selected:")[0]
    with pytest.raises(RunnerProblem, match="no JUnit XML report"):
        get_runner("unittest").parse(observed("unittest"))
    assert get_runner("unittest").parse(observed("unittest", "selected")) == {
        "tests.test_calc.AddTest.test_adds": P, "tests.test_calc.TripleTest.test_cases": F}


SELECTED = {
    "pytest": ["tests/test_calc.py::test_adds", "tests/test_calc.py::TestTriple::test_of_five",
               "tests/test_calc.py::test_cases[2-6]"],
    "go": ["example.com/calc::TestAdd", "example.com/calc::TestTriple/of_5"],
    "cargo": ["calc:src/lib.rs::tests::triple_of_five", "it:tests/it.rs::adds"],
    "nextest": ["calc tests::triple_of_five", "calc::it adds"],
    "node": ["test/calc.test.js > triple > of five", "test/calc.test.js > triple > nested > deep"],
    "jest": ["test/calc.test.js > triple > of five", "test/calc.test.js > triple 2 is 6", "test/other.test.js > adds"],
    "vitest": ["test/calc.test.js > triple > of five", "test/calc.test.js > triple > nested > deep"],
    "mocha": ["test/calc.test.js > triple > of five", "test/calc.test.js > triple nested > deep"],
    "maven": ["com.example.CalcTest.tripleOfFive", "com.example.OtherTest.adds"],
    "gradle": ["com.example.CalcTest.tripleOfFive", "com.example.OtherTest.adds"],
}


@pytest.mark.parametrize("tool", sorted(SELECTED))
def test_recorded_selected_run_reports_the_selected_ids_with_the_full_runs_outcomes(tool):
    got = get_runner(tool).parse(observed(tool, "selected"))
    for test_id in SELECTED[tool]:
        assert got[test_id] == EXPECTED_FULL[tool][test_id], (tool, test_id)
    # whatever else ran (a go test's subtests run with it, jest's -t matches a title in every named
    # file) ran as in the full run, and only from the selected ids' files
    runner = get_runner(tool)
    for test_id, outcome in got.items():
        if outcome != S:
            assert EXPECTED_FULL[tool][test_id] == outcome, (tool, test_id)
            if runner.id_has_file:
                assert runner.source_file(test_id) in {runner.source_file(s) for s in SELECTED[tool]}


@pytest.mark.parametrize("command, name", [
    ("python3 -m pytest -q", "pytest"), ("pytest tests", "pytest"), ("uv run pytest", "pytest"),
    ("python3 -m unittest -q", "unittest"), ("python -m unittest discover -s tests", "unittest"),
    ("go test ./...", "go"), ("cargo test", "cargo"), ("cargo +nightly test --all", "cargo"),
    ("cargo nextest run", "nextest"), ("node --test", "node"), ("npx jest", "jest"), ("npx vitest run", "vitest"),
    ("node_modules/.bin/mocha", "mocha"), ("mvn -q test", "maven"), ("./gradlew test", "gradle"),
])
def test_runner_is_detected_from_the_test_command(command, name):
    assert runner_for(command.split()).name == name


def test_an_unrecognised_runner_names_the_program_and_the_supported_list():
    with pytest.raises(UnknownRunner) as err:
        runner_for(["make", "check"])
    assert "'make'" in str(err.value) and all(name in str(err.value) for name in RUNNERS)
    with pytest.raises(UnknownRunner, match="test_runner 'nose'"):
        runner_for(["python3", "-m", "pytest"], "nose")
    assert runner_for(["make", "check"], "tap").name == "tap"        # the plan may name one


def test_selection_replaces_the_commands_own_paths_and_filters():
    argv = ["python3", "-m", "pytest", "-q", "tests/", "-k", "slow", "-p", "no:cacheprovider"]
    got = get_runner("pytest").invocation(argv, ["tests/test_a.py::test_x"]).argv
    assert got == ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "--continue-on-collection-errors",
                   "--", "tests/test_a.py::test_x")
    got = get_runner("go").invocation(["go", "test", "-count=1", "-run", "X", "./..."], ["m/a::TestA/sub", "m/b::TestB"]).argv
    assert got == ("go", "test", "-json", "-count=1", "-run", "^(TestA|TestB)$", "m/a", "m/b")
    got = get_runner("cargo").invocation(["cargo", "test", "-q", "--", "--test-threads=1", "filter"], ["c:src/lib.rs::t::a"]).argv
    assert got == ("cargo", "test", "--no-fail-fast", "--", "--test-threads=1", "--exact", "t::a")
    # nextest: the command's fail-fast, output and status settings give way to the harness's
    ours = ("--no-fail-fast", "--status-level", "all", "--success-output", "never", "--failure-output", "final")
    got = get_runner("nextest").invocation(["cargo", "nextest", "run", "--fail-fast", "--failure-output=immediate",
                                            "--status-level", "fail", "filt", "--", "--nocapture"], ["b t::a"]).argv
    assert got == ("cargo", "nextest", "run", "-E", "(binary_id(=b) & test(=t::a))", *ours, "--")
    assert get_runner("nextest").invocation(["cargo", "nextest", "run", "--no-capture"]).argv == \
        ("cargo", "nextest", "run", *ours)


def test_two_tests_with_one_name_are_two_ids_in_report_order():
    assert unique_ids([("a", P), ("a", F), ("b", P), ("a", S)]) == {"a": P, "a #2": F, "b": P, "a #3": S}


XXE = b"<!DOCTYPE x [<!ENTITY a SYSTEM 'file:///etc/passwd'>]><testsuite><testcase name='&a;'/></testsuite>"


@pytest.mark.parametrize("data", [b"", b"<testsuite", XXE, b"<testsuite>" + b" " * MAX_OUTPUT_BYTES + b"</testsuite>"])
def test_hostile_or_broken_junit_is_refused(data):
    with pytest.raises(RunnerProblem):
        junit_cases(data)


def test_hostile_json_reports_are_refused_not_trusted():
    for tool, name in (("jest", "jest.json"), ("vitest", "vitest.json"), ("mocha", "mocha.json")):
        with pytest.raises(RunnerProblem):
            get_runner(tool).parse(Observed(reports={name: b"{not json"}))
        with pytest.raises(RunnerProblem):
            get_runner(tool).parse(Observed(reports={name: b"[1, 2]"}))
    # an id is printable and bounded whatever the report says
    got = get_runner("go").parse(Observed(output=b'{"Action":"pass","Package":"p","Test":"T\\u001b[2J' + b"x" * 900 + b'"}\n'))
    (only,) = got
    assert "\x1b" not in only and len(only) <= 500
