"""`cargo test`: libtest's own lines (`test NAME ... ok|FAILED|ignored`), on the captured output.

cargo prints `Running <source> (<binary>)` (unit tests, integration tests) or `Doc-tests <crate>`
before each test binary, and libtest one line per test. Ids are `<binary>:<source>::<test path>`
(`calc:src/lib.rs::tests::adds`, `calc:doc::src/lib.rs - add (line 3)`), the binary's build hash
dropped, so a test of the same name in two binaries is two ids and an id is stable across
builds. cargo's and libtest's `-q`/`--quiet` (which print dots, not names) are removed and
`--no-fail-fast` added (cargo stops at the first failing binary otherwise); a
selected run passes `-- --exact NAME...` (libtest matches each filter in every binary).
"""
from __future__ import annotations

import re
from typing import Sequence

from sweep.harbor.runners.base import (FAILED, PASSED, SKIPPED, Invocation, Observed, Runner, RunnerProblem,
                                       merge_worst, output_text, program_name)

_RUNNING = re.compile(r"^\s*Running (?:unittests )?(\S+) \((?:.*/)?([^/()]+?)(?:-[0-9a-f]{6,})?(?:\.exe)?\)\s*$")
_DOCTESTS = re.compile(r"^\s*Doc-tests (\S+)\s*$")
_RESULT = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored(?:, .*)?)$")
_QUIET = frozenset({"-q", "--quiet"})


def _test_index(argv: Sequence[str]) -> int | None:
    if not argv or program_name(argv[0]) != "cargo":
        return None
    i = 1
    while i < len(argv) and argv[i].startswith("+"):
        i += 1                  # cargo +nightly test
    return i + 1 if i < len(argv) and argv[i] == "test" else None


class CargoTest(Runner):
    name = "cargo"
    title = "cargo test (libtest output)"

    def detects(self, argv: Sequence[str]) -> bool:
        return _test_index(argv) is not None

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        argv = list(argv)
        cut = argv.index("--") if "--" in argv else len(argv)
        cargo_part = [a for a in argv[:cut] if a not in _QUIET]
        if "--no-fail-fast" not in cargo_part:
            cargo_part.append("--no-fail-fast")     # every test binary runs, not only up to the first failing one
        libtest = [a for a in argv[cut + 1:] if a not in _QUIET and a not in ("--format=terse",)]
        if ids is not None:
            self.check_selection(ids)
            # positional filters of the command give way to the exact names
            libtest = [a for a in libtest if a.startswith("-")] + ["--exact"]
            names = []
            for test_id in ids:
                name = test_id.split("::", 1)[1] if "::" in test_id else test_id
                if name not in names:
                    names.append(name)
            libtest += names
        return Invocation(argv=tuple(cargo_part + (["--", *libtest] if libtest else [])))

    def parse(self, observed: Observed) -> dict[str, str]:
        binary, pairs, seen_binary = "", [], False
        for line in output_text(observed).splitlines():
            line = line.rstrip()
            running = _RUNNING.match(line)
            if running:
                binary, seen_binary = f"{running.group(2)}:{running.group(1)}", True
                continue
            doc = _DOCTESTS.match(line)
            if doc:
                binary, seen_binary = f"{doc.group(1)}:doc", True
                continue
            result = _RESULT.match(line)
            if result and binary:
                outcome = PASSED if result.group(2) == "ok" else FAILED if result.group(2) == "FAILED" else SKIPPED
                pairs.append((f"{binary}::{result.group(1)}", outcome))
        if not seen_binary:
            raise RunnerProblem("cargo test ran no test binary (it did not build, or printed no `Running` line)")
        return merge_worst(pairs)

    def source_names(self, test_id: str) -> list[str]:
        name = test_id.split("::", 1)[-1]
        if " - " in name:        # a doc test: `src/lib.rs - item (line N)`
            item = name.split(" - ", 1)[1].rsplit(" (line", 1)[0]
            return [item.rsplit("::", 1)[-1]]
        return [f"fn {name.rsplit('::', 1)[-1]}"]

    def source_file(self, test_id: str) -> str | None:
        return None


RUNNER = CargoTest()
