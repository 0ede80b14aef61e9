"""Leases: who may act on a run, without a lock server.

The lease is `lease.json` in the run directory. It is created only exclusively: `O_EXCL` when it is
acquired, `link(2)` (which also fails if the name exists) when its holder re-issues it for a
hand-over or a heartbeat. It is never edited in place and never replaced by rename, so a writer that
lost the lease can never overwrite a newer one.

Every change to an existing lease is a compare-and-swap built on rename, which is atomic:
1. `take`: rename lease.json to a unique tombstone (only one process can win that rename);
2. compare the tombstone's bytes with what the caller expected (its own token, or the exact bytes a
   reaper judged stale);
3. on a match, finish (delete it, or link a new version into place); otherwise put it back with
   `link(tombstone, lease.json)`, which cannot clobber a lease created meanwhile.
A reaper that judged an old lease stale therefore never destroys a fresh one: it either finds no
file, or finds different bytes and restores them.

Crash anywhere: a crash after `take` leaves no lease.json and a `.lease.json.tomb.*` file. Having no
lease is always safe (the tick decides from the record and the queue), and tombstones are ignored by
every reader. A crash inside `acquire` can leave an empty or torn lease.json; it is judged by its
mtime, so it is reaped after the TTL like any other lease whose holder is unknown.

In sweep only the tick (one at a time, under the tick lock) acquires and reaps; controllers
hand over, heartbeat and release their own lease.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from runstate.errors import LeaseError
from runstate.files import (FILE_MODE, MAX_RECORD_BYTES, Loaded, _unlink_quietly, dump_model, fsync_dir,
                            open_regular, parse_model, parse_model_fast, read_bytes, read_fd, temp_name,
                            write_all)
from runstate.models import Lease
from runstate.paths import LEASE_FILE

_HOST = socket.gethostname()


class LeaseLost(LeaseError):
    """The caller's lease is gone or belongs to someone else: stop acting on the run."""


@dataclass(frozen=True)
class LeaseView:
    """A lease as a judge saw it: parsed (or corrupt), with the exact bytes for compare-and-swap."""

    path: Path
    raw: bytes
    lease: Lease | None          # None: corrupt/torn; judged by mtime
    problem: str | None
    mtime: float

    @property
    def corrupt(self) -> bool:
        return self.lease is None


def lease_path(rdir: Path) -> Path:
    return Path(rdir) / LEASE_FILE


def read_lease(rdir: Path) -> LeaseView | None:
    """The current lease, or None when there is none. Never raises for bad content."""
    return read_lease_at(lease_path(rdir))


def read_lease_at(path: Path | str) -> LeaseView | None:
    """read_lease for hot loops (`path` may be a plain string: most runs have no lease, and a
    failed open is all that costs). A lease.json that is a symlink, FIFO, device or oversized, or
    cannot be read, comes back corrupt (judged by its own mtime), never as an exception or a hang."""
    try:
        opened = open_regular(path, MAX_RECORD_BYTES)
        if opened is None:
            return None
        fd, st = opened
        try:
            raw = read_fd(fd, path, MAX_RECORD_BYTES)
        finally:
            os.close(fd)
    except OSError as exc:
        return LeaseView(Path(path), b"", None, f"unreadable: {exc.strerror or exc}", _lstat_mtime(path))
    loaded: Loaded[Lease] = parse_model_fast(path, raw, Lease)
    return LeaseView(Path(path), raw, loaded.value, loaded.problem, st.st_mtime)


def _lstat_mtime(path: str | os.PathLike[str]) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return time.time()      # vanished meanwhile: judged young, looked at again next tick


def _read_tomb(tomb: Path) -> bytes:
    """A taken lease's bytes; b"" for one the read path refuses (it then compares like an empty,
    torn lease: both are garbage that only a TTL reap removes)."""
    try:
        return read_bytes(tomb, MAX_RECORD_BYTES) or b""
    except OSError:
        return b""


def acquire_lease(rdir: Path, *, run_id: str, token: str, holder: str = "tick",
                  job_id: str | None = None, now: float | None = None) -> Lease | None:
    """Create lease.json with O_EXCL. Returns the lease, or None if someone already holds one."""
    now = time.time() if now is None else now
    lease = Lease(run_id=run_id, token=token, holder=holder, job_id=job_id, acquired_at=now,  # type: ignore[arg-type]  # pydantic checks the Literal
                  heartbeat_at=now, host=_HOST, pid=os.getpid())
    path = lease_path(rdir)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return None
    try:
        write_all(fd, dump_model(lease))
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    return lease


