"""`python -m unittest` (plain, or `discover ...`): through sweep's helper next to test.sh.

unittest prints no per-test line a parser can trust (`-v` lines interleave with what tests print
on stderr), so the harness runs HELPER instead of `-m unittest`: unittest's own command line,
discovery, output and exit status, with a result class that also records every test's outcome
and writes a JUnit report to `{report_dir}/unittest.xml`. Ids are unittest's (`TestCase.id()`:
`tests.test_x.TestC.test_a`), unique within a run; a failing subtest fails its test.

A selected run gives the helper `--sweep-select {tests_dir}/test_ids.txt`: it puts the directory
discovery would have put first on sys.path (`-t`, else `-s`, else `.`) and loads exactly those
names (`TestLoader.loadTestsFromNames`), so no other test module is imported.
"""
from __future__ import annotations

from typing import Sequence

from sweep.harbor.runners.base import (REPORT_DIR, TESTS_DIR, Invocation, Observed, Runner, python_module,
                                       strip_wrappers)
from sweep.harbor.runners.junit_xml import method_name, parse_reports

HELPER_NAME = "sweep_unittest_junit.py"       # under tests/ in a bundle
IDS_NAME = "test_ids.txt"                     # under tests/: the recorded ids, one a line


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """(python and its options, unittest's arguments), or None when argv is not `-m unittest`."""
    prefix, rest = strip_wrappers(argv)
    module = python_module(rest)
    if module is None or module[0] != "unittest":
        return None
    at = len(prefix) + module[1]
    python = [*prefix, *rest[:module[1] - 2]] if rest[module[1] - 1] == "unittest" and rest[module[1] - 2] == "-m" \
        else [*prefix, *rest[:module[1] - 1]]
    return python, list(argv[at:])


class Unittest(Runner):
    name = "unittest"
    title = "python -m unittest"

    def detects(self, argv: Sequence[str]) -> bool:
        return _split(argv) is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        split = _split(argv)
        if split is None:
            python, args = list(argv[:1]), list(argv[1:])
        else:
            python, args = split
        helper = [f"{TESTS_DIR}/{HELPER_NAME}", f"{REPORT_DIR}/unittest.xml"]
        if ids is not None:
            self.check_selection(ids)
            helper += ["--sweep-select", f"{TESTS_DIR}/{IDS_NAME}"]
        return Invocation(argv=tuple(python + helper + args))

    def parse(self, observed: Observed) -> dict[str, str]:
        return parse_reports(observed, what="python -m unittest (through sweep's helper)")

    def source_names(self, test_id: str) -> list[str]:
        return [method_name(test_id)]


RUNNER = Unittest()


# The helper test.sh runs for `python -m unittest ...`: a constant (nothing from a PR or a plan is
# interpolated). argv: REPORT_PATH [--sweep-select IDS_FILE] [unittest arguments...]. Same
# discovery, output and exit status as `python -m unittest`, with the current directory first on
# sys.path as `-m` puts it.
HELPER = r'''"""Written by sweep: `python -m unittest ARGS` that also writes a JUnit XML report (argv[1])."""
import os
import sys
import time
import unittest


def quoteattr(text):
    """An XML attribute value, quoted (xml.sax.saxutils' would cost every trial ~18 ms of imports:
    it pulls in urllib.request, http.client and email)."""
    for raw, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"),
                        ("\n", "&#10;"), ("\r", "&#13;"), ("\t", "&#9;")):
        text = text.replace(raw, entity)
    return '"' + text + '"'


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


_FLAGS = {"-v", "--verbose", "-q", "--quiet", "-f", "--failfast", "-c", "--catch", "-b", "--buffer", "--locals",
          "--durations"}


def _selected(ids_file, args):
    """unittest's arguments for exactly the ids in ids_file, with discovery's top directory on sys.path."""
    with open(ids_file, encoding="utf-8") as fh:
        ids = [line.rstrip("\n") for line in fh if line.strip()]
    rest = args[1:] if args[:1] == ["discover"] else args
    flags, places, value = [], {}, None
    positional = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("-s", "--start-directory", "-t", "--top-level-directory", "-p", "--pattern", "-k",
                   "--durations") and i + 1 < len(rest):
            if arg == "--durations":
                flags += [arg, rest[i + 1]]
            else:
                places[arg.lstrip("-")[:1]] = rest[i + 1]
            i += 2
            continue
        if arg in _FLAGS:
            flags.append(arg)
        elif not arg.startswith("-"):
            positional.append(arg)
        i += 1
    if args[:1] == ["discover"] or not positional:
        start = places.get("s") or (positional[0] if positional else ".")
        top = places.get("t") or (positional[2] if len(positional) > 2 else start)
        sys.path.insert(0, os.path.abspath(top))
    return flags + ids


if __name__ == "__main__":
    sys.path[0] = os.getcwd()      # as `python -m unittest` has it (not this script's directory)
    args = sys.argv[2:]
    if args[:1] == ["--sweep-select"]:
        args = _selected(args[1], args[2:])
    unittest.main(module=None, argv=["python -m unittest", *args], testRunner=_Runner)
'''
