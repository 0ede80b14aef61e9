"""Any JUnit XML report (the de facto per-test format): the `junit` runner and the parser the
JUnit-writing runners share (unittest through sweep's helper, Maven Surefire, Gradle, nextest).

The command is run as given, with `SWEEP_REPORT_DIR` set to the report directory; the JUnit XML
it writes there, or at the repository's `junit.xml`, `test-results/` or `reports/` (emptied
before the run, collected after it), is read. Nothing is selected (`selects` is False): the
harness runs the whole command and only the recorded ids are scored.

Ids are `classname.name` (`name` alone without a classname), the way Surefire and unittest name
tests; the same id twice (parametrised tests a reporter names alike) becomes `ID #2`.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Sequence

from sweep.harbor.runners.base import (ERROR, FAILED, MAX_OUTPUT_BYTES, PASSED, REPORT_DIR, SKIPPED, Invocation,
                                       Observed, Runner, RunnerProblem, base_id, report_files, unique_ids)


def junit_cases(data: bytes) -> list[tuple[str, str, str, str]]:
    """[(classname, name, file, outcome)] in document order, from untrusted JUnit XML."""
    if len(data) > MAX_OUTPUT_BYTES:
        raise RunnerProblem(f"JUnit report larger than {MAX_OUTPUT_BYTES} bytes")
    upper = data.upper()
    if b"<!DOCTYPE" in upper or b"<!ENTITY" in upper:
        # no report needs a DTD; refusing one rules out entity expansion and external entities
        raise RunnerProblem("JUnit report declares a DTD or entities; refused")
    try:
        root = ET.fromstring(data)  # noqa: S314 - DTDs refused above; size capped; names sanitised by unique_ids
    except ET.ParseError as exc:
        raise RunnerProblem(f"JUnit report is not valid XML: {exc}") from None
    out = []
    for case in root.iter("testcase"):
        name = (case.get("name") or "").strip()
        if not name:
            continue
        tags = {child.tag for child in case}
        outcome = (ERROR if "error" in tags else FAILED if "failure" in tags
                   else SKIPPED if "skipped" in tags else PASSED)
        out.append(((case.get("classname") or "").strip(), name, (case.get("file") or "").strip(), outcome))
    return out


def junit_ids(data: bytes) -> dict[str, str]:
    return unique_ids((f"{cls}.{name}" if cls else name, outcome) for cls, name, _file, outcome in junit_cases(data))


def parse_reports(observed: Observed, *, what: str) -> dict[str, str]:
    """Every *.xml report file, in name order, as one id map (ids unique across files)."""
    files = report_files(observed, (".xml",))
    if not files:
        raise RunnerProblem(f"{what} wrote no JUnit XML report")
    pairs: list[tuple[str, str]] = []
    for _name, data in files:
        pairs += [(f"{cls}.{name}" if cls else name, outcome) for cls, name, _f, outcome in junit_cases(data)]
    return unique_ids(pairs)


def method_name(test_id: str) -> str:
    """The method of a `Class.method(args)[n]` id: what a source file must contain."""
    leaf = base_id(test_id)
    for cut in ("(", "["):
        leaf = leaf.split(cut, 1)[0]
    return leaf.rsplit(".", 1)[-1].strip()


class JUnitXml(Runner):
    name = "junit"
    title = "any JUnit XML (in $SWEEP_REPORT_DIR, junit.xml, test-results/ or reports/)"
    selects = False

    def detects(self, argv: Sequence[str]) -> bool:
        return False        # only when the plan names it: any tool may write JUnit

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        return Invocation(argv=tuple(argv), env=(("SWEEP_REPORT_DIR", REPORT_DIR),),
                          collect=("junit.xml", "test-results", "reports"))

    def parse(self, observed: Observed) -> dict[str, str]:
        return parse_reports(observed, what="the test command")

    def source_names(self, test_id: str) -> list[str]:
        return [method_name(test_id)]


RUNNER = JUnitXml()
