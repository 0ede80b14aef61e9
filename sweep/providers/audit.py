"""The enforcement audit: what changed in a workspace during a session, and undoing what may not.

Before a session the workspace is snapshotted (every path: kind, size, mode, mtime and a sha256 of
the content; symlinks by their target, never followed). While snapshotting, every path outside the
role's write scope is also copied to a pre-session copy. After the session a second snapshot is
diffed against the first: any created, changed or deleted path outside the scope, or any change at
all by a read-only role, is a violation. Violations are then reverted from the pre-session copy,
so out-of-scope changes never reach the task bundle or the next session, whatever the caller does.

Judged by content, kind and mode; an mtime-only change is not a change (it cannot alter what a
later step reads), and mtimes are not trusted to skip hashing (they can be forged with utime).
A directory change is a violation only if the directory is outside the scope and no in-scope path
could live below it, so creating `task/sub/` for `task/**` is fine but creating `stray/` is not.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from roles.scope import scope_could_contain, scope_matches
from sweep.tree import UnsafeTree, check_tree, copy_tree, data_segments, walk_tree  # noqa: F401 - re-exported

CHUNK = 1 << 20


@dataclass(frozen=True)
class PathState:
    kind: str          # "file" | "dir" | "link" | "other"
    size: int
    mode: int          # permission bits only
    mtime_ns: int
    digest: str        # sha256 of a file's content; a link's target; "" otherwise

    def same_as(self, other: "PathState") -> bool:
        return (self.kind, self.size, self.mode, self.digest) == (other.kind, other.size, other.mode, other.digest)


@dataclass(frozen=True)
class Change:
    path: str          # workspace-relative, posix
    what: str          # "created" | "changed" | "deleted"
    kind: str          # the kind after (created/changed) or before (deleted)


def _hash_file(src: Path, copy_to: Path | None, *, want_hash: bool = True) -> str:
    """sha256 of a file's content, copying it to `copy_to` on the way. A sparse file is read and
    copied segment by segment, its holes neither read nor written (a 10 GiB sparse file costs what
    its data costs); its digest is then `sparse:` + the sha256 of its size and (offset, length,
    data) frames, so it can never be confused with a dense file's digest."""
    h = hashlib.sha256()
    out = None
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not-a-file"          # swapped for a FIFO since the lstat: never block on it
        if copy_to is not None:
            copy_to.parent.mkdir(parents=True, exist_ok=True)
            out = os.open(copy_to, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        sparse = st.st_blocks * 512 < st.st_size
        if sparse:
            h.update(b"sparse\0%d\0" % st.st_size)
        for start, length in (data_segments(fd, st.st_size) if sparse else [(0, st.st_size)]):
            if sparse:
                h.update(b"%d:%d\0" % (start, length))
            os.lseek(fd, start, os.SEEK_SET)
            position, remaining = start, length
            while remaining > 0:
                chunk = os.read(fd, min(CHUNK, remaining))
                if not chunk:
                    break
                if want_hash:
                    h.update(chunk)
                if out is not None:
                    os.pwrite(out, chunk, position)
                position += len(chunk)
                remaining -= len(chunk)
        if out is not None:
            os.ftruncate(out, st.st_size)                # the copy keeps the size; holes stay holes
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    finally:
        os.close(fd)
        if out is not None:
            os.close(out)
    if copy_to is not None:
        shutil.copystat(src, copy_to)
    return ("sparse:" if sparse else "") + h.hexdigest()


def _state(path: Path, st: os.stat_result, copy_to: Path | None) -> PathState:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        if copy_to is not None:
            copy_to.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, copy_to)
        return PathState("link", 0, 0, st.st_mtime_ns, target)
    if stat.S_ISDIR(st.st_mode):
        return PathState("dir", 0, mode, st.st_mtime_ns, "")
    if stat.S_ISREG(st.st_mode):
        return PathState("file", st.st_size, mode, st.st_mtime_ns, _hash_file(path, copy_to))
    return PathState("other", 0, mode, st.st_mtime_ns, "")


def snapshot(root: Path, *, copy_to: Path | None = None,
             copy_if: Callable[[str], bool] | None = None) -> dict[str, PathState]:
    """Every path under `root` (root itself excluded), optionally copying those `copy_if` selects."""
    root = Path(root)
    states: dict[str, PathState] = {}
    for rel, st in walk_tree(root):
        target = copy_to / rel if copy_to is not None and copy_if is not None and copy_if(rel) else None
        state = _state(root / rel, st, target)
        states[rel] = state
        if state.kind == "dir" and target is not None:
            target.mkdir(parents=True, exist_ok=True)
    return states


def diff(before: dict[str, PathState], after: dict[str, PathState]) -> list[Change]:
    changes: list[Change] = []
    for rel in sorted(before.keys() | after.keys()):
        old, new = before.get(rel), after.get(rel)
        if old is None:
            if new is not None:
                changes.append(Change(rel, "created", new.kind))
        elif new is None:
            changes.append(Change(rel, "deleted", old.kind))
        elif not old.same_as(new):
            changes.append(Change(rel, "changed", new.kind))
    return changes


def in_scope(path: str, kind: str, scope: list[str]) -> bool:
    if not scope:
        return False
    if scope_matches(path, scope):
        return True
    return kind == "dir" and scope_could_contain(path, scope)


def violations(changes: list[Change], scope: list[str]) -> list[Change]:
    """The changes a role with `scope` was not allowed to make (all of them when scope is empty)."""
    return [c for c in changes if not in_scope(c.path, c.kind, scope)]


def _remove(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.unlink(path)


def revert(root: Path, pre_copy: Path, bad: list[Change], before: dict[str, PathState]) -> list[str]:
    """Undo `bad` changes under `root` from the pre-session copy; returns paths it could not restore."""
    root = Path(root)
    failed: list[str] = []
    # Remove what the session created or replaced, deepest first.
    for change in sorted(bad, key=lambda c: c.path.count("/"), reverse=True):
        if change.what in ("created", "changed"):
            old = before.get(change.path)
            if change.what == "changed" and old is not None and old.kind == "dir" and change.kind == "dir":
                continue   # a mode change on a directory: fixed below, keep its content
            _remove(root / change.path)
    # Restore what existed before, shallowest first so parents exist.
    for change in sorted(bad, key=lambda c: c.path.count("/")):
        old = before.get(change.path)
        if old is None:
            continue
        dst = root / change.path
        src = pre_copy / change.path
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            if old.kind == "dir":
                dst.mkdir(exist_ok=True)
                os.chmod(dst, old.mode)
            elif old.kind == "link":
                os.symlink(old.digest, dst)
            elif old.kind == "file" and src.is_file():
                shutil.copy2(src, dst)
            else:
                failed.append(change.path)
        except OSError:
            failed.append(change.path)
    return failed
