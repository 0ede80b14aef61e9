"""The one interface every test runner implements: detect, ask, parse, select.

A runner module knows four things about one test tool and nothing else:

- `detects(argv)`: whether a test command (the plan's, split into argv) runs this tool;
- `invocation(argv, ids)`: how to ask the tool for machine-readable per-test output (flags and
  environment variables added to the argv, never a shell string) and, when `ids` is given, how to
  run exactly those tests and no others (so a test file planted next to them is never collected);
- `parse(observed)`: the tool's output (what the provider captured from the harness's stdout,
  outside the tests' reach) and the report files it wrote, into {test id: outcome};
- `source_names(test_id)`: what of an id must all be found in one of the bundle's test files for
  the id to be a test the bundle really has (the defence against a report naming a test that does not
  exist); `source_file(test_id)`: the file an id names, when ids carry one.

Everything a runner parses was written by test code, which is untrusted: each parser reads at
most MAX_OUTPUT_BYTES, never evaluates anything (json.loads, expat without DTDs, regular
expressions), cuts ids at MAX_TEST_ID characters and makes them printable.

Ids are stable across runs (no timings, no addresses, no build hashes in them) and unique: a report
that gives two tests the same name keeps both, the second as `NAME #2` (`unique_ids`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Sequence

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED)
_RANK = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}   # a test reported twice keeps its worst outcome

# Placeholders an invocation may use in an argv element or an env value; the harness (test.sh)
# replaces them with plain string substitution (bash `${a//pattern/value}`), never evaluation.
REPORT_DIR = "{report_dir}"     # where the runner writes report files: $LOGS_DIR/verifier/report
TESTS_DIR = "{tests_dir}"       # the harness's own directory (sweep's helper scripts)

MAX_OUTPUT_BYTES = 32 << 20     # per stream / report file read by a parser
MAX_REPORT_FILES = 256
MAX_TEST_ID = 500
MAX_SELECTED = 20_000           # ids one selected run may name (argv and regexes stay bounded)


class RunnerProblem(Exception):
    """The runner's output cannot give per-test results (missing, unreadable, malformed)."""


class UnknownRunner(Exception):
    """The test command runs a tool no runner module recognises (or the plan names none such)."""


class SelectionTooLarge(RunnerProblem):
    """More ids than one selected run can name."""


@dataclass(frozen=True)
class Invocation:
    """How the harness runs the tool: argv and environment additions, where reports land."""
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    # directories (relative to the repository) where the tool writes reports it cannot be told to
    # write elsewhere (Maven's target/surefire-reports): the harness empties them before the run
    # and copies them under the report directory after it
    collect: tuple[str, ...] = ()


@dataclass
class Observed:
    """What one run left for the parser: the captured output and the report directory's files."""
    output: bytes = b""
    reports: dict[str, bytes] = field(default_factory=dict)   # path under the report dir -> bytes
    repo_dir: str = ""      # the repository's path as the tests saw it (reports name files absolutely)

    def relative(self, path: str) -> str:
        """`path` relative to the repository when it lies in it (ids must not carry host paths)."""
        root = self.repo_dir.rstrip("/")
        if root and path.startswith(root + "/"):
            return path[len(root) + 1:]
        return path


def clean_id(text: str) -> str:
    """A printable, single-line, bounded id."""
    text = "".join(ch if ch.isprintable() else "?" for ch in text.strip())
    return text[:MAX_TEST_ID]


