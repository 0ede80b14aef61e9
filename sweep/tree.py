"""Walking, hashing and copying files on disk: stdlib only, used by harbor, providers, export and frozen.

It sits below every package that reads a tree, so the task-bundle code (harbor) and the workspace
audit (providers) share one walker without importing each other.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from runstate.errors import SweepError


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


class UnsafeTree(SweepError):
    """A workspace holds what sweep refuses to copy or hash: a FIFO, a device, a socket, or more
    bytes than the bound allows. The message names the path."""


def data_segments(fd: int, size: int):
    """(offset, length) of the data in a file, holes skipped (SEEK_DATA/SEEK_HOLE); the whole file
    as one segment where the filesystem does not report holes."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:
            return             # ENXIO: no data after offset (a trailing hole)
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end - start
        offset = end


def _copy_file(src: Path, dst: Path) -> bool:
    """Copy one regular file, data segment by data segment (holes stay holes), with its mode and
    times; False if it cannot be read or is no longer a regular file (never blocks on a FIFO)."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            sparse = st.st_blocks * 512 < st.st_size
            for start, length in (data_segments(fd, st.st_size) if sparse else [(0, st.st_size)]):
                position, remaining = start, length
                while remaining > 0:
                    chunk = os.pread(fd, min(1 << 20, remaining), position)
                    if not chunk:
                        break
                    os.pwrite(out, chunk, position)
                    position += len(chunk)
                    remaining -= len(chunk)
            os.ftruncate(out, st.st_size)
        finally:
            os.close(out)
    except OSError:
        return False
    finally:
        os.close(fd)
    shutil.copystat(src, dst, follow_symlinks=False)
    return True


def check_tree(root: Path, *, max_bytes: int | None = None) -> None:
    """Refuse a tree sweep would have to copy or hash: FIFOs, devices, sockets (UnsafeTree names the
    first), or a total apparent size above `max_bytes` (a sparse file counts at its full size:
    that is what a reader of it would get)."""
    total = 0
    for rel, st in walk_tree(root):
        mode = st.st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
            raise UnsafeTree(f"{rel!r} is {kind}; sweep copies only files, directories and symlinks",
                             path=Path(root) / rel)
        if stat.S_ISREG(mode):
            total += st.st_size
            if max_bytes is not None and total > max_bytes:
                raise UnsafeTree(f"more than {max_bytes} bytes (apparent size; {rel!r} brings it to {total})",
                                 path=Path(root))


def copy_tree(src: Path, dst: Path, *, max_bytes: int | None = None) -> None:
    """Copy a workspace tree: files (sparse stay sparse), directories, symlinks as links (never
    followed). Refuses, before writing anything, what `check_tree` refuses."""
    src, dst = Path(src), Path(dst)
    check_tree(src, max_bytes=max_bytes)
    dst.mkdir(parents=True, exist_ok=True)
    for rel, st in walk_tree(src):
        target = dst / rel
        if stat.S_ISDIR(st.st_mode):
            target.mkdir(exist_ok=True)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(src / rel), target)
        elif stat.S_ISREG(st.st_mode):
            if not _copy_file(src / rel, target):
                raise UnsafeTree(f"{rel!r} could not be read or changed kind while being copied", path=src / rel)
    for rel, st in walk_tree(src):   # directory modes last: a read-only directory must be filled first
        if stat.S_ISDIR(st.st_mode):
            os.chmod(dst / rel, stat.S_IMODE(st.st_mode))
    shutil.copystat(src, dst)
