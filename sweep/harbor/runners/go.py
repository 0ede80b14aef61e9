"""`go test`: per-test events from `-json` (test2json), on the captured output.

Ids are `PACKAGE::TEST` with subtests as go names them (`example.com/m/calc::TestAdd/negative`):
unique (go refuses two top-level tests of one name in a package and numbers same-named subtests
`#01`). A package that does not build reports no test, so its ids are not reported (they fail).
A selected run names the ids' packages instead of the command's patterns and adds
`-run '^(TestA|TestB)$'` (the top-level tests; their subtests run with them).
"""
from __future__ import annotations

import json
from typing import Sequence

from sweep.harbor.runners.base import (FAILED, PASSED, SKIPPED, Invocation, Observed, Runner, RunnerProblem,
                                       merge_worst, output_text, positional_args, program_name, regex_alternation)

_VALUE_FLAGS = frozenset({"-run", "-skip", "-bench", "-count", "-cpu", "-parallel", "-timeout", "-tags", "-p",
                          "-coverprofile", "-covermode", "-coverpkg", "-exec", "-o", "-ldflags", "-gcflags",
                          "-mod", "-modfile", "-benchtime", "-shuffle", "-vet", "-outputdir", "-blockprofile",
                          "-cpuprofile", "-memprofile", "-mutexprofile", "-trace", "-failfast", "-list",
                          "-fuzz", "-fuzztime", "-asmflags", "-buildmode", "-compiler", "-installsuffix",
                          "-pkgdir", "-toolexec", "-overlay", "-pgo", "-C"})
_BOOL_FLAGS_WITH_MAYBE_VALUE = frozenset({"-failfast", "-list"})
_ACTIONS = {"pass": PASSED, "fail": FAILED, "skip": SKIPPED}
MAX_LINE = 1 << 20


def _test_index(argv: Sequence[str]) -> int | None:
    if len(argv) >= 2 and program_name(argv[0]) == "go" and argv[1] == "test":
        return 2
    return None


class GoTest(Runner):
    name = "go"
    title = "go test (-json)"

    def detects(self, argv: Sequence[str]) -> bool:
        return _test_index(argv) is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        start = _test_index(argv) or len(argv)
        head, own = list(argv[:start]), list(argv[start:])
        value_flags = _VALUE_FLAGS - _BOOL_FLAGS_WITH_MAYBE_VALUE
        if ids is not None:
            self.check_selection(ids)
            patterns = set(positional_args(own, 0, value_flags))
            kept, i = [], 0
            while i < len(own):
                flag = own[i].lstrip("-").split("=", 1)[0]
                if i in patterns:
                    pass
                elif flag in ("run", "skip"):
                    if "=" not in own[i]:
                        i += 1
                else:
                    kept.append(own[i])
                i += 1
            packages = sorted({test_id.split("::", 1)[0] for test_id in ids})
            tops = sorted({test_id.split("::", 1)[1].split("/", 1)[0] for test_id in ids if "::" in test_id})
            own = kept + ["-run", regex_alternation(tops), *packages]
        if "-json" not in own and "--json" not in own:
            own = ["-json", *own]
        return Invocation(argv=tuple(head + own))

    def parse(self, observed: Observed) -> dict[str, str]:
        pairs, events = [], 0
        for line in output_text(observed).splitlines():
            if not line.startswith("{") or len(line) > MAX_LINE:
                continue        # the build's messages, or whatever a test printed outside test2json
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            events += 1
            action, test, package = event.get("Action"), event.get("Test"), event.get("Package")
            if action in _ACTIONS and isinstance(test, str) and isinstance(package, str) and test:
                pairs.append((f"{package}::{test}", _ACTIONS[action]))
        if not events:
            raise RunnerProblem("go test printed no -json event")
        return merge_worst(pairs)

    def source_names(self, test_id: str) -> list[str]:
        name = test_id.split("::", 1)[-1].split("/", 1)[0]
        return [f"func {name}("]


RUNNER = GoTest()
