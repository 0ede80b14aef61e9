"""Atomic writes and tolerant reads: the only two ways runstate touches a file.

Guarantees:
- `write_atomic` replaces a file whole or not at all. The temp file has a unique name
  (host + pid + random) in the same directory, is fsynced before `os.replace`, and the directory is
  fsynced after, so a crash at any line leaves either the old content or the new one, plus at most a
  stray `.NAME.tmp.*` file that readers never look at.
- `read_model` never raises for a bad file: missing, empty, truncated, non-object or invalid
  content comes back as a `Loaded` whose `problem` says what was wrong, so one corrupt file can never
  stop a tick.
- Readers open the file fresh every time (NFS close-to-open consistency); nothing is cached.
- Readers refuse what must never stall or exhaust a tick: a symlink (`O_NOFOLLOW`: a link to
  /dev/zero would be read forever), a FIFO or device (opened `O_NONBLOCK`, then refused by `fstat`:
  a FIFO with no writer would block the open or the read), anything that is not a regular file, and
  a file larger than a cap. Refusal raises `RefusedFile` (an OSError), which every reader already
  reports as "unreadable: ..." for that one file while the others proceed.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

# re-exported: runstate.files stays the one import for model I/O (explicit `as` for mypy's strict mode)
from runstate.atomic import DIR_MODE as DIR_MODE
from runstate.atomic import FILE_MODE as FILE_MODE
from runstate.atomic import _unlink_quietly as _unlink_quietly
from runstate.atomic import fsync_dir as fsync_dir
from runstate.atomic import make_private_dir as make_private_dir
from runstate.atomic import temp_name as temp_name
from runstate.atomic import unique_suffix as unique_suffix
from runstate.atomic import write_all as write_all
from runstate.atomic import write_atomic as write_atomic
from runstate.errors import describe_validation_error as describe_validation_error

M = TypeVar("M", bound=BaseModel)

# Caps on what one read may load. A run's state.json is 0.6-2 KB in practice and a lease about 300
# bytes; anything near the cap is broken or hostile, and reading it whole would cost the tick memory.
MAX_RECORD_BYTES = 4 << 20          # state.json, lease.json, spend.json and the campaign's markers
MAX_READ_BYTES = 256 << 20          # anything else read whole (PR evidence, events.jsonl)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def write_model_atomic(path: Path, model: BaseModel, mode: int = FILE_MODE) -> None:
    write_atomic(path, dump_model(model), mode)


def dump_model(model: BaseModel) -> bytes:
    return orjson.dumps(model.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n"


@dataclass(frozen=True)
class Loaded(Generic[M]):
    """The outcome of reading one file: a value, or the reason there is none."""

    path: str | Path
    value: M | None
    problem: str | None = None      # None when value is set
    missing: bool = False           # the file does not exist (often normal, e.g. no lease)
    raw: bytes | None = None        # the bytes read, for compare-and-swap on leases

    @property
    def ok(self) -> bool:
        return self.value is not None


class RefusedFile(OSError):
    """A file the read path will not read: a symlink, a FIFO, a device, a directory, or too large."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(errno.EINVAL, f"refused: {why}", os.fspath(path))


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], cap: int = MAX_RECORD_BYTES) -> tuple[int, os.stat_result] | None:
    """Open `path` for reading only if it is a regular file of at most `cap` bytes.

    Returns (fd, fstat) — the caller closes fd — or None if it does not exist. Raises RefusedFile
    for a symlink (O_NOFOLLOW: ELOOP), a FIFO, a device, a directory or a file over `cap`;
    O_NONBLOCK keeps the open of a FIFO without a writer from blocking before fstat can refuse it.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RefusedFile(path, "a symlink") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(path, _kind(st.st_mode))
        if st.st_size > cap:
            raise RefusedFile(path, f"{st.st_size} bytes, over the {cap}-byte cap")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_fd(fd: int, path: str | os.PathLike[str], cap: int) -> bytes:
    """Read an open regular file to its end, refusing it if it grows past `cap` meanwhile."""
    chunks = []
    total = 0
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        total += len(chunk)
        if total > cap:
            raise RefusedFile(path, f"grew over the {cap}-byte cap while being read")
        chunks.append(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def read_bytes(path: str | os.PathLike[str], cap: int = MAX_READ_BYTES) -> bytes | None:
    """The bytes of a regular file, or None if it does not exist; RefusedFile for anything else."""
    opened = open_regular(path, cap)
    if opened is None:
        return None
    fd, _ = opened
    try:
        return read_fd(fd, path, cap)
    finally:
        os.close(fd)


def parse_model(path: str | Path, raw: bytes, model: type[M]) -> Loaded[M]:
    if not raw.strip():
        return Loaded(path, None, "empty file", raw=raw)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Loaded(path, None, f"not valid JSON (truncated or garbage): {exc}", raw=raw)
    if not isinstance(data, dict):
        return Loaded(path, None, f"expected a JSON object, found {type(data).__name__}", raw=raw)
    try:
        return Loaded(path, model.model_validate(data), raw=raw)
    except ValidationError as exc:
        return Loaded(path, None, "invalid: " + describe_validation_error(exc), raw=raw)


def read_raw(path: str, cap: int = MAX_RECORD_BYTES) -> bytes | None:
    """The bytes of `path` (a plain string: no pathlib on hot paths), or None if it does not exist.

    Opened with os.open/os.read, fresh each time (NFS close-to-open consistency); a symlink, FIFO,
    device or oversized file raises RefusedFile (see `open_regular`).
    """
    return read_bytes(path, cap)


def parse_model_fast(path: str | Path, raw: bytes, model: type[M]) -> Loaded[M]:
    """parse_model, with pydantic's own JSON parser tried first (one pass, no dict of Python
    objects); only a file that fails goes through the slow path that explains what is wrong."""
    try:
        return Loaded(path, model.model_validate_json(raw), raw=raw)
    except ValidationError:
        return parse_model(path, raw, model)


def read_model(path: Path, model: type[M]) -> Loaded[M]:
    """Read and validate `path` as `model`; never raises for file content problems."""
    path = Path(path)
    try:
        raw = read_bytes(path, MAX_RECORD_BYTES)
    except OSError as exc:   # EACCES, EIO on a flaky mount, RefusedFile: report, don't crash the tick
        return Loaded(path, None, f"unreadable: {exc.strerror or exc}")
    if raw is None:
        return Loaded(path, None, "missing", missing=True)
    return parse_model(path, raw, model)


def append_line(path: Path, obj: object) -> None:
    """Append one JSON line with a single write(2) on an O_APPEND descriptor.

    A single write keeps concurrent appenders from interleaving inside a line; a crash leaves at
    worst a truncated last line, which readers skip.
    """
    line = orjson.dumps(obj) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """All well-formed JSON-object lines of a JSONL file, and how many lines were skipped (a file
    the read path refuses, e.g. a FIFO or a symlink, counts as one skipped line: nothing is read)."""
    try:
        raw = read_bytes(path)
    except RefusedFile:
        return [], 1
    if raw is None:
        return [], 0
    out, skipped = [], 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            skipped += 1
            continue
        if isinstance(obj, dict):
            out.append(obj)
        else:
            skipped += 1
    return out, skipped
