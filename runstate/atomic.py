"""Atomic file replacement, stdlib only (the local backend's launcher imports it before exec).

`write_atomic` replaces a file whole or not at all: a temp file with a unique name (host + pid +
random) in the same directory, fsynced before `os.replace`, and the directory fsynced after, so a
crash at any line leaves the old content or the new one, plus at most a stray `.NAME.tmp.*` file
that readers never look at. This is the one atomic writer of the project; runstate.files re-exports
it next to the model readers.
"""
from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
_HOST = socket.gethostname().split(".")[0] or "host"


def unique_suffix() -> str:
    """host.pid.random: unique across nodes sharing a filesystem and across forks."""
    return f"{_HOST}.{os.getpid()}.{secrets.token_hex(4)}"


def temp_name(path: Path, kind: str = "tmp") -> Path:
    return path.with_name(f".{path.name}.{kind}.{unique_suffix()}")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_atomic(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Replace `path` with `data` atomically (temp + fsync + rename + fsync dir)."""
    path = Path(path)
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


def remove_dead_temps(path: Path) -> list[str]:
    """Remove `path`'s stray temp files left by writers on this host that are no longer alive.

    A temp of a live process (an atomic write in flight) or of another host is left alone.
    Returns the names removed."""
    path = Path(path)
    removed = []
    for stray in path.parent.glob(f".{path.name}.tmp.{_HOST}.*"):
        pid = stray.name[len(f".{path.name}.tmp.{_HOST}."):].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        _unlink_quietly(stray)
        removed.append(stray.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_private_dir(path: Path) -> Path:
    """mkdir -p with 0700 on every directory we create (run directories hold transcripts)."""
    path = Path(path)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)
    return path


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