def _take(rdir: Path) -> Path | None:
    """Rename lease.json to a unique tombstone. None if there was no lease to take."""
    path = lease_path(rdir)
    tomb = temp_name(path, "tomb")
    try:
        os.rename(path, tomb)
    except FileNotFoundError:
        return None
    return tomb


def _put_back(tomb: Path, rdir: Path) -> bool:
    """Restore a taken lease without clobbering one created meanwhile. True if restored."""
    try:
        os.link(tomb, lease_path(rdir))
        restored = True
    except FileExistsError:
        restored = False
    _unlink_quietly(tomb)
    fsync_dir(Path(rdir))
    return restored


def _take_own(rdir: Path, token: str, attempts: int = 8) -> tuple[Path, Lease]:
    """Take the lease if it carries `token`; raise LeaseLost otherwise.

    A missing lease is retried for up to about 2.5 s: another process may hold it in a tombstone
    for a moment before putting it back or re-issuing it (a reaper compares bytes; a tick handing
    it over writes and fsyncs the new version first). On a loaded machine that moment has lasted
    longer than 0.3 s, and a controller starting while its tick handed the lease over took the
    lease for gone and exited.
    """
    delay = 0.02
    for attempt in range(attempts):
        tomb = _take(rdir)
        if tomb is None:
            if attempt + 1 < attempts:
                time.sleep(delay)
                delay *= 2
                continue
            raise LeaseLost("no lease: it was released or reaped", path=lease_path(rdir))
        loaded = parse_model(tomb, _read_tomb(tomb), Lease)
        if loaded.value is not None and loaded.value.token == token:
            return tomb, loaded.value
        _put_back(tomb, rdir)
        holder = loaded.value.token if loaded.value else f"corrupt ({loaded.problem})"
        raise LeaseLost(f"lease belongs to another submission ({holder})", path=lease_path(rdir))
    raise AssertionError("unreachable")


