"""pytest: per-test results from its own short summary (`-rA`), printed on the captured output.

Asked with `-rA` (a line `PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED <node id>` per test, after the
`short test summary info` banner) and `--continue-on-collection-errors` (the modules that load
still run when another does not: before the fix, a test module that cannot import is the common
FAIL_TO_PASS case). Ids are pytest's node ids (`tests/test_x.py::TestC::test_a[1-2]`), unique by
construction and the very names a re-run selects with: a selected run drops the command's own path
arguments and `-k`/`-m`/`--deselect`, and names the ids instead, so pytest collects only their files.
"""
from __future__ import annotations

import re
from typing import Sequence

from sweep.harbor.runners.base import (ERROR, FAILED, PASSED, SKIPPED, Invocation, Observed, Runner, RunnerProblem,
                                       merge_worst, output_text, positional_args, program_name, python_module,
                                       strip_wrappers)

# options of pytest that take a separate value (so the value is not mistaken for a path)
_VALUE_OPTIONS = frozenset({
    "-k", "-m", "-c", "-p", "-o", "-W", "-r", "--rootdir", "--confcutdir", "--basetemp", "--tb", "--import-mode",
    "--maxfail", "--durations", "--durations-min", "-n", "--dist", "--junitxml", "--junit-xml", "--override-ini",
    "--deselect", "--ignore", "--ignore-glob", "--cov", "--cov-report", "--log-level", "--log-file", "--timeout",
    "--config-file", "--inifile", "--capture", "--color", "--code-highlight", "--log-cli-level",
    "--log-format", "--log-date-format", "--junit-prefix", "--show-capture", "--randomly-seed", "--doctest-glob",
    "--assert"})
_SELECTING = frozenset({"-k", "-m", "--deselect", "--lf", "--last-failed", "--ff", "--failed-first", "--sw",
                        "--stepwise", "--nf", "--new-first"})
_SUMMARY = re.compile(r"^=+ short test summary info =+$")
# the summary ends at pytest's last line: `=== 2 failed, 5 passed in 0.1s ===` (or unbannered with -q)
_END = re.compile(r"^(=+ .* =+|[0-9]+ (failed|passed|skipped|errors?|deselected|xfailed|xpassed|warnings?)\b.*"
                  r"|no tests ran\b.*)$")
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S.*?)(?: - .*)?$")
_OUTCOME = {"PASSED": PASSED, "FAILED": FAILED, "ERROR": ERROR, "XFAIL": PASSED, "XPASS": FAILED,
            "SKIPPED": SKIPPED}


def _tool_start(argv: Sequence[str]) -> int | None:
    """Index of pytest's first own argument, or None when argv does not run pytest."""
    prefix, rest = strip_wrappers(argv)
    module = python_module(rest)
    if module is not None:
        return len(prefix) + module[1] if module[0] == "pytest" or module[0] == "py.test" else None
    if rest and program_name(rest[0]) in ("pytest", "py.test"):
        return len(prefix) + 1
    return None


class Pytest(Runner):
    name = "pytest"
    title = "pytest"
    id_has_file = True

    def detects(self, argv: Sequence[str]) -> bool:
        return _tool_start(argv) is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        start = _tool_start(argv)
        if start is None:
            start = len(argv)
        head, own = list(argv[:start]), list(argv[start:])
        if ids is not None:
            self.check_selection(ids)
            drop = set(positional_args(own, 0, _VALUE_OPTIONS))
            kept, i = [], 0
            while i < len(own):
                arg = own[i]
                if i in drop:
                    pass
                elif arg.split("=", 1)[0] in _SELECTING:
                    if "=" not in arg and arg in _VALUE_OPTIONS:
                        i += 1          # its value goes too
                else:
                    kept.append(arg)
                i += 1
            own = kept
        # ours last, so they win over the command's own `-r` (argparse keeps the last value)
        own += ["-rA", "--continue-on-collection-errors"]
        if ids is not None:
            own += ["--", *ids]
        return Invocation(argv=tuple(head + own))

    def parse(self, observed: Observed) -> dict[str, str]:
        lines = output_text(observed).splitlines()
        # the LAST summary banner: output a test printed before it cannot open a section of its own
        starts = [i for i, line in enumerate(lines) if _SUMMARY.match(line.strip())]
        if not starts:
            raise RunnerProblem("pytest printed no short test summary (no test ran, or pytest did not finish)")
        pairs = []
        for line in lines[starts[-1] + 1:]:
            if _END.match(line.strip()):
                break
            match = _LINE.match(line.rstrip())
            if match and "::" in match.group(2) or (match and match.group(1) == "ERROR"):
                pairs.append((match.group(2), _OUTCOME[match.group(1)]))
        return merge_worst(pairs)

    def source_file(self, test_id: str) -> str | None:
        return test_id.split("::", 1)[0]

    def source_names(self, test_id: str) -> list[str]:
        parts = test_id.split("::")
        if len(parts) < 2:
            return []           # a file-level ERROR (collection) names no test
        return [parts[-1].split("[", 1)[0]]


RUNNER = Pytest()
