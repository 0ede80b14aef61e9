"""Per-test evidence: which tests fail before the fix and pass after it (FAIL_TO_PASS / PASS_TO_PASS).

The verifier (`tests/test.sh`) asks the test runner for a JUnit XML report at
`$LOGS_DIR/verifier/junit.xml`:

- pytest through `PYTEST_ADDOPTS=--junitxml=...` (pytest reads that variable; other runners ignore it);
- `python -m unittest ...` through `tests/sweep_unittest_junit.py` (UNITTEST_RUNNER below, written
  into the bundle): unittest's own command line and discovery, with a result class that also
  records every test's outcome and writes the XML.

The gates run the empty solution ("before") and the reference solution ("after") several times and
`compare_runs` turns their reports into FAIL_TO_PASS (passes in every "after" run, passes in no
"before" run: failed, errored or did not even load) and PASS_TO_PASS (passes in every run). A task
whose FAIL_TO_PASS is empty verifies nothing and is not verified.

The XML is written by test code, which is untrusted: it is read with a size cap, through the
standard library's parser (expat: no external entities, bounded entity expansion), and only test
names and outcomes are kept.
"""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPORT_NAME = "junit.xml"                     # under $LOGS_DIR/verifier/
RUNNER_NAME = "sweep_unittest_junit.py"       # under tests/ in a bundle
MAX_REPORT_BYTES = 32 << 20
MAX_TEST_ID = 500
MAX_LISTED = 2000                             # per list kept in the evidence (the counts are exact)

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
_RANK = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}   # a test reported twice keeps its worst outcome


class ReportProblem(Exception):
    """The JUnit report is missing or unreadable."""


