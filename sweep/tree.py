"""Walking and hashing files on disk: stdlib only, used by harbor, providers, export and frozen.

It sits below every package that reads a tree, so the task-bundle code (harbor) and the workspace
audit (providers) share one walker without importing each other.
"""
from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path


def walk_tree(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative posix path, lstat) for every entry under `root` (root excluded), sorted, links not
    followed; directories come before what they hold. Entries that vanish meanwhile are skipped."""
    root = Path(root)
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        abs_dir = root / rel_dir if rel_dir else root
        try:
            names = sorted(os.listdir(abs_dir))
        except OSError:
            continue
        for name in names:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                st = os.lstat(abs_dir / name)
            except OSError:
                continue
            yield rel, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file's bytes (hashlib.file_digest: no hand-written read loop)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
