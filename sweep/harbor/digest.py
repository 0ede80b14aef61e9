"""A Harbor task's content digest, as Harbor's packager computes it: what dataset.toml lists for
each task (`sweep export` writes it; an evaluation checks a task against it before each cell)."""
from __future__ import annotations

import hashlib
from pathlib import Path

# Harbor's packager leaves these out of a task's digest (harbor/publisher/packager.py DEFAULT_IGNORES)
_DIGEST_IGNORED_DIRS = {"__pycache__"}
_DIGEST_IGNORED_SUFFIXES = (".pyc", ".swp", ".swo", "~")


def harbor_digest(task: Path) -> str:
    """The task's content digest as Harbor 0.26's packager computes it (what `harbor sync` writes
    into dataset.toml): sha256 over "<relative path>\\0<sha256 of the file>\\n" for task.toml,
    instruction.md and every file under environment/, tests/, solution/, sorted by path, without
    __pycache__/, *.pyc, editor files and .harborignore. tests/test_export_harbor.py checks it
    against `harbor sync`."""
    from sweep.tree import file_sha256
    files: list[str] = [name for name in ("task.toml", "instruction.md", "README.md") if (task / name).is_file()]

    def visit(directory: Path) -> None:
        for entry in sorted(directory.iterdir()):
            if entry.name in _DIGEST_IGNORED_DIRS and entry.is_dir():
                continue
            if entry.is_dir() and not entry.is_symlink():
                visit(entry)
            elif entry.is_file() and not entry.name.endswith(_DIGEST_IGNORED_SUFFIXES) \
                    and entry.name not in (".DS_Store", ".harborignore"):
                files.append(entry.relative_to(task).as_posix())

    for top in ("environment", "tests", "solution"):
        if (task / top).is_dir():
            visit(task / top)
    outer = hashlib.sha256()
    for rel in sorted(files):
        outer.update(f"{rel}\0{file_sha256(task / rel)}\n".encode())
    return "sha256:" + outer.hexdigest()
