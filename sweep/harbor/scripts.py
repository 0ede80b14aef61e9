"""The fixed scripts and files sweep writes into a mechanical bundle (the verifier, tests/test.sh,
is the harness's: sweep/harbor/harness.py).

The scripts are constants: no value from a pull request (title, body, file names) and no value
from the plan (the test command) is ever interpolated into them. They read their inputs from
data files next to themselves, one item a line, with `while IFS= read -r` and `mapfile -t`, so a
file named `$(touch /tmp/pwned)` is just a file name.
"""
from __future__ import annotations

import json

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
