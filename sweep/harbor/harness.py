"""sweep's own verifier: the harness files of a PR-built bundle, and what a run of them observed.

For a task built from a PR, sweep owns `tests/` except the PR's test files: the harness is
`harness_files(test_argv, runner, ids)` and nothing else, and

- the `verifier` gate compares the bundle's harness files byte for byte with it (`differences`):
  an author's own `test.sh` (one that could tell the reference run from the empty one and write
  the reward it likes) fails the gate, naming the file, and the author repairs;
- every trial the controller runs installs it over the trial's copy of `tests/` (`install`), so
  the script that runs is sweep's whatever the bundle holds; the export writes the same files,
  with the recorded ids;
- after the gates, runs name exactly the recorded ids (FAIL_TO_PASS + PASS_TO_PASS, in
  `tests/test_ids.txt`), through the runner's selection, so a test file a solver plants is never
  collected; a solver's repository also gets its test tree back as the base and the PR have it
  (`restore_test_tree`) before the PR's test files are installed.

The run's result is never read from a file the tests could write. The runner's output goes to
test.sh's stdout, which the provider captures on the host, outside the sandbox's writable paths
(the tests can add to that stream, never take a line back); report files the runner itself writes
(unittest's, Maven's, jest's) are read from the report directory with no-follow opens and size
caps. `score` turns the per-test results, the recorded ids and the exit status into the reward:
a run that exits before reporting every recorded id scores 0. What in-process test code can still
lie about is in docs/security.md.

The data files test.sh reads are one item a line (`mapfile -t`); `{report_dir}` and `{tests_dir}`
in them are replaced by plain bash substitution, never evaluated.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from sweep.harbor import layout
from sweep.harbor.runners import (FAILED, PASSED, Observed, Runner, RunnerProblem, UnknownRunner, get_runner,
                                  runner_for)
from sweep.harbor.runners.base import MAX_OUTPUT_BYTES, MAX_REPORT_FILES, MAX_SELECTED, base_id
from sweep.harbor.runners.node import REPORTER, REPORTER_NAME
from sweep.harbor.runners.unittest import HELPER, HELPER_NAME, IDS_NAME

RUN_ARGV = "tests/run_argv.txt"
RUN_ENV = "tests/run_env.txt"
REPORT_PATHS = "tests/report_paths.txt"
RUNNER_FILE = "tests/runner.txt"
TEST_IDS = f"tests/{IDS_NAME}"
REPORT_RELDIR = "verifier/report"           # under $LOGS_DIR
FILE_BOUND_MARK = "the test output reached the file-size bound"
MAX_SOURCE_BYTES = 8 << 20                  # per test file read by the ghost check
MAX_SOURCE_FILES = 20_000

TEST_SH = r"""#!/usr/bin/env bash
# Harbor verifier written by sweep (sweep/harbor/harness.py). Installs the PR's test files in the
# repository and runs the test runner as run_argv.txt says, its output on this script's stdout.
# sweep scores a local trial itself from that output and the runner's report files; under Harbor
# the reward this script writes is the runner's exit status (0 -> 1). Every input is read from a
# data file next to this script.
set -u
TESTS_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="${REPO_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs}"
mkdir -p -- "$LOGS_DIR/verifier"
REWARD_FILE="$LOGS_DIR/verifier/reward.txt"
printf '0\n' > "$REWARD_FILE"   # a verifier that dies half-way has scored 0, not nothing
REPORT_DIR="$LOGS_DIR/verifier/report"
rm -rf -- "$REPORT_DIR"
mkdir -p -- "$REPORT_DIR"

cd -- "$REPO_DIR" || { echo "sweep test.sh: no repository at $REPO_DIR" >&2; exit 2; }

while IFS= read -r rel || [ -n "$rel" ]; do
  [ -n "$rel" ] || continue
  rm -rf -- "$rel"              # a symlink or directory planted at a test path must not redirect the copy
  mkdir -p -- "$(dirname -- "$rel")"
  cp -- "$TESTS_DIR/files/$rel" "$rel" || { echo "sweep test.sh: cannot install test file" >&2; exit 2; }
