"""TAP (the Test Anything Protocol) on the captured output: `prove`, `bats --tap`, `tape`, node's
TAP reporter, anything printing `ok N - name` / `not ok N - name`.

Subtests are indented (4 spaces a level) and introduced by `# Subtest: name`; an id is the names
from the outermost down, joined by ` > ` (`triple > of two`); the same id twice is `ID #2`. A
`# SKIP` or `# TODO` directive makes a test skipped. TAP names no file and offers no selection
(`selects` is False): the harness runs the command as given and only the recorded ids are scored.
"""
from __future__ import annotations

import re
from typing import Sequence

from sweep.harbor.runners.base import (FAILED, PASSED, SKIPPED, Invocation, Observed, Runner, RunnerProblem,
                                       base_id, output_text, unique_ids)

_RESULT = re.compile(r"^(\s*)(not ok|ok)\b(?:\s+[0-9]+)?(?:\s*-)?\s*(.*?)\s*$")
_SUBTEST = re.compile(r"^(\s*)# Subtest: (.*)$")
_DIRECTIVE = re.compile(r"\s+#\s*(SKIP|TODO)\b.*$", re.IGNORECASE)


def tap_results(text: str) -> list[tuple[str, str]]:
    """(id, outcome) per TAP result line; a result whose subtests were listed is a suite, not a test."""
    out: list[tuple[str, str]] = []
    stack: list[str] = []           # open subtest names, by depth
    has_children: list[bool] = []
    yaml_indent: int | None = None
    for line in text.splitlines():
        if yaml_indent is not None:     # inside a YAML diagnostic block (`---` ... `...`)
            if line.strip() == "..." and len(line) - len(line.lstrip()) <= yaml_indent + 2:
                yaml_indent = None
            continue
        if line.strip() == "---":
            yaml_indent = len(line) - len(line.lstrip())
            continue
        sub = _SUBTEST.match(line)
        if sub:
            depth = len(sub.group(1)) // 4
            del stack[depth:]
            del has_children[depth:]
            if depth > 0 and len(has_children) >= depth:
                has_children[depth - 1] = True
            stack.append(sub.group(2).strip())
            has_children.append(False)
            continue
        result = _RESULT.match(line)
        if not result:
            continue
        depth = len(result.group(1)) // 4
        name = result.group(3)
        directive = _DIRECTIVE.search(name)
        name = _DIRECTIVE.sub("", name).strip()
        is_suite = len(has_children) > depth and has_children[depth]
        path = stack[:depth] + [name]
        del stack[depth:]
        del has_children[depth:]
        if depth > 0 and len(has_children) >= depth:
            has_children[depth - 1] = True
        if is_suite:
            continue
        outcome = SKIPPED if directive else PASSED if result.group(2) == "ok" else FAILED
        out.append((" > ".join(path), outcome))
    return out


class Tap(Runner):
    name = "tap"
    title = "TAP on the output"
    selects = False

    def detects(self, argv: Sequence[str]) -> bool:
        return False        # only when the plan names it: TAP producers are many

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        return Invocation(argv=tuple(argv))

    def parse(self, observed: Observed) -> dict[str, str]:
        results = tap_results(output_text(observed))
        if not results:
            raise RunnerProblem("the test command printed no TAP result line (`ok N - name`)")
        return unique_ids(results)

    def source_names(self, test_id: str) -> list[str]:
        leaf = base_id(test_id).rsplit(" > ", 1)[-1]
        return list(dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z_]{2,}", leaf)))


RUNNER = Tap()
