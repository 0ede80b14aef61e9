"""Test runners: per-test results from what each tool prints or writes (docs/tasks.md, "Runners").

One module per tool behind one interface (`Runner` in base.py): detect the tool from the test
command, ask it for machine-readable output (flags, environment: never a shell string), parse
that output into {test id: outcome}, and select exactly a list of ids for a re-run. A new runner is
a module with a `Runner` subclass, listed in RUNNERS below (docs/tasks.md says how).

`runner_for(argv, named)` is the one entry point: the plan's `test_runner` when set, else the
first runner in RUNNERS that detects the command; none is `UnknownRunner`, whose message names
the program and the supported runners.
"""
from __future__ import annotations

from typing import Sequence

from sweep.harbor.runners import cargo, go, jest, junit_xml, jvm, mocha, nextest, node, pytest, tap, unittest
from sweep.harbor.runners.base import (ERROR, FAILED, OUTCOMES, PASSED, REPORT_DIR, SKIPPED, TESTS_DIR, Invocation,
                                       Observed, Runner, RunnerProblem, SelectionTooLarge, UnknownRunner)

# Detection order matters only where two tools share a program (nextest before cargo test).
RUNNERS: dict[str, Runner] = {r.name: r for r in (
    pytest.RUNNER, unittest.RUNNER, go.RUNNER, nextest.RUNNER, cargo.RUNNER, node.RUNNER, jest.JEST,
    jest.VITEST, mocha.RUNNER, jvm.MAVEN, jvm.GRADLE, junit_xml.RUNNER, tap.RUNNER)}


def supported() -> str:
    return ", ".join(f"{r.name} ({r.title})" for r in RUNNERS.values())


def get_runner(name: str) -> Runner:
    try:
        return RUNNERS[name]
    except KeyError:
        raise UnknownRunner(f"test_runner {name!r} is not a runner sweep knows (supported: {supported()})") from None


def runner_for(argv: Sequence[str], named: str | None = None) -> Runner:
    """The runner of test command `argv` (the plan's `named` runner when given)."""
    if named:
        return get_runner(named)
    for runner in RUNNERS.values():
        if runner.detects(argv):
            return runner
    program = argv[0] if argv else "(empty command)"
    raise UnknownRunner(f"no runner recognises the test command's program {program!r}; name one with the plan's "
                        f"test_runner (supported: {supported()})")


__all__ = ["RUNNERS", "Runner", "Invocation", "Observed", "RunnerProblem", "UnknownRunner", "SelectionTooLarge",
           "get_runner", "runner_for", "supported", "PASSED", "FAILED", "ERROR", "SKIPPED", "OUTCOMES",
           "REPORT_DIR", "TESTS_DIR"]
