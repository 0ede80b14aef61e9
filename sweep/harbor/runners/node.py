"""`node --test`: one JSON line per test from sweep's reporter module, on the captured output.

node's own TAP and JUnit reporters name no file (two files' same-titled tests differ only by
their order), so the harness gives node sweep's reporter (`{tests_dir}/sweep_node_reporter.mjs`,
REPORTER below, written into the bundle): it turns node's test events (which carry the file) into
`{"sweep_test": [suite..., title], "file": ..., "outcome": ...}` lines on stdout. What tests print
never reaches it as such (node's runner turns a test file's stdout into diagnostics). Ids are
`FILE > suite > title` (sweep/harbor/runners/javascript.py). A selected run names the ids' files
and `--test-name-pattern '^(title|...)$'` (node matches a test's own title; the others are
reported skipped).
"""
from __future__ import annotations

import json
from typing import Sequence

from sweep.harbor.runners.base import (FAILED, OUTCOMES, TESTS_DIR, Invocation, Observed, Runner, RunnerProblem,
                                       output_text, program_name, regex_alternation, unique_ids)
from sweep.harbor.runners.javascript import files_of, id_file, id_titles, js_id, source_names

REPORTER_NAME = "sweep_node_reporter.mjs"     # under tests/ in a bundle
_OURS = ("--test-reporter", "--test-reporter-destination", "--test-name-pattern", "--test-skip-pattern")
MAX_LINE = 1 << 16


def _test_flag(argv: Sequence[str]) -> int | None:
    if not argv or program_name(argv[0]) not in ("node", "nodejs"):
        return None
    return argv.index("--test") if "--test" in argv else None


class NodeTest(Runner):
    name = "node"
    title = "node --test"
    id_has_file = True

    def detects(self, argv: Sequence[str]) -> bool:
        return _test_flag(argv) is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        at = _test_flag(argv)
        at = len(argv) - 1 if at is None else at
        head, own = list(argv[:at + 1]), []
        i = at + 1
        while i < len(argv):
            arg = argv[i]
            name = arg.split("=", 1)[0]
            if name in _OURS:
                i += 1 if "=" in arg else 2
                continue
            if ids is None or arg.startswith("-"):
                own.append(arg)
            i += 1
        own = [f"--test-reporter={TESTS_DIR}/{REPORTER_NAME}", "--test-reporter-destination=stdout", *own]
        if ids is not None:
            self.check_selection(ids)
            leaves = sorted({id_titles(t)[-1] for t in ids if id_titles(t)})
            own += [f"--test-name-pattern={regex_alternation(leaves)}", *files_of(ids)]
        return Invocation(argv=tuple(head + own))

    def parse(self, observed: Observed) -> dict[str, str]:
        pairs, lines = [], 0
        for line in output_text(observed).splitlines():
            if not line.startswith('{"sweep_test":') or len(line) > MAX_LINE:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            titles, file, outcome = event.get("sweep_test"), event.get("file"), event.get("outcome")
            if not (isinstance(titles, list) and all(isinstance(t, str) for t in titles) and isinstance(file, str)):
                continue
            lines += 1
            pairs.append((js_id(observed.relative(file), titles), outcome if outcome in OUTCOMES else FAILED))
        if not lines:
            raise RunnerProblem("node --test reported no test (no test file found, or node stopped before any ran)")
        return unique_ids(pairs)

    def source_file(self, test_id: str) -> str | None:
        return id_file(test_id)

    def source_names(self, test_id: str) -> list[str]:
        return source_names(test_id)


RUNNER = NodeTest()


# node's reporter API (an async generator over the run's events; node >= 18.17 / 20): `file`,
# `nesting` and `name` come with every event; `test:start` arrives before a test's result, so a
# stack per file gives each test its suites. Suites themselves are not tests and are left out.
REPORTER = r"""// Written by sweep: node --test's events as one JSON line per test (file, title path, outcome).
const stacks = new Map();
export default async function* sweepReporter(source) {
  for await (const event of source) {
    const data = event.data || {};
    const key = String(data.file || '');
    if (event.type === 'test:start') {
      const stack = stacks.get(key) || [];
      stack.length = data.nesting;
      stack.push(String(data.name));
      stacks.set(key, stack);
    } else if (event.type === 'test:pass' || event.type === 'test:fail') {
      const details = data.details || {};
      if (details.type === 'suite') continue;
      const stack = (stacks.get(key) || []).slice(0, data.nesting);
      const outcome = event.type === 'test:fail' ? 'failed'
        : (data.skip !== undefined || data.todo !== undefined) ? 'skipped' : 'passed';
      yield JSON.stringify({ sweep_test: [...stack, String(data.name)], file: key, outcome }) + '\n';
    }
  }
}
"""
