"""The Harbor task bundle as sweep writes and reads it: names, paths, and which paths are tests.

    task/
      task.toml            Harbor configuration (version, [metadata], [verifier], [agent], [environment])
      instruction.md       what the solver is asked to do (the PR's title and body)
      environment/
        Dockerfile         the image Harbor builds (COPY repo/ /app/); not built by the local provider
        repo/              the repository at the PR's base commit, without .git
      tests/
        test.sh            sweep's harness (sweep/harbor/harness.py): runs run_argv.txt
        test_files.txt     the PR's test files, one relative path a line (data, never shell)
        deleted_test_files.txt
        test_command.txt   the test command's argv, one element a line
        test_workdir.txt   optional: the directory (relative to the repository) the command runs in
        runner.txt, run_argv.txt, run_env.txt, report_paths.txt, helpers: the rest of the harness
        files/<path>       the PR's version of each test file
      solution/
        solve.sh           applies solution.patch to the repository
        solution.patch     the PR's non-test diff (git diff --binary)

Conventions the scripts follow (Harbor's): tests/ is uploaded to /tests and solution/ to
/solution; both scripts find their data next to themselves; the repository is `$REPO_DIR`
(default /app, the Dockerfile's WORKDIR) and logs go to `$LOGS_DIR` (default /logs).
"""
from __future__ import annotations

import re

TASK_TOML = "task.toml"
INSTRUCTION = "instruction.md"
ENVIRONMENT = "environment"
DOCKERFILE = "environment/Dockerfile"
ENV_REPO = "environment/repo"
TESTS = "tests"
TEST_SH = "tests/test.sh"
TEST_FILES = "tests/test_files.txt"
DELETED_TEST_FILES = "tests/deleted_test_files.txt"
TEST_COMMAND = "tests/test_command.txt"
TEST_WORKDIR = "tests/test_workdir.txt"
TEST_FILES_DIR = "tests/files"
SOLUTION = "solution"
SOLVE_SH = "solution/solve.sh"
SOLUTION_PATCH = "solution/solution.patch"
REWARD_RELPATH = "verifier/reward.txt"        # under $LOGS_DIR
REWARD_JSON_RELPATH = "verifier/reward.json"

REQUIRED_FILES = (TASK_TOML, INSTRUCTION, TEST_SH, SOLVE_SH)
REQUIRED_DIRS = (ENVIRONMENT, TESTS, SOLUTION)

_TEST_DIR_NAMES = {"test", "tests", "testing", "__tests__", "spec", "specs"}
_TEST_FILE_RES = [re.compile(p) for p in (
    r"^test_.*\.py$", r"^.*_test\.py$", r"^tests?\.py$", r"^conftest\.py$",
    r"^.*_test\.go$", r"^.*\.(test|spec)\.[cm]?[jt]sx?$", r"^.*_spec\.rb$", r"^.*_test\.rb$",
    r"^.*Tests?\.(java|kt|cs|swift)$", r"^test_.*\.(c|cc|cpp|rs)$",
)]


def is_test_path(path: str) -> bool:
    """True for a path that is part of the test suite (by directory or file naming convention)."""
    parts = path.split("/")
    if any(part.lower() in _TEST_DIR_NAMES for part in parts[:-1]):
        return True
    return any(rx.match(parts[-1]) for rx in _TEST_FILE_RES)


def unsafe_relpath(path: object) -> str | None:
    """Why `path` (from a diff or a bundle: untrusted) is unsafe to use as a relative path, or None.

    Safe means: a non-empty relative posix path, no `.`/`..`/empty segment, no control character
    (so it can be stored one-a-line and never spans lines), no backslash.
    """
    if not isinstance(path, str) or not path:
        return "empty path"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        return f"path {path!r} contains a control character"
    if path.startswith("/"):
        return f"path {path!r} is absolute"
    if "\\" in path:
        return f"path {path!r} contains a backslash"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return f"path {path!r} has an empty, '.' or '..' segment"
    return None
