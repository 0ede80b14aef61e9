"""`cargo nextest run`: nextest's status lines (`PASS [   0.004s] BINARY-ID TEST`), on the output.

nextest's JUnit needs a profile in the repository's own `.config/nextest.toml` (which a solver
can edit), so the harness reads what nextest always prints: one status line per test, the
binary id (`calc`, `calc::integration`) and the test's path. Ids are `BINARY-ID TEST` (unique:
nextest's own test identity). A status that is not PASS (FAIL, TIMEOUT, SIGSEGV, LEAK-FAIL, ...)
fails. A selected run gives a filterset `-E 'binary_id(=B) & test(=T) | ...'`.

The tests' own output is untrusted and may print status lines: the invocation asks for it only
after the `Summary` line (`--failure-output final --success-output never`, replacing the
command's, and no `--no-capture`), and the parser reads status lines only between `Starting` and
`Summary`. It also turns fail-fast off (nextest's default cancels the rest after a failure, which
would leave them without a result) and sets `--status-level all` (a status line for every test).
"""
from __future__ import annotations

import re
from typing import Sequence

from sweep.harbor.runners.base import (FAILED, PASSED, SKIPPED, Invocation, Observed, Runner, RunnerProblem,
                                       merge_worst, output_text, program_name)

_STATUS = re.compile(r"^\s*(?:TRY \d+ )?([A-Z][A-Z-]*(?: \d+/\d+)?)\s+\[\s*(?:[0-9.]+s)?\s*\]\s+(?:\(\s*\d+/\d+\)\s+)?"
                     r"(\S+)\s+(\S.*?)\s*$")
_STARTING = re.compile(r"^\s*Starting \d+ tests? across \d+ binar")
_SUMMARY = re.compile(r"^\s*Summary \[")
# the command's own settings that would hide results or mix the tests' output into the status
# lines; the invocation sets its own
_OURS = frozenset({"--no-fail-fast", "--fail-fast", "--no-capture", "--nocapture"})
_OURS_WITH_VALUE = frozenset({"--max-fail", "--failure-output", "--success-output", "--status-level",
                              "--final-status-level"})
_FILTERS = frozenset({"-E", "--filterset", "--filter-expr"})


def _run_index(argv: Sequence[str]) -> int | None:
    if len(argv) >= 3 and program_name(argv[0]) == "cargo" and argv[1] == "nextest" and argv[2] in ("run", "r"):
        return 3
    return None


class Nextest(Runner):
    name = "nextest"
    title = "cargo nextest run"

    def detects(self, argv: Sequence[str]) -> bool:
        return _run_index(argv) is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        start = _run_index(argv) or len(argv)
        own, i = [], start
        while i < len(argv):
            arg = argv[i]
            name = arg.split("=", 1)[0]
            if name in _OURS_WITH_VALUE or (ids is not None and name in _FILTERS):
                i += 1 if "=" in arg else 2       # replaced below (or by the selection)
                continue
            if arg in _OURS:
                i += 1
                continue
            if ids is not None and not arg.startswith("-"):
                i += 1          # a positional test filter of the command
                continue
            own.append(arg)
            i += 1
        ours = []
        if ids is not None:
            self.check_selection(ids)
            terms = []
            for test_id in ids:
                binary, _, test = test_id.partition(" ")
                terms.append(f"(binary_id(={binary}) & test(={test}))")
            ours += ["-E", " | ".join(terms)]
        # every test runs (no fail-fast: a cancelled test has no result), a status line for each,
        # and the tests' captured output only after the summary, where no status line is read
        ours += ["--no-fail-fast", "--status-level", "all", "--success-output", "never", "--failure-output", "final"]
        # what follows `--` goes to the test binaries: ours come before it
        cut = own.index("--") if "--" in own else len(own)
        own = own[:cut] + ours + [a for a in own[cut:] if a not in ("--nocapture", "--no-capture")]
        return Invocation(argv=tuple(list(argv[:start]) + own), env=(("NEXTEST_HIDE_PROGRESS_BAR", "1"),))

    def parse(self, observed: Observed) -> dict[str, str]:
        pairs, started = [], False
        for line in output_text(observed).splitlines():
            if _STARTING.match(line):
                started = True
                continue
            if started and _SUMMARY.match(line):
                break           # what follows repeats the failures and prints the tests' own output
            match = _STATUS.match(line)
            if not match or not started:
                continue
            status = match.group(1)
            outcome = PASSED if status == "PASS" else SKIPPED if status == "SKIP" else FAILED
            pairs.append((f"{match.group(2)} {match.group(3)}", outcome))
        if not started:
            raise RunnerProblem("cargo nextest printed no `Starting N tests` line (it did not build, or did not run)")
        return merge_worst(pairs)

    def source_names(self, test_id: str) -> list[str]:
        return [f"fn {test_id.rsplit('::', 1)[-1].rsplit(' ', 1)[-1]}"]


RUNNER = Nextest()