def unique_ids(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """(id, outcome) pairs in report order -> {id: outcome}, a repeated id numbered `ID #2`, `ID #3`.

    Two tests that share a name are two tests: collapsing them would let one passing test hide
    a failing one. Numbering by order is stable because a runner reports one file's tests in
    declaration order.
    """
    seen: dict[str, int] = {}
    out: dict[str, str] = {}
    for test_id, outcome in pairs:
        test_id = clean_id(test_id)
        if not test_id:
            continue
        n = seen.get(test_id, 0) + 1
        seen[test_id] = n
        out[test_id if n == 1 else f"{test_id} #{n}"] = outcome
    return out


def merge_worst(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """(id, outcome) pairs -> {id: worst outcome}: for tools that report one test several times
    (a subtest's failure and then its parent's)."""
    out: dict[str, str] = {}
    for test_id, outcome in pairs:
        test_id = clean_id(test_id)
        if test_id and (test_id not in out or _RANK[outcome] > _RANK[out[test_id]]):
            out[test_id] = outcome
    return out


def base_id(test_id: str) -> str:
    """An id without the `#N` a duplicate got (what the tool itself calls the test)."""
    return re.sub(r" #[0-9]+$", "", test_id)


def regex_alternation(names: Sequence[str]) -> str:
    """`^(a|b)$` matching exactly the given literal names (re.escape's output is valid in the
    RE2, JavaScript and POSIX-ish regex dialects the tools use for the characters it escapes)."""
    return "^(" + "|".join(_escape(n) for n in names) + ")$"


def _escape(name: str) -> str:
    # escape exactly the regex metacharacters (Python's re.escape also escapes spaces and
    # punctuation, which Go's RE2 accepts but some tools print back oddly)
    return re.sub(r"([\\.^$|?*+()\[\]{}/-])", r"\\\1", name)


def positional_args(argv: Sequence[str], start: int, value_options: frozenset[str]) -> list[int]:
    """Indexes of argv[start:]'s positional arguments (not options, not an option's value)."""
    out, i = [], start
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            if "=" not in arg and arg in value_options:
                i += 1
        else:
            out.append(i)
        i += 1
    return out


def program_name(arg: str) -> str:
    return arg.rsplit("/", 1)[-1]


def python_module(argv: Sequence[str]) -> tuple[str, int] | None:
    """(module, index after it) for `python[3[.x]] [-X ...] -m MODULE ...`, else None."""
    if not argv or not re.match(r"^python(3(\.[0-9]+)?)?$", program_name(argv[0])):
        return None
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1], i + 2
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:], i + 1
        if not arg.startswith("-"):
            return None
    return None


def strip_wrappers(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(launcher prefix, the tool's argv) for `npx jest`, `uv run pytest`, `poetry run ...`,
    `pnpm exec vitest`, `yarn mocha`: detection looks at the tool, the prefix is kept as is."""
    argv = list(argv)
    prefix: list[str] = []
    while argv:
        name = program_name(argv[0])
        if name in ("npx", "bunx") and len(argv) > 1:
            prefix.append(argv.pop(0))
            while argv and argv[0].startswith("-"):
                prefix.append(argv.pop(0))
            continue
        if name in ("uv", "poetry", "pdm", "hatch", "pipenv", "pnpm", "yarn", "npm") and len(argv) > 1 \
                and argv[1] in ("run", "exec"):
            prefix += argv[:2]
            argv = argv[2:]
            continue
        if name in ("yarn", "pnpm") and len(argv) > 1 and not argv[1].startswith("-"):
            prefix.append(argv.pop(0))
            continue
        break
    return prefix, argv


class Runner:
    """One test tool. Subclasses set the class attributes and implement the four methods."""

    name: ClassVar[str]             # the plan's `test_runner` value
    title: ClassVar[str]            # how docs and messages name it ("go test (-json)")
    selects: ClassVar[bool] = True  # False: cannot run a list of ids; the harness runs the command
                                    # as given and only the recorded ids are scored
    id_has_file: ClassVar[bool] = False   # ids begin with the test's file (source_file gives it)

    def detects(self, argv: Sequence[str]) -> bool:
        raise NotImplementedError

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        raise NotImplementedError

    def parse(self, observed: Observed) -> dict[str, str]:
        raise NotImplementedError

    def source_names(self, test_id: str) -> list[str]:
        """Strings that must all appear in one test file of the bundle for `test_id` to exist there."""
        return []

    def source_file(self, test_id: str) -> str | None:
        return None

    def check_selection(self, ids: Sequence[str]) -> None:
        if len(ids) > MAX_SELECTED:
            raise SelectionTooLarge(f"{len(ids)} test ids to run; one {self.title} run can name at most "
                                    f"{MAX_SELECTED}")


def output_text(observed: Observed) -> str:
    data = observed.output[-MAX_OUTPUT_BYTES:]
    return data.decode("utf-8", errors="replace")


def report_files(observed: Observed, suffixes: tuple[str, ...]) -> list[tuple[str, bytes]]:
    """The report files ending in one of `suffixes`, by name (stable order)."""
    return sorted((name, data) for name, data in observed.reports.items() if name.endswith(suffixes))
