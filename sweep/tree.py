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


def require_real_dir(path: Path) -> None:
    """`path` must be a directory itself, not a link to one (lstat, never stat): every walk and
    copy starts here, because listing a link at the root would copy or hash wherever it points
    (a bundle's `environment/repo` made a link to the operator's home was copied into every trial)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UnsafeTree(f"{path} cannot be read: {exc.strerror}", path=Path(path)) from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeTree(f"{path} is a symlink; sweep copies a directory, never where a link points",
                         path=Path(path))
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeTree(f"{path} is not a directory", path=Path(path))


def link_escape(link: Path, inside: Path) -> str | None:
    """Why the symlink `link` resolves outside the directory `inside`, or None if it stays in.

    The strict realpath (every hop followed, as the kernel would): a chain of relative links, each
    of which looks local, still lands where it lands. A dangling link is judged by where it would
    point once its target is created; a loop does not resolve at all and is refused."""
    target = os.readlink(link)
    if os.path.isabs(target):
        return f"symlink to {target!r} is absolute (it would point elsewhere in every copy)"
    base = os.path.realpath(inside, strict=True)
    try:
        real = os.path.realpath(link, strict=True)
    except FileNotFoundError:
        real = os.path.realpath(link)
    except OSError as exc:
        return f"symlink to {target!r} does not resolve ({exc.strerror or exc})"
    if real != base and not real.startswith(base + os.sep):
        return f"symlink to {target!r} resolves outside {Path(inside).name}/"
    return None


def links_leaving(root: Path) -> list[str]:
    """`rel: why` for every symlink under `root` that resolves outside it (see link_escape)."""
    require_real_dir(root)
    out = []
    for rel, st in walk_tree(root):
        if stat.S_ISLNK(st.st_mode):
            why = link_escape(Path(root) / rel, Path(root))
            if why:
                out.append(f"{rel}: {why}")
    return out


def check_tree(root: Path, *, max_bytes: int | None = None) -> None:
    """Refuse a tree sweep would have to copy or hash: a root that is not a real directory, FIFOs,
    devices, sockets (UnsafeTree names the first), or a total apparent size above `max_bytes` (a
    sparse file counts at its full size: that is what a reader of it would get)."""
    require_real_dir(root)
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


# ---- writing under a directory descriptor: no name can leave it ---------------------------------

_ZERO_CHUNK = 1 << 20


class DirFds:
    """Directory descriptors for the path being written, opened one segment at a time relative to
    the destination's descriptor with O_NOFOLLOW (created 0700 where missing): a link, or anything
    but a directory, where a directory is expected fails the open, whatever a string test of the
    name would have said. Used for every tree sweep writes from untrusted bytes (a git tree, an
    archive downloaded from a sandbox)."""

    FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

    def __init__(self, dest: Path) -> None:
        self.stack: list[tuple[str, int]] = [("", os.open(dest, self.FLAGS))]

    def at(self, parts: list[str] | tuple[str, ...]) -> int:
        depth = 0
        while depth < len(parts) and depth + 1 < len(self.stack) and self.stack[depth + 1][0] == parts[depth]:
            depth += 1
        while len(self.stack) > depth + 1:
            os.close(self.stack.pop()[1])
        for name in parts[depth:]:
            parent = self.stack[-1][1]
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                pass
            self.stack.append((name, os.open(name, self.FLAGS, dir_fd=parent)))
        return self.stack[-1][1]

    def close(self) -> None:
        while self.stack:
            os.close(self.stack.pop()[1])


def write_stream(stream, size: int, fd: int) -> None:
    """`size` bytes of `stream` (a binary reader) into `fd`; runs of zeros become holes, so what was
    sparse stays sparse and a dense run of zeros costs no disk."""
    left, offset = size, 0
    while left > 0:
        chunk = stream.read(min(_ZERO_CHUNK, left))
        if not chunk:
            raise OSError(f"the stream ended {left} bytes early")
        if chunk.count(0) != len(chunk):
            view = memoryview(chunk)
            while view:
                n = os.pwrite(fd, view, offset)
                view, offset = view[n:], offset + n
        else:
            offset += len(chunk)
        left -= len(chunk)
    os.ftruncate(fd, size)


class ExtractRefused(UnsafeTree):
    """An archive member sweep will not write (a link, a device, a name leaving the destination), or
    more bytes than the bound (`limit`: the session ends limit_workspace_bytes)."""

    def __init__(self, message: str, *, path: Path | None = None, limit: bool = False) -> None:
        super().__init__(message, path=path)
        self.limit = limit


def _member_parts(name: str) -> list[str] | None:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or any(p == ".." or "\0" in p for p in parts):
        return None
    return parts


def extract_tar(fileobj, dest: Path, *, only: list[str] | None = None, max_bytes: int | None = None) -> int:
    """Unpack a tar stream (any compression tarfile reads) member by member under `dest`, without
    tarfile's extraction code (its filters had CVE-2025-4517): regular files and directories only
    (a symlink, hard link, device or FIFO member is refused), every name opened relative to the
    destination's descriptor with O_NOFOLLOW, only members under the `only` prefixes written (the
    rest skipped unread), zeros kept as holes, and at most `max_bytes` of apparent size (over it,
    ExtractRefused(limit=True) before the member that crosses it is written). Returns the bytes
    written. Files 0600 (0700 if executable), directories 0700."""
    import tarfile
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    require_real_dir(dest)
    prefixes = [p.strip("/") for p in only] if only is not None else None
    total = 0
    dirs = DirFds(dest)
    try:
        with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
            for member in tar:
                parts = _member_parts(member.name)
                if parts is None:
                    raise ExtractRefused(f"archive member {member.name[:200]!r} leaves the destination", path=dest)
                rel = "/".join(parts)
                if not parts:
                    continue                      # "." itself
                if prefixes is not None and not any(rel == p or rel.startswith(p + "/") or p.startswith(rel + "/")
                                                    for p in prefixes):
                    continue
                if member.isdir():
                    dirs.at(parts)
                    continue
                if not member.isreg():
                    kind = ("a symlink" if member.issym() else "a hard link" if member.islnk()
                            else "a device or FIFO")
                    raise ExtractRefused(f"archive member {rel[:200]!r} is {kind}; sweep unpacks only files "
                                         "and directories", path=dest / rel)
                if prefixes is not None and not any(rel == p or rel.startswith(p + "/") for p in prefixes):
                    continue
                total += member.size
                if max_bytes is not None and total > max_bytes:
                    raise ExtractRefused(f"the archive holds more than {max_bytes} bytes ({rel[:200]!r} brings "
                                         f"it past the bound)", path=dest, limit=True)
                parent = dirs.at(parts[:-1])
                mode = 0o700 if member.mode & 0o111 else 0o600
                fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                             dir_fd=parent)
                try:
                    data = tar.extractfile(member)
                    if data is None:
                        raise ExtractRefused(f"archive member {rel[:200]!r} has no data", path=dest / rel)
                    write_stream(data, member.size, fd)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
    except tarfile.TarError as exc:
        raise ExtractRefused(f"the archive cannot be read: {exc}", path=dest) from None
    except OSError as exc:
        raise ExtractRefused(f"cannot write the archive under {dest.name}: {exc.strerror or exc}", path=dest) from None
    finally:
        dirs.close()
    return total
