"""Per-test evidence: which tests fail before the fix and pass after it (FAIL_TO_PASS / PASS_TO_PASS).

Each run's per-test results come from the test runner's own output, parsed by its module in
sweep/harbor/runners/ (pytest's summary, unittest through sweep's helper, go test -json, cargo's
libtest lines, node's events, jest/vitest/mocha JSON, JUnit XML, TAP).

The gates run the empty solution ("before") and the reference solution ("after") several times and
`compare_runs` turns their reports into FAIL_TO_PASS (passes in every "after" run, passes in no
"before" run: failed, errored or did not even load) and PASS_TO_PASS (passes in every run). A task
whose FAIL_TO_PASS is empty verifies nothing and is not verified.

Everything a runner prints or writes is untrusted: the parsers cap sizes, evaluate nothing and keep
only test names and outcomes (sweep/harbor/runners/base.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sweep.harbor.runners.base import ERROR, FAILED, MAX_SELECTED, PASSED, SKIPPED, RunnerProblem
from sweep.harbor.runners.junit_xml import junit_ids
from sweep.harbor.runners.unittest import HELPER as UNITTEST_RUNNER
from sweep.harbor.runners.unittest import HELPER_NAME as RUNNER_NAME

# the evidence keeps whole lists up to what one selected run can name (the rollouts run these ids)
MAX_LISTED = MAX_SELECTED
ReportProblem = RunnerProblem      # a run without per-test results (the runner's words say why)
__all__ = ["PASSED", "FAILED", "ERROR", "SKIPPED", "ReportProblem", "parse_junit", "compare_runs", "TestComparison",
           "UNITTEST_RUNNER", "RUNNER_NAME"]


def parse_junit(data: bytes) -> dict[str, str]:
    """test id -> passed | failed | error | skipped, from JUnit XML (`classname.name` ids)."""
    return junit_ids(data)


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