def parse_junit(data: bytes) -> dict[str, str]:
    """test id -> passed | failed | error | skipped, from JUnit XML (pytest's and sweep's)."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportProblem(f"JUnit report larger than {MAX_REPORT_BYTES} bytes")
    if b"<!DOCTYPE" in data.upper() or b"<!ENTITY" in data.upper():
        # no report needs a DTD; refusing one rules out entity expansion and external entities
        raise ReportProblem("JUnit report declares a DTD or entities; refused")
    try:
        root = ET.fromstring(data)  # noqa: S314 - DTDs refused above; size capped; untrusted names sanitised below
    except ET.ParseError as exc:
        raise ReportProblem(f"JUnit report is not valid XML: {exc}") from None
    out: dict[str, str] = {}
    for case in root.iter("testcase"):
        classname = (case.get("classname") or "").strip()
        name = (case.get("name") or "").strip()
        if not name:
            continue
        test_id = f"{classname}.{name}" if classname else name
        test_id = "".join(ch if ch.isprintable() else "?" for ch in test_id)[:MAX_TEST_ID]
        tags = {child.tag for child in case}
        status = (ERROR if "error" in tags else FAILED if "failure" in tags
                  else SKIPPED if "skipped" in tags else PASSED)
        if test_id not in out or _RANK[status] > _RANK[out[test_id]]:
            out[test_id] = status
    return out


def read_junit(verifier_logs: str | Path) -> dict[str, str]:
    """The report a verifier left in `verifier_logs` (a trial's logs/verifier/); ReportProblem if none."""
    path = Path(verifier_logs) / REPORT_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ReportProblem("the test runner wrote no JUnit report (supported: pytest, python -m unittest)") from None
    except OSError as exc:
        raise ReportProblem(f"JUnit report unreadable: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise ReportProblem(f"JUnit report unreadable: {exc.strerror or exc}") from None
    return parse_junit(data)


@dataclass
class TestComparison:
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    problem: str | None = None          # why there is no comparison (a run without a report)

    def as_evidence(self) -> dict:
        return {"ok": bool(self.fail_to_pass) and self.problem is None,
                "fail_to_pass_count": len(self.fail_to_pass), "pass_to_pass_count": len(self.pass_to_pass),
                "fail_to_pass": self.fail_to_pass[:MAX_LISTED], "pass_to_pass": self.pass_to_pass[:MAX_LISTED],
                "detail": self.detail()}

    def detail(self) -> str:
        if self.problem:
            return f"no per-test evidence: {self.problem}"
        if not self.fail_to_pass:
            return "no test fails before the fix and passes after it (FAIL_TO_PASS is empty): the task verifies nothing"
        return (f"{len(self.fail_to_pass)} test(s) fail before and pass after the fix; "
                f"{len(self.pass_to_pass)} pass before and after")


def compare_runs(before: list[dict[str, str] | ReportProblem],
                 after: list[dict[str, str] | ReportProblem]) -> TestComparison:
    """FAIL_TO_PASS / PASS_TO_PASS over the before (empty solution) and after (reference) runs.

    Every "after" run needs a report (the reference's tests are what the task checks). A "before"
    run without one counts as no test passing: a test module that does not even import before
    the fix is exactly the common FAIL_TO_PASS case.
    """
    for run in after:
        if isinstance(run, ReportProblem):
            return TestComparison(problem=f"reference run: {run}")
    if not after:
        return TestComparison(problem="no reference run")
    before_maps = [run if isinstance(run, dict) else {} for run in before]
    passing_after = set.intersection(*({t for t, s in run.items() if s == PASSED}
                                       for run in after if isinstance(run, dict)))
    passed_before_any = set().union(*({t for t, s in run.items() if s == PASSED} for run in before_maps))
    passed_before_all = (set.intersection(*({t for t, s in run.items() if s == PASSED} for run in before_maps))
                         if before_maps else set())
    return TestComparison(fail_to_pass=sorted(passing_after - passed_before_any),
                          pass_to_pass=sorted(passing_after & passed_before_all))


# The runner test.sh uses for `python -m unittest ...`: a constant (nothing from a PR or a plan is
# interpolated). argv: REPORT_PATH [unittest arguments...]. Same discovery, output and exit status
# as `python -m unittest`, with the current directory first on sys.path as `-m` puts it.
UNITTEST_RUNNER = r'''"""Written by sweep: `python -m unittest ARGS` that also writes a JUnit XML report (argv[1])."""
import os
import sys
import time
import unittest
from xml.sax.saxutils import quoteattr


class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sweep_cases = []
        self._sweep_t0 = {}

    def startTest(self, test):
        self._sweep_t0[test.id()] = time.monotonic()
        super().startTest(test)

    def _sweep(self, test, status, text=""):
        took = time.monotonic() - self._sweep_t0.get(test.id(), time.monotonic())
        self.sweep_cases.append((test.id(), status, text, took))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._sweep(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._sweep(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._sweep(test, "error", self._exc_info_to_string(err, test))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "failure" if issubclass(err[0], test.failureException) else "error"
            self._sweep(test, kind, self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._sweep(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._sweep(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._sweep(test, "failure", "unexpected success")


def _write(path, cases):
    lines = ['<?xml version="1.0" encoding="utf-8"?>', '<testsuite name="unittest" tests="%d">' % len(cases)]
    for test_id, status, text, took in cases:
        classname, _, name = test_id.rpartition(".")
        head = "<testcase classname=%s name=%s time=\"%.3f\"" % (quoteattr(classname), quoteattr(name), took)
        if status == "passed":
            lines.append(head + "/>")
        else:
            tag = {"failure": "failure", "error": "error", "skipped": "skipped"}[status]
            lines.append(head + "><%s message=%s/></testcase>" % (tag, quoteattr(text[-2000:])))
    lines.append("</testsuite>")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", errors="replace") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


class _Runner(unittest.TextTestRunner):
    resultclass = _Result

    def run(self, test):
        result = super().run(test)
        _write(sys.argv[1], result.sweep_cases)
        return result


if __name__ == "__main__":
    sys.path[0] = os.getcwd()      # as `python -m unittest` has it (not this script's directory)
    unittest.main(module=None, argv=["python -m unittest", *sys.argv[2:]], testRunner=_Runner)
'''
