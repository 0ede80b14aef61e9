"""The gates' judgement of a PR-built bundle through sweep's harness (sweep/harbor/harness.py).

The controller's gates phase (sweep/controller/phases.py) runs the trials; what they mean is
decided here:

- `verifier`: the plan's test command has a runner, and the bundle's harness files are byte for
  byte the ones sweep generates, tests/test_workdir.txt included (an author's own test.sh, or a
  working directory other than the plan's test_workdir, fails it, named);
- `reference` / `empty` / `repeat`: the whole suite's runs, scored by the controller from the
  per-test results and the exit status (1 / 0 / the same on every repeat);
- `fail_to_pass`: FAIL_TO_PASS non-empty, and every FAIL_TO_PASS and PASS_TO_PASS id one the
  bundle's test files have (a report naming another test fails the gate, the name shown);
- `selected`: a run of exactly the recorded ids, the run every rollout gets, scores the reference
  1 and the empty solution 0 (the runner's selection works for this task).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from sweep.harbor import junit
from sweep.harbor.harness import Harness, differences, ghost_ids, resolve
from sweep.harbor.runners import UnknownRunner
from sweep.harbor.runners.base import ERROR, FAILED, MAX_SELECTED

DEFAULT_TEST_COMMAND = "python3 -m unittest -q"   # a candidate without a test_command
DETAIL = 300


def test_argv(test_command: str | None) -> list[str]:
    return shlex.split(test_command or DEFAULT_TEST_COMMAND)


def verifier_gate(bundle: Path, test_command: str | None, runner_name: str | None,
                  test_workdir: str | None = None) -> tuple[Harness | None, dict]:
    """(the harness, the `verifier` gate's result). `test_workdir` is the plan's: a bundle's
    tests/test_workdir.txt must say exactly it (or be absent when the plan names none)."""
    try:
        harness = resolve(test_argv(test_command), runner_name, test_workdir)
    except (UnknownRunner, ValueError) as exc:
        return None, {"ok": False, "detail": str(exc)[:DETAIL * 2]}
    diffs = differences(bundle, harness)
    if diffs:
        return harness, {"ok": False, "detail": ("the bundle's verifier is not sweep's (sweep generates tests/'s "
                                                 "harness itself): " + "; ".join(diffs[:4]))[:DETAIL * 2],
                         "differences": diffs[:20]}
    return harness, {"ok": True, "detail": f"sweep's harness ({harness.runner.title})", "runner": harness.runner.name}


class GateRuns:
    """The gates' trials of one bundle, as they come, and the gates they give."""

    def __init__(self, bundle: Path, harness: Harness) -> None:
        self.bundle = bundle
        self.harness = harness
        self.rewards: dict[str, list[float | None]] = {"reference": [], "empty": []}
        self.details: dict[str, list[str]] = {"reference": [], "empty": []}
        self.reports: dict[str, list[Any]] = {"reference": [], "empty": []}
        self._comparison: junit.TestComparison | None = None

    def add(self, kind: str, trial) -> None:
        self.rewards[kind].append(trial.reward)
        self.details[kind].append(trial.detail)
        self.reports[kind].append(trial.results if trial.results is not None
                                  else junit.ReportProblem(trial.results_problem or trial.detail))

    def fails_regardless(self) -> list[str] | None:
        """The tests that fail in a reference run only because they fail without the fix too (in
        every empty run): neither FAIL_TO_PASS nor PASS_TO_PASS, so no later run names them and they
        cannot make the reference fail (a test needing what the sandbox lacks, a broken one of the
        repository's). None when a reference run failed otherwise: no per-test results, no reward,
        a test that passes without the fix or that only the PR adds, nothing failing at all (the
        runner itself exited non-zero), or no test the fix makes pass (FAIL_TO_PASS empty)."""
        ref, empty = self.reports["reference"], self.reports["empty"]
        if not ref or not empty or not all(isinstance(r, dict) for r in (*ref, *empty)) \
                or any(r is None for r in self.rewards["reference"]):
            return None
        bad = (FAILED, ERROR)
        failing = sorted({i for run in ref for i, outcome in run.items() if outcome in bad})
        if not failing or any(run.get(i) not in bad for i in failing for run in empty):
            return None
        # a fix that makes no test pass is a reference that fails (its cause says so), not this
        return failing if self.comparison().fail_to_pass else None

    def standard_gates(self) -> dict[str, dict]:
        ref, empty = self.rewards["reference"], self.rewards["empty"]
        same = len(set(ref)) == 1 and len(set(empty)) == 1
        reference = {"ok": all(r == 1.0 for r in ref), "rewards": ref,
                     "detail": "; ".join(d for d in self.details["reference"] if d)[:DETAIL]}
        regardless = None if reference["ok"] else self.fails_regardless()
        if regardless:
            reference.update(ok=True, fails_regardless=regardless[:50], detail=(
                f"{len(regardless)} test(s) fail with and without the fix and are left out: "
                + ", ".join(regardless[:5]))[:DETAIL])
        return {"reference": reference,
                "empty": {"ok": all(r == 0.0 for r in empty), "rewards": empty,
                          "detail": "; ".join(d for d in self.details["empty"] if d)[:DETAIL]},
                "repeat": {"ok": same, "detail": "same result on every repeat" if same
                           else "results differ between repeats: flaky"}}

    def comparison(self) -> junit.TestComparison:
        if self._comparison is None:
            self._comparison = junit.compare_runs(self.reports["empty"], self.reports["reference"])
        return self._comparison

    def recorded_ids(self) -> list[str]:
        cmp = self.comparison()
        return [*cmp.fail_to_pass, *cmp.pass_to_pass]

    def fail_to_pass_gate(self) -> dict:
        cmp = self.comparison()
        ev = cmp.as_evidence()
        if not ev["ok"]:
            return ev
        ghosts = ghost_ids(self.bundle, self.harness.runner, self.recorded_ids())
        if ghosts:
            ev.update(ok=False, ghosts=ghosts[:50],
                      detail=(f"the report names {len(ghosts)} test(s) that no test file of the bundle has: "
                              + ", ".join(ghosts[:5]))[:DETAIL * 2])
        elif len(self.recorded_ids()) > MAX_SELECTED:
            ev.update(ok=False, detail=f"{len(self.recorded_ids())} recorded tests; a selected run names at most "
                                       f"{MAX_SELECTED}")
        return ev

    def selected_gate(self, trials: dict) -> dict:
        ref, empty = trials["reference"], trials["empty"]
        ok = ref.reward == 1.0 and empty.reward == 0.0
        return {"ok": ok, "rewards": [ref.reward, empty.reward],
                "detail": (f"the recorded tests alone: reference {ref.detail}; empty {empty.detail}")[:DETAIL]}


def rollout_harness(test_command: str | None, runner_name: str | None, fail_to_pass_gate,
                    test_workdir: str | None = None) -> Harness:
    """The harness a rollout runs: the recorded ids of the gates' `fail_to_pass` evidence, in the
    plan's test_workdir."""
    harness = resolve(test_argv(test_command), runner_name, test_workdir)
    if fail_to_pass_gate is None or not fail_to_pass_gate.ok:
        return harness
    return harness.selecting([*(fail_to_pass_gate.fail_to_pass or []), *(fail_to_pass_gate.pass_to_pass or [])])
