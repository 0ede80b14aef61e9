"""mocha: its `json` reporter written to `{report_dir}/mocha.json` (`--reporter-option output=`).

mocha's JSON names each test by `file`, `title` and `fullTitle` (the suites and the title joined
by spaces), not by its suites one by one, so an id is `FILE > suites > title` with the suites as
one text (`test/calc.test.js > triple nested > deep`). A failed hook fails the tests it stops
(they are not reported). A selected run names the ids' files and `--grep '^(full title|...)$'`.
"""
from __future__ import annotations

import json
from typing import Sequence

from sweep.harbor.runners.base import (FAILED, PASSED, REPORT_DIR, SKIPPED, Invocation, Observed, Runner,
                                       RunnerProblem, report_files, unique_ids)
from sweep.harbor.runners.javascript import files_of, id_file, js_id, name_pattern, source_names
from sweep.harbor.runners.jest import _own_start, _strip

_OURS = ("--reporter", "-R", "--reporter-option", "--reporter-options", "-O", "--grep", "-g", "--fgrep", "-f")
_VALUES = frozenset({"--reporter", "-R", "--reporter-option", "--reporter-options", "-O", "--grep", "-g", "--fgrep",
                     "-f", "--config", "--timeout", "-t", "--require", "-r", "--ui", "-u", "--spec", "--extension",
                     "--ignore", "--exclude", "--jobs", "-j", "--slow", "-s", "--retries", "--package"})


class Mocha(Runner):
    name = "mocha"
    title = "mocha"
    id_has_file = True

    def detects(self, argv: Sequence[str]) -> bool:
        return _own_start(argv, "mocha") is not None or _own_start(argv, "_mocha") is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        start = _own_start(argv, "mocha") or _own_start(argv, "_mocha") or len(argv)
        own = _strip(list(argv[start:]), ids, _OURS, _VALUES)
        own += ["--reporter=json", "--reporter-option", f"output={REPORT_DIR}/mocha.json"]
        if ids is not None:
            self.check_selection(ids)
            own += ["--grep", name_pattern(ids), *files_of(ids)]
        return Invocation(argv=tuple(list(argv[:start]) + own))

    def parse(self, observed: Observed) -> dict[str, str]:
        files = [data for name, data in report_files(observed, (".json",)) if name == "mocha.json"]
        if not files:
            raise RunnerProblem("mocha wrote no JSON result (mocha.json)")
        try:
            doc = json.loads(files[0])
        except ValueError as exc:
            raise RunnerProblem(f"mocha's JSON result does not parse: {exc}") from None
        tests = doc.get("tests") if isinstance(doc, dict) else None
        if not isinstance(tests, list):
            raise RunnerProblem("mocha's JSON result has no tests list")
        pairs = []
        for test in tests:
            if not isinstance(test, dict) or not all(isinstance(test.get(k), str) for k in ("title", "fullTitle", "file")):
                continue
            title, full = test["title"], test["fullTitle"]
            suites = full[:-len(title)].strip() if full.endswith(title) else ""
            outcome = FAILED if test.get("err") else SKIPPED if test.get("duration") is None else PASSED
            pairs.append((js_id(observed.relative(test["file"]), [s for s in (suites, title) if s]), outcome))
        return unique_ids(pairs)

    def source_file(self, test_id: str) -> str | None:
        return id_file(test_id)

    def source_names(self, test_id: str) -> list[str]:
        return source_names(test_id)


RUNNER = Mocha()