def _reissue(rdir: Path, tomb: Path, lease: Lease) -> Lease:
    """Link a new version of our lease into place (exclusive), then drop the tombstone."""
    path = lease_path(rdir)
    tmp = temp_name(path, "new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        write_all(fd, dump_model(lease))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        _unlink_quietly(tmp)
        _unlink_quietly(tomb)
        raise LeaseLost("a new lease was created while ours was being re-issued", path=path) from None
    finally:
        _unlink_quietly(tmp)
    _unlink_quietly(tomb)
    fsync_dir(Path(rdir))
    return lease


def hand_over_lease(rdir: Path, *, token: str, job_id: str, now: float | None = None) -> Lease:
    """Give the lease to the job that was submitted with `token` (tick -> job, or the job itself)."""
    tomb, lease = _take_own(rdir, token)
    now = time.time() if now is None else now
    new = lease.model_copy(update={"holder": "job", "job_id": job_id, "heartbeat_at": now,
                                   "host": _HOST, "pid": os.getpid()})
    return _reissue(rdir, tomb, new)


def heartbeat_lease(rdir: Path, *, token: str, job_id: str | None = None,
                    now: float | None = None) -> Lease:
    """Refresh heartbeat_at. Raises LeaseLost if the lease is no longer ours."""
    tomb, lease = _take_own(rdir, token)
    if job_id is not None and lease.job_id not in (None, job_id):
        _put_back(tomb, rdir)
        raise LeaseLost(f"lease is held by job {lease.job_id}, not {job_id}", path=lease_path(rdir))
    now = time.time() if now is None else now
    return _reissue(rdir, tomb, lease.model_copy(update={"heartbeat_at": now}))


def release_lease(rdir: Path, *, token: str) -> bool:
    """Delete our lease. False (and nothing changed) if it is not ours or already gone."""
    try:
        tomb, _ = _take_own(rdir, token, attempts=3)
    except LeaseLost:
        return False
    _unlink_quietly(tomb)
    fsync_dir(Path(rdir))
    return True


@dataclass(frozen=True)
class LeaseVerdict:
    stale: bool
    why: str


def judge_lease(view: LeaseView, *, holder_alive: bool | None, now: float, ttl_s: float) -> LeaseVerdict:
    """The staleness rule.

    - holder known dead -> stale;
    - holder known alive -> never stale by age (a long phase is not a dead controller);
    - liveness unknown (the queue could not be read) -> stale only past the TTL, measured from the
      timestamp inside the lease, never from mtime: an outage must not look like a dead holder.
    A corrupt lease has no timestamp, so its mtime is the only evidence; it is judged by TTL alone.
    """
    if view.lease is None:
        age = now - view.mtime
        if age > ttl_s:
            return LeaseVerdict(True, f"corrupt lease ({view.problem}), unchanged for {age:.0f}s > TTL {ttl_s:.0f}s")
        return LeaseVerdict(False, f"corrupt lease ({view.problem}), only {age:.0f}s old")
    if holder_alive is True:
        return LeaseVerdict(False, "holder alive")
    if holder_alive is False:
        return LeaseVerdict(True, "holder is gone")
    age = now - view.lease.last_seen
    if age > ttl_s:
        return LeaseVerdict(True, f"holder liveness unknown, last seen {age:.0f}s ago > TTL {ttl_s:.0f}s")
    return LeaseVerdict(False, f"holder liveness unknown, last seen {age:.0f}s ago")


def reap_lease(rdir: Path, judged: LeaseView) -> bool:
    """Delete the lease iff it is byte-for-byte the one that was judged stale. True if reaped."""
    tomb = _take(rdir)
    if tomb is None:
        return False
    current = _read_tomb(tomb)
    if current == judged.raw:
        _unlink_quietly(tomb)
        fsync_dir(Path(rdir))
        return True
    _put_back(tomb, rdir)
    return False


STRAY_MIN_AGE_S = 10.0     # a lease operation takes milliseconds; a stray older than this is left by a kill


def lease_strays(rdir: Path) -> list[str]:
    """Names of `.lease.json.tomb.*` / `.lease.json.new.*` files in the run directory."""
    try:
        names = os.listdir(rdir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [n for n in names if n.startswith(f".{LEASE_FILE}.") and (".tomb." in n or ".new." in n)]


def tidy_lease_strays(rdir: Path, *, keep_lease: bool, now: float | None = None,
                      min_age_s: float = STRAY_MIN_AGE_S) -> tuple[str | None, bool]:
    """Repair what a lease operation killed between its rename and its link left behind.

    Returns (what was done or None, whether a young stray means an operation may be in flight).
    - lease.json exists: strays are leftovers of finished operations; removed.
    - no lease.json and the run may still need one (`keep_lease`): the newest `.new` (a re-issue
      that never got linked), else the newest `.tomb` (a taken lease) is linked back as lease.json,
      exclusively. Restoring is the safe direction: a restored lease is judged by the next tick
      like any other (its holder alive -> kept; gone -> reaped), whereas a lost lease could let
      the tick submit a second job for a run whose job is alive.
    - no lease.json and the run has ended: strays removed.
    """
    now = time.time() if now is None else now
    rdir = Path(rdir)
    found = []
    young = False
    for name in lease_strays(rdir):
        p = rdir / name
        try:
            mtime = p.stat().st_mtime
        except FileNotFoundError:
            continue
        loaded = parse_model(p, read_bytes(p) or b"", Lease)
        valid = loaded.value is not None and loaded.value.run_id == rdir.name
        if now - mtime < min_age_s:
            young = young or valid       # only a real lease of this run can be an operation in flight
            continue
        found.append((mtime, name, p, valid))
    if not found:
        return None, young
    did = []
    if keep_lease and not lease_path(rdir).exists() and not young:
        ordered = sorted((f for f in found if ".new." in f[1] and f[3]), reverse=True) + \
            sorted((f for f in found if ".tomb." in f[1] and f[3]), reverse=True)
        for _, name, p, _valid in ordered:
            try:
                os.link(p, lease_path(rdir))
                did.append(f"restored lease.json from {name}")
            except FileExistsError:
                pass
            except FileNotFoundError:
                continue
            break
    for _, _name, p, _valid in found:
        _unlink_quietly(p)
    did.append(f"removed {len(found)} stray lease file(s)")
    fsync_dir(rdir)
    return "; ".join(did), young