done < "$TESTS_DIR/test_files.txt"

if [ -f "$TESTS_DIR/deleted_test_files.txt" ]; then
  while IFS= read -r rel || [ -n "$rel" ]; do
    [ -n "$rel" ] && rm -rf -- "$rel"
  done < "$TESTS_DIR/deleted_test_files.txt"
fi

# The test command's directory inside the repository (the plan's test_workdir), when it has one.
if [ -f "$TESTS_DIR/test_workdir.txt" ]; then
  IFS= read -r TEST_WORKDIR < "$TESTS_DIR/test_workdir.txt" || true
  cd -- "$TEST_WORKDIR" || { echo "sweep test.sh: no directory $TEST_WORKDIR in the repository" >&2; exit 2; }
fi

mapfile -t RUN_ARGV < "$TESTS_DIR/run_argv.txt"
if [ "${#RUN_ARGV[@]}" -eq 0 ]; then
  echo "sweep test.sh: empty test command" >&2
  exit 2
fi
for i in "${!RUN_ARGV[@]}"; do
  arg="${RUN_ARGV[$i]}"
  arg="${arg//\{report_dir\}/$REPORT_DIR}"
  RUN_ARGV[$i]="${arg//\{tests_dir\}/$TESTS_DIR}"
done
if [ -f "$TESTS_DIR/run_env.txt" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    name="${line%%=*}"
    value="${line#*=}"
    [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
    value="${value//\{report_dir\}/$REPORT_DIR}"
    export "$name=${value//\{tests_dir\}/$TESTS_DIR}"
  done < "$TESTS_DIR/run_env.txt"
fi

# Reports the runner writes inside the repository: a stale or planted one is removed before the
# run, what the run wrote is copied under the report directory after it.
COLLECT=()
[ -f "$TESTS_DIR/report_paths.txt" ] && mapfile -t COLLECT < "$TESTS_DIR/report_paths.txt"
shopt -s nullglob
for pattern in "${COLLECT[@]}"; do
  for found in $pattern; do rm -rf -- "$found"; done
done

"${RUN_ARGV[@]}" 2>&1
status=$?

n=0
for pattern in "${COLLECT[@]}"; do
  for found in $pattern; do
    [ -L "$found" ] && continue
    mkdir -p -- "$REPORT_DIR/collected/$n"
    cp -R -P -- "$found" "$REPORT_DIR/collected/$n/" 2>/dev/null
    n=$((n + 1))
  done
done
if [ "$status" -eq 0 ]; then
  printf '1\n' > "$REWARD_FILE"
fi
echo "sweep test.sh: tests exited $status" >&2
exit "$status"
"""


@dataclass(frozen=True)
class Harness:
    """What a trial runs: the plan's test command, its runner, and (after the gates) the ids."""
    test_argv: tuple[str, ...]
    runner: Runner
    ids: tuple[str, ...] | None = None
    workdir: str | None = None          # the plan's test_workdir: where in the repository the command runs

    def selecting(self, ids: Sequence[str]) -> "Harness":
        return Harness(self.test_argv, self.runner, tuple(ids), self.workdir)


def resolve(test_argv: Sequence[str], runner_name: str | None = None, workdir: str | None = None) -> Harness:
    """The harness of a test command run in `workdir` of the repository (None: its root);
    UnknownRunner when no runner recognises the command, ValueError for an unsafe workdir."""
    if workdir is not None:
        why = layout.unsafe_relpath(workdir)
        if why:
            raise ValueError(f"test_workdir: {why}")
    return Harness(tuple(test_argv), runner_for(test_argv, runner_name), workdir=workdir)


def _lines(items: Sequence[str]) -> bytes:
    for item in items:
        if "\n" in item or "\r" in item or "\x00" in item:
            raise ValueError(f"harness item {item[:80]!r} has a line break")
    return "".join(f"{item}\n" for item in items).encode()


def harness_files(harness: Harness) -> dict[str, bytes]:
    """Every file of `tests/` sweep owns (relative to the bundle), byte for byte."""
    inv = harness.runner.invocation(list(harness.test_argv), list(harness.ids) if harness.ids is not None else None)
    files = {layout.TEST_SH: TEST_SH.encode(),
             layout.TEST_COMMAND: _lines(harness.test_argv),
             RUNNER_FILE: _lines([harness.runner.name]),
             RUN_ARGV: _lines(inv.argv),
             RUN_ENV: _lines([f"{k}={v}" for k, v in inv.env]),
             REPORT_PATHS: _lines(inv.collect),
             f"{layout.TESTS}/{HELPER_NAME}": HELPER.encode(),
             f"{layout.TESTS}/{REPORTER_NAME}": REPORTER.encode()}
    if harness.workdir is not None:
        files[layout.TEST_WORKDIR] = _lines([harness.workdir])
    if harness.ids is not None:
        files[TEST_IDS] = _lines(harness.ids)
    return files


def write_harness(bundle: Path, harness: Harness) -> None:
    """Write the harness into `bundle` (replacing what is there; a link is replaced, not followed)."""
    for rel, data in harness_files(harness).items():
        path = bundle / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_dir():
            _remove(path)
        tmp = path.with_name(path.name + ".sweep-tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o700 if rel == layout.TEST_SH else 0o600)
        os.replace(tmp, path)
    for rel, absent in ((TEST_IDS, harness.ids is None), (layout.TEST_WORKDIR, harness.workdir is None)):
        if absent and ((bundle / rel).exists() or (bundle / rel).is_symlink()):
            _remove(bundle / rel)


def _remove(path: Path) -> None:
    import shutil
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def differences(bundle: Path, harness: Harness) -> list[str]:
    """How the bundle's harness files differ from sweep's (empty: byte-identical)."""
    out = []
    for rel, want in harness_files(harness).items():
        path = bundle / rel
        if path.is_symlink() or not path.is_file():
            out.append(f"{rel}: missing (sweep writes it)")
            continue
        got = path.read_bytes()
        if got != want:
            out.append(f"{rel}: differs from the harness sweep generates ({_first_difference(got, want)})")
    if (bundle / TEST_IDS).exists() or (bundle / TEST_IDS).is_symlink():
        out.append(f"{TEST_IDS}: present (sweep writes the recorded ids itself, after the gates)")
    if harness.workdir is None and ((bundle / layout.TEST_WORKDIR).exists() or (bundle / layout.TEST_WORKDIR).is_symlink()):
        # where the tests run is the plan's (test_workdir), never the author's: a test_workdir.txt
        # pointing elsewhere could run a directory of tests the author chose instead of the PR's
        out.append(f"{layout.TEST_WORKDIR}: present, and the plan names no test_workdir (the tests run at the "
                   "repository's root)")
    return out


def _first_difference(got: bytes, want: bytes) -> str:
    got_lines, want_lines = got.splitlines(), want.splitlines()
    for n, (a, b) in enumerate(zip(got_lines, want_lines, strict=False), start=1):
        if a != b:
            return f"line {n}: {a[:60].decode(errors='replace')!r}, sweep's: {b[:60].decode(errors='replace')!r}"
    return f"{len(got_lines)} lines, sweep's has {len(want_lines)}"


def install(tests_dir: Path, harness: Harness) -> None:
    """Put sweep's harness over a trial's copy of `tests/` (whatever the bundle's copy holds)."""
    write_harness(tests_dir.parent, harness)


# ---- the solver's repository -------------------------------------------------------------------

def restore_test_tree(repo: Path, base_repo: Path) -> list[str]:
    """Give `repo` (a solver's, already copied for the trial) the base's test tree back.

    Every test path (layout.is_test_path) the base does not have is removed, every test file of the
    base is put back as the base has it (test.sh then installs the PR's own). Returns what was
    removed. A solver's planted `tests/test_000_forge.py` or `conftest.py` is gone before anything runs.
    """
    import shutil
    from sweep.tree import walk_tree
    base_tests = {rel for rel, st in walk_tree(base_repo)
                  if layout.is_test_path(rel) and not stat.S_ISDIR(st.st_mode)}
    removed = []
    for rel, st in list(walk_tree(repo)):
        if stat.S_ISDIR(st.st_mode) or not layout.is_test_path(rel) or rel in base_tests:
            continue
        try:
            os.unlink(repo / rel)
            removed.append(rel)
        except FileNotFoundError:
            pass
    for rel in sorted(base_tests):
        dest = repo / rel
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.is_dir():
            shutil.rmtree(dest)
        # a planted link on the way must not redirect the copy
        parent = dest.parent
        while parent != repo:
            if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
                parent.unlink()
                break
            parent = parent.parent
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = base_repo / rel
        if src.is_symlink():
            os.symlink(os.readlink(src), dest)
        else:
            shutil.copyfile(src, dest)
    return removed


# ---- what a run observed -------------------------------------------------------------------------

def read_reports(report_dir: Path) -> dict[str, bytes]:
    """The report directory's regular files (no link followed), each and all capped."""
    out: dict[str, bytes] = {}
    total = 0
    if report_dir.is_symlink() or not report_dir.is_dir():
        return out
    for base, dirs, files in os.walk(report_dir, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(base) / name
            rel = str(path.relative_to(report_dir))
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    continue
                data = fh.read(MAX_OUTPUT_BYTES + 1)
            if len(data) > MAX_OUTPUT_BYTES:
                continue            # a parser would refuse it anyway: not read into memory twice
            total += len(data)
            out[rel] = data
            if len(out) >= MAX_REPORT_FILES or total > MAX_OUTPUT_BYTES:
                return out
    return out


_CUT = re.compile(rb"\n\[sweep: ([0-9]+) bytes cut here; the transcript keeps the first and the last [0-9]+ bytes\]\n")


def output_size(transcript: bytes) -> int:
    """How many bytes the runner printed, from the provider's transcript (which marks what it cut)."""
    cut = _CUT.findall(transcript)
    return len(transcript) + sum(int(n) for n in cut[-1:])


@dataclass
class Scored:
    reward: float | None
    detail: str
    results: dict[str, str] | None = None
    problem: str | None = None


def score(harness: Harness, observed: Observed, rc: int | None, *, file_bytes: int | None) -> Scored:
    """The reward of one run, from what the harness observed (never from a file the tests wrote).

    With recorded ids: 1 when the runner exited 0 and reported every recorded id passed, else 0
    (an id it never reported, because it exited early or its module no longer loads, fails).
    Without (the gates' runs of the whole suite): 1 when it exited 0 and reported no failure, 0
    when it exited non-zero or reported a failure; no reward when it exited 0 with no per-test
    result at all. Output that reached the file-size bound is not scored (the runner may have been
    cut short by it, and the exit then says nothing).
    """
    size = output_size(observed.output)
    if file_bytes is not None and size >= file_bytes:
        return Scored(None, f"{FILE_BOUND_MARK} ({size} bytes); no reward")
    try:
        results: dict[str, str] | None = harness.runner.parse(observed)
        problem = None
    except RunnerProblem as exc:
        results, problem = None, str(exc)
    if harness.ids is not None:
        got = results or {}
        missing = [i for i in harness.ids if i not in got]
        failing = [i for i in harness.ids if i in got and got[i] != PASSED]
        if rc == 0 and not missing and not failing:
            return Scored(1.0, f"all {len(harness.ids)} recorded tests passed", results, problem)
        why = []
        if missing:
            why.append(f"{len(missing)} recorded test(s) not reported (the runner exited {rc} before reporting "
                       f"them): {', '.join(missing[:3])}")
        if failing:
            why.append(f"{len(failing)} failed: {', '.join(failing[:3])}")
        if not why:
            why.append(f"the runner exited {rc}")
        return Scored(0.0, "; ".join(why), results, problem)
    if results is None:
        if rc == 0:
            return Scored(None, f"the tests exited 0 but gave no per-test results ({harness.runner.title}): {problem}",
                          None, problem)
        return Scored(0.0, f"the tests exited {rc}; no per-test results: {problem}", None, problem)
    bad = [i for i, s in results.items() if s in (FAILED, "error")]
    if rc == 0 and not bad:
        return Scored(1.0, f"the tests exited 0; {len(results)} reported", results)
    return Scored(0.0, f"the tests exited {rc}; {len(bad)} of {len(results)} failed", results)


# ---- ids the bundle really has ---------------------------------------------------------------

def ghost_ids(bundle: Path, runner: Runner, ids: Sequence[str]) -> list[str]:
    """The ids no test file of the bundle has (a report naming a test that does not exist).

    The bundle's test files are the base repository's test paths and the PR's (tests/files). For
    Python (pytest, unittest) the files are parsed (`ast`, nothing run): the id's module or file
    must be one of them and define the id's class, and some test file must define its function.
    For the others, an id whose runner names its file must name one of them, and that file must
    contain all of the runner's `source_names` for it; an id without a file needs one test file
    that contains them. Text can be planted to match; a definition by that name at least must be there.
    """
    sources = _test_sources(bundle)
    if runner.name in ("pytest", "unittest"):
        defs = _python_definitions(sources)
        return [i for i in ids if not _python_test_exists(i, runner.name, defs)]
    out = []
    for test_id in ids:
        names = runner.source_names(test_id)
        file = runner.source_file(test_id) if runner.id_has_file else None
        if file is not None:
            text = sources.get(file)
            if text is None or not all(n.encode() in text for n in names):
                out.append(test_id)
        elif names and not any(all(n.encode() in text for n in names) for text in sources.values()):
            out.append(test_id)
    return out


def _python_definitions(sources: dict[str, bytes]) -> dict[str, tuple[set[str], set[str]]]:
    """file -> (class names, function names) defined anywhere in it (untrusted code: parsed, never run)."""
    import ast
    import warnings
    out: dict[str, tuple[set[str], set[str]]] = {}
    for rel, text in sources.items():
        if not rel.endswith(".py"):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        functions = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        out[rel] = (classes, functions)
    return out


def _python_test_exists(test_id: str, runner: str, defs: dict[str, tuple[set[str], set[str]]]) -> bool:
    all_functions = set().union(*(f for _c, f in defs.values())) if defs else set()
    if runner == "pytest":
        parts = base_id(test_id).split("::")
        if len(parts) < 2 or parts[0] not in defs:
            return False
        classes, _functions = defs[parts[0]]
        function = parts[-1].split("[", 1)[0]
        return all(c in classes for c in parts[1:-1]) and function in all_functions
    parts = base_id(test_id).split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module, rest = parts[:cut], parts[cut:]
        stem = "/".join(module)
        files = [f for f in defs if f in (f"{stem}.py", f"{stem}/__init__.py")
                 or f.endswith((f"/{stem}.py", f"/{stem}/__init__.py"))]
        for file in files:
            classes, _functions = defs[file]
            if all(c in classes for c in rest[:-1]) and rest[-1] in all_functions:
                return True
    return False


def _test_sources(bundle: Path) -> dict[str, bytes]:
    from sweep.tree import walk_tree
    sources: dict[str, bytes] = {}
    deleted = set(_read_list(bundle / layout.DELETED_TEST_FILES))
    repo = bundle / layout.ENV_REPO
    for rel, st in walk_tree(repo):
        if stat.S_ISREG(st.st_mode) and layout.is_test_path(rel) and rel not in deleted and st.st_size <= MAX_SOURCE_BYTES:
            sources[rel] = (repo / rel).read_bytes()
            if len(sources) >= MAX_SOURCE_FILES:
                break
    files = bundle / layout.TEST_FILES_DIR
    for rel in _read_list(bundle / layout.TEST_FILES):
        path = files / rel
        if layout.unsafe_relpath(rel) is None and path.is_file() and not path.is_symlink():
            sources[rel] = path.read_bytes()[:MAX_SOURCE_BYTES]
    return sources


def _read_list(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line]
    except OSError:
        return []


def check_selection_size(ids: Sequence[str]) -> str | None:
    if len(ids) > MAX_SELECTED:
        return f"{len(ids)} recorded tests; a selected run names at most {MAX_SELECTED}"
    return None


__all__ = ["Harness", "resolve", "harness_files", "write_harness", "differences", "install", "restore_test_tree",
           "read_reports", "score", "Scored", "ghost_ids", "UnknownRunner", "get_runner", "base_id"]
