"""jest and vitest: their JSON result (`--json --outputFile`, vitest's `--reporter=json`) in the
report directory. Both write jest's shape: per file `name` (absolute) and `assertionResults` with
`ancestorTitles`, `title` and `status` (passed, failed, pending/skipped/todo).

Ids are `FILE > suite > title` (sweep/harbor/runners/javascript.py); a file that fails to load
reports no test, so its ids are not reported. A selected run names the ids' files and
`-t '^(suite title|...)$'` (both match the full name: suites and title joined by spaces).
"""
from __future__ import annotations

import json
from typing import Sequence

from sweep.harbor.runners.base import (FAILED, PASSED, REPORT_DIR, SKIPPED, Invocation, Observed, Runner,
                                       RunnerProblem, program_name, report_files, strip_wrappers, unique_ids)
from sweep.harbor.runners.javascript import files_of, id_file, js_id, name_pattern, source_names

_STATUS = {"passed": PASSED, "failed": FAILED, "pending": SKIPPED, "skipped": SKIPPED, "todo": SKIPPED,
           "disabled": SKIPPED}


def parse_jest_json(observed: Observed, report: str, what: str) -> dict[str, str]:
    files = [data for name, data in report_files(observed, (".json",)) if name == report]
    if not files:
        raise RunnerProblem(f"{what} wrote no JSON result ({report})")
    try:
        doc = json.loads(files[0])
    except ValueError as exc:
        raise RunnerProblem(f"{what}'s JSON result does not parse: {exc}") from None
    results = doc.get("testResults") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise RunnerProblem(f"{what}'s JSON result has no testResults list")
    pairs = []
    for result in sorted((r for r in results if isinstance(r, dict) and isinstance(r.get("name"), str)),
                         key=lambda r: r["name"]):     # files finish in any order; ids must not depend on it
        file = observed.relative(result["name"])
        for case in result.get("assertionResults") or []:
            if not isinstance(case, dict) or not isinstance(case.get("title"), str):
                continue
            ancestors = [a for a in case.get("ancestorTitles") or [] if isinstance(a, str)]
            pairs.append((js_id(file, [*ancestors, case["title"]]), _STATUS.get(str(case.get("status")), FAILED)))
    return unique_ids(pairs)


def _own_start(argv: Sequence[str], tool: str) -> int | None:
    prefix, rest = strip_wrappers(argv)
    if rest and program_name(rest[0]) == tool:
        return len(prefix) + 1
    if len(rest) >= 2 and program_name(rest[0]) in ("node", "nodejs") and program_name(rest[1]) == tool:
        return len(prefix) + 2          # node node_modules/.bin/jest
    return None


def _strip(own: list[str], ids: Sequence[str] | None, ours: tuple[str, ...], value_options: frozenset[str]) -> list[str]:
    """The command's own arguments without what the invocation sets (and, when selecting, without
    its positional file filters and name patterns)."""
    kept, i = [], 0
    while i < len(own):
        arg = own[i]
        name = arg.split("=", 1)[0]
        if name in ours:
            i += 1 if "=" in arg or name not in value_options else 2
            continue
        if ids is not None and not arg.startswith("-") and arg != "run":
            i += 1
            continue
        kept.append(arg)
        if "=" not in arg and name in value_options and i + 1 < len(own):
            kept.append(own[i + 1])
            i += 1
        i += 1
    return kept


class Jest(Runner):
    name = "jest"
    title = "jest"
    id_has_file = True
    _OURS: tuple[str, ...] = ("--json", "--outputFile", "-t", "--testNamePattern", "--runTestsByPath")
    _VALUES: frozenset[str] = frozenset({"--outputFile", "-t", "--testNamePattern", "-c", "--config", "--rootDir", "--maxWorkers",
                         "-w", "--testTimeout", "--reporters", "--testPathPattern", "--selectProjects",
                         "--shard", "--seed", "--testEnvironment"})

    def detects(self, argv: Sequence[str]) -> bool:
        return _own_start(argv, "jest") is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        start = _own_start(argv, "jest") or len(argv)
        own = _strip(list(argv[start:]), ids, self._OURS, self._VALUES)
        own += ["--json", f"--outputFile={REPORT_DIR}/jest.json"]
        if ids is not None:
            self.check_selection(ids)
            own += ["-t", name_pattern(ids), "--runTestsByPath", *files_of(ids)]
        return Invocation(argv=tuple(list(argv[:start]) + own))

    def parse(self, observed: Observed) -> dict[str, str]:
        return parse_jest_json(observed, "jest.json", "jest")

    def source_file(self, test_id: str) -> str | None:
        return id_file(test_id)

    def source_names(self, test_id: str) -> list[str]:
        return source_names(test_id)


class Vitest(Jest):
    name = "vitest"
    title = "vitest"
    _OURS = ("--reporter", "--outputFile", "-t", "--testNamePattern")
    _VALUES = frozenset({"--reporter", "--outputFile", "-t", "--testNamePattern", "-c", "--config", "--root",
                         "--dir", "--project", "--shard", "--pool", "--testTimeout", "--environment"})

    def detects(self, argv: Sequence[str]) -> bool:
        return _own_start(argv, "vitest") is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        start = _own_start(argv, "vitest") or len(argv)
        own = _strip(list(argv[start:]), ids, self._OURS, self._VALUES)
        if "run" not in own:
            own = ["run", *own]         # never watch mode
        own += ["--reporter=default", "--reporter=json", f"--outputFile.json={REPORT_DIR}/vitest.json"]
        if ids is not None:
            self.check_selection(ids)
            own += ["-t", name_pattern(ids), *files_of(ids)]
        return Invocation(argv=tuple(list(argv[:start]) + own))

    def parse(self, observed: Observed) -> dict[str, str]:
        return parse_jest_json(observed, "vitest.json", "vitest")


JEST = Jest()
VITEST = Vitest()
