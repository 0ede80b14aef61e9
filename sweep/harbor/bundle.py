"""Checking a task bundle and naming its content: `validate_bundle` and `bundle_sha256`.

`validate_bundle` is the first gate: it returns every problem it finds (empty = valid) and never
raises for a bad bundle, because the bundle is an agent's output and a bad one is an ordinary
outcome. Beyond Harbor's layout it refuses what would be unsafe to copy or run locally: a link at
`environment/repo`, `tests`, `solution` or on their path, a symlink whose strict realpath leaves
the part it sits in (every hop followed), device files, and paths with control characters.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tomllib
from pathlib import Path

from sweep.harbor import layout
from sweep.tree import file_sha256, link_escape, walk_tree

MAX_PROBLEMS = 50


def _check_toml(path: Path, problems: list[str]) -> None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        problems.append(f"{layout.TASK_TOML}: not valid TOML: {exc}")
        return
    if not isinstance(data.get("version", data.get("schema_version")), str):
        problems.append(f"{layout.TASK_TOML}: missing version (Harbor expects version = \"1.0\")")
    for section in ("metadata", "verifier", "agent", "environment"):
        if section in data and not isinstance(data[section], dict):
            problems.append(f"{layout.TASK_TOML}: [{section}] must be a table")
    for section in ("verifier", "agent"):
        timeout = data.get(section, {}).get("timeout_sec") if isinstance(data.get(section), dict) else None
        if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0):
            problems.append(f"{layout.TASK_TOML}: {section}.timeout_sec must be a positive number")


def _check_lists(root: Path, problems: list[str]) -> None:
    """The data files sweep's test.sh reads: every listed path safe and present."""
    listed = root / layout.TEST_FILES
    if not listed.is_file():
        return   # not a bundle in sweep's mechanical layout: its test.sh is its own business
    for name in (layout.TEST_FILES, layout.DELETED_TEST_FILES):
        path = root / name
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line:
                continue
            why = layout.unsafe_relpath(line)
            if why:
                problems.append(f"{name}: {why}")
            elif name == layout.TEST_FILES and not (root / layout.TEST_FILES_DIR / line).is_file():
                problems.append(f"{name}: {line!r} has no copy under {layout.TEST_FILES_DIR}/")
    command = root / layout.TEST_COMMAND
    if not command.is_file() or not command.read_text(encoding="utf-8", errors="replace").strip():
        problems.append(f"{layout.TEST_COMMAND}: missing or empty (the test command, one argument a line)")
    workdir = root / layout.TEST_WORKDIR
    if workdir.is_file():
        lines = workdir.read_text(encoding="utf-8", errors="replace").splitlines()
        why = layout.unsafe_relpath(lines[0]) if len(lines) == 1 and lines[0] else "not one relative path"
        if why:
            problems.append(f"{layout.TEST_WORKDIR}: {why}")


# The parts copied on their own (the trial's repository, /tests, /solution): a link in one must
# stay in it, since a copy of the part alone resolves the link against wherever the copy sits.
_PARTS = (layout.ENV_REPO, layout.TESTS, layout.SOLUTION)


def _linked_parts(root: Path) -> list[str]:
    """A link at environment/repo, tests or solution, or on their path: each
    is copied as a directory, so a link there would copy wherever it points (lstat, never stat)."""
    problems = []
    for rel in (layout.ENVIRONMENT, *_PARTS):
        path = root / rel
        if path.is_symlink():
            problems.append(f"{rel}: is a symlink (to {os.readlink(path)!r}); "
                            "it must be a directory of the bundle itself")
    return problems


def validate_bundle(bundle_dir: str | Path) -> list[str]:
    """Every problem with the bundle at `bundle_dir`; an empty list means it is valid."""
    root = Path(bundle_dir)
    if not root.is_dir():
        return [f"{root}: not a directory"]
    if root.is_symlink():
        return [f"{root.name}: is a symlink; a bundle must be a directory itself"]
    problems: list[str] = []
    for rel in layout.REQUIRED_DIRS:
        if not (root / rel).is_dir() or (root / rel).is_symlink():
            problems.append(f"{rel}/: missing directory")
    for rel in layout.REQUIRED_FILES:
        path = root / rel
        if path.is_symlink() or not path.is_file():
            problems.append(f"{rel}: missing file")
        elif path.stat().st_size == 0:
            problems.append(f"{rel}: empty")
    if not (root / layout.DOCKERFILE).is_file():
        problems.append(f"{layout.DOCKERFILE}: missing (Harbor builds the task image from it)")
    if not (root / layout.ENV_REPO).is_dir():
        problems.append(f"{layout.ENV_REPO}/: missing (the repository at the base commit; "
                        "local trials copy it as the starting state)")
    if (root / layout.TASK_TOML).is_file():
        _check_toml(root / layout.TASK_TOML, problems)
    test_sh = root / layout.TEST_SH
    if test_sh.is_file() and not test_sh.is_symlink():
        text = test_sh.read_text(encoding="utf-8", errors="replace")
        if "reward" not in text:
            problems.append(f"{layout.TEST_SH}: never mentions the reward file ($LOGS_DIR/verifier/reward.txt)")
    if (root / layout.INSTRUCTION).is_file() and not (root / layout.INSTRUCTION).read_text(
            encoding="utf-8", errors="replace").strip():
        problems.append(f"{layout.INSTRUCTION}: blank")
    linked = _linked_parts(root)
    problems += linked
    for rel, st in walk_tree(root):
        why = layout.unsafe_relpath(rel)
        if why:
            problems.append(f"{why}")
            continue
        if stat.S_ISLNK(st.st_mode):
            if linked:
                continue      # a part that is itself a link: what lies "under" it is not the bundle's
            part = next((p for p in _PARTS if rel.startswith(p + "/")), "")
            why = link_escape(root / rel, root / part if part else root)
            if why:
                problems.append(f"{rel}: {why}: it leaves the bundle" + (f"'s {part}/" if part else ""))
        elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            problems.append(f"{rel}: not a regular file or directory")
        if len(problems) >= MAX_PROBLEMS:
            break
    if not problems:
        _check_lists(root, problems)
    return problems[:MAX_PROBLEMS]


def bundle_sha256(bundle_dir: str | Path) -> str:
    """A digest of the bundle's content: relative paths plus file bytes (and symlink targets).

    Stable across copies, checkouts and machines: modes, owners, mtimes and empty directories
    do not enter it.
    """
    root = Path(bundle_dir)
    outer = hashlib.sha256()
    for rel, st in walk_tree(root):
        if stat.S_ISREG(st.st_mode):
            outer.update(b"F\0" + rel.encode() + b"\0" + file_sha256(root / rel).encode() + b"\n")
        elif stat.S_ISLNK(st.st_mode):
            outer.update(b"L\0" + rel.encode() + b"\0" + os.readlink(root / rel).encode() + b"\n")
    return outer.hexdigest()
