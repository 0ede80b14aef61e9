"""The fixed scripts and files sweep writes into a mechanical bundle.

The scripts are constants: no value from a pull request (title, body, file names) and no value
from the plan (the test command) is ever interpolated into them. They read their inputs from
data files next to themselves, one item a line, with `while IFS= read -r` and `mapfile -t`, so a
file named `$(touch /tmp/pwned)` is just a file name.
"""
from __future__ import annotations

import json

TEST_SH = r"""#!/usr/bin/env bash
# Harbor verifier written by sweep. Applies the PR's test files to the repository, runs the test
# command and writes the reward (1 = the tests pass, 0 = they do not) to
# $LOGS_DIR/verifier/reward.txt. Every input is read from a data file next to this script.
set -u
TESTS_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="${REPO_DIR:-/app}"
LOGS_DIR="${LOGS_DIR:-/logs}"
mkdir -p -- "$LOGS_DIR/verifier"
REWARD_FILE="$LOGS_DIR/verifier/reward.txt"
printf '0\n' > "$REWARD_FILE"   # a verifier that dies half-way has scored 0, not nothing

cd -- "$REPO_DIR" || { echo "sweep test.sh: no repository at $REPO_DIR" >&2; exit 1; }

while IFS= read -r rel || [ -n "$rel" ]; do
  [ -n "$rel" ] || continue
  rm -rf -- "$rel"              # a symlink or directory planted at a test path must not redirect the copy
  mkdir -p -- "$(dirname -- "$rel")"
  cp -- "$TESTS_DIR/files/$rel" "$rel" || { echo "sweep test.sh: cannot install test file" >&2; exit 1; }
done < "$TESTS_DIR/test_files.txt"

if [ -f "$TESTS_DIR/deleted_test_files.txt" ]; then
  while IFS= read -r rel || [ -n "$rel" ]; do
    [ -n "$rel" ] && rm -rf -- "$rel"
  done < "$TESTS_DIR/deleted_test_files.txt"
fi

mapfile -t TEST_CMD < "$TESTS_DIR/test_command.txt"
if [ "${#TEST_CMD[@]}" -eq 0 ]; then
  echo "sweep test.sh: empty test command" >&2
  exit 1
fi

# Per-test evidence: ask the runner for a JUnit report (pytest reads PYTEST_ADDOPTS, and runs the
# modules that load even when another does not; `python -m
# unittest` goes through sweep's runner next to this script, same discovery and exit status).
JUNIT_XML="$LOGS_DIR/verifier/junit.xml"
rm -f -- "$JUNIT_XML"
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} --junitxml='$JUNIT_XML' --continue-on-collection-errors"
if [ "${#TEST_CMD[@]}" -ge 3 ] && [ "${TEST_CMD[1]}" = "-m" ] && [ "${TEST_CMD[2]}" = "unittest" ] \
   && [ -f "$TESTS_DIR/sweep_unittest_junit.py" ]; then
  TEST_CMD=("${TEST_CMD[0]}" "$TESTS_DIR/sweep_unittest_junit.py" "$JUNIT_XML" "${TEST_CMD[@]:3}")
fi

OUTPUT="$LOGS_DIR/verifier/test-output.txt"
"${TEST_CMD[@]}" > "$OUTPUT" 2>&1
status=$?
size=$(wc -c < "$OUTPUT")
# Output that reached the file-size bound of the sandbox (bash's `ulimit -f` counts 1024-byte blocks)
# was cut short by it: the tests' exit status then says nothing about the code, so no reward.
fsize=$(ulimit -f)
if [ "$fsize" != "unlimited" ] && [ "$size" -ge $((fsize * 1024)) ]; then
  rm -f -- "$REWARD_FILE"
  echo "sweep test.sh: the test output reached the file-size bound ($size bytes); no reward" >&2
  exit 1
fi
# Only the last 1 MiB is kept (the failures and the summary come last), saying how much was cut.
KEEP=1048576
if [ "$size" -gt "$KEEP" ]; then
  { printf '[sweep test.sh: the first %s bytes of the test output were cut here]\n' "$((size - KEEP))"
    tail -c "$KEEP" -- "$OUTPUT"; } > "$OUTPUT.cut" && mv -f -- "$OUTPUT.cut" "$OUTPUT"
fi
tail -c 20000 -- "$OUTPUT"
if [ "$status" -eq 0 ]; then
  printf '1\n' > "$REWARD_FILE"
else
  printf '0\n' > "$REWARD_FILE"
fi
echo "sweep test.sh: tests exited $status"
exit 0
"""

SOLVE_SH = r"""#!/usr/bin/env bash
# Reference solution written by sweep: applies the PR's non-test changes to the repository.
set -eu
SOLUTION_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="${REPO_DIR:-/app}"
cd -- "$REPO_DIR"
# The repository has no .git of its own: stop git from finding an enclosing repository and applying
# the patch relative to it.
export GIT_CEILING_DIRECTORIES="$(dirname -- "$PWD")"
git apply --whitespace=nowarn --binary -- "$SOLUTION_DIR/solution.patch"
"""

DOCKERFILE = """# Task image for Harbor. sweep's local provider does not build it (environment_fidelity = "host");
# Harbor, Modal or Daytona do. The repository is copied to /app, the workdir the scripts expect.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY repo/ /app/
"""


def toml_string(value: str) -> str:
    """A TOML basic string for any text (JSON's escapes are TOML's, except DEL, which TOML wants escaped)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def task_toml(*, source_repo: str, base: str, head: str, test_files: int, verifier_timeout_s: float = 600.0,
              agent_timeout_s: float = 3600.0) -> str:
    return "\n".join([
        'version = "1.0"',
        "",
        "[metadata]",
        'author_name = "sweep oracle"',
        'category = "programming"',
        'tags = ["pull-request", "sweep"]',
        "",
        "[metadata.sweep]",
        f"source_repo = {toml_string(source_repo)}",
        f"base = {toml_string(base)}",
        f"head = {toml_string(head)}",
        f"test_files = {int(test_files)}",
        "",
        "[verifier]",
        f"timeout_sec = {float(verifier_timeout_s)}",
        "",
        "[agent]",
        f"timeout_sec = {float(agent_timeout_s)}",
        "",
        "[environment]",
        "build_timeout_sec = 600.0",
        "cpus = 1",
        "memory_mb = 2048",
        "storage_mb = 10240",
        "",
    ])


def instruction_md(title: str, body: str) -> str:
    """The solver's instruction: the PR's own words, as data (markdown text, never executed)."""
    title = " ".join(title.split()) or "(untitled pull request)"
    body = body.strip()
    parts = [f"# {title}", ""]
    if body:
        parts += [body, ""]
    parts += ["The repository is in your working directory. Change it so the behaviour described above holds.", ""]
    return "\n".join(parts)
