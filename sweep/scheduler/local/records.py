"""Job records of the local backend and the process facts they are checked against.

A local job is a detached process in its own session. Its record `<state>/jobs/<id>.json` holds
the pid, the process start time (field 22 of /proc/<pid>/stat, clock ticks since boot) and the
boot id. A job is alive only if all three still match: a pid alone is not an identity, because
the kernel reuses pids, and after a reboot start times restart from zero.

Stdlib only: the launcher imports this module in the job's own process before it execs the
controller, and that must cost milliseconds.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from runstate.atomic import write_atomic   # stdlib only, like this module
from sweep.proc import boot_id, process_start_time

FILE_MODE = 0o600
DIR_MODE = 0o700
ID_PREFIX = "local-"


@dataclass
class JobRecord:
    job_id: str
    name: str
    argv: list[str]
    workdir: str
    stdout: str
    stderr: str
    gpus: int = 0
    gpu_ids: list[str] = field(default_factory=list)   # device ids given in CUDA_VISIBLE_DEVICES
    submitted_at: float = 0.0
    submitter_pid: int | None = None
    pid: int | None = None              # written by the job itself (launcher), before exec
    start_time: str | None = None       # /proc/<pid>/stat field 22 (or `ps -o lstart` off Linux)
    boot_id: str | None = None
    cancelled: bool = False             # a cancel that arrived before the job had a pid

    @property
    def lane(self) -> str:
        return "gpu" if self.gpus > 0 else "cpu"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> JobRecord:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})   # unknown keys: newer code


class StateDir:
    """`<campaign>/local-jobs/`: `jobs/<id>.json` records, `ids/<id>` claims, one `lock`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.jobs = self.root / "jobs"
        self.ids = self.root / "ids"

    def create(self) -> None:
        for d in (self.root, self.jobs, self.ids):
            d.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
            os.chmod(d, DIR_MODE)

    def record_path(self, job_id: str) -> Path:
        return self.jobs / f"{job_id}.json"

    @contextmanager
    def locked(self, timeout: float) -> Iterator[None]:
        """Hold the state dir's lock (flock) for at most `timeout` seconds of waiting."""
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                        raise TimeoutError(f"{self.root / 'lock'} is held by another process") from exc
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)   # closing the fd releases the flock

    def allocate_id(self) -> str:
        """A job id never used before in this state dir (claimed with O_EXCL, claims are kept).

        Ids are never reused, even after a record is reaped: a stale lease naming an old id must
        never match a new job.
        """
        taken = [int(n[len(ID_PREFIX):]) for n in os.listdir(self.ids)
                 if n.startswith(ID_PREFIX) and n[len(ID_PREFIX):].isdigit()]
        number = max(taken, default=0) + 1
        while True:
            job_id = f"{ID_PREFIX}{number}"
            try:
                os.close(os.open(self.ids / job_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
                return job_id
            except FileExistsError:
                number += 1

    def write(self, record: JobRecord) -> None:
        write_atomic(self.record_path(record.job_id), record.to_json())

    def read(self, job_id: str) -> JobRecord | None:
        try:
            return JobRecord.from_json(self.record_path(job_id).read_bytes())
        except FileNotFoundError:
            return None

    def remove(self, job_id: str) -> None:
        try:
            os.unlink(self.record_path(job_id))
        except FileNotFoundError:
            pass

    def record_end(self, job_id: str, state: str) -> None:
        """Write how a job ended into its claim file (kept forever; empty until the job ends)."""
        try:
            write_atomic(self.ids / job_id, state.encode())
        except OSError:
            pass    # without it the job reads FAILED, the conservative answer

    def read_end(self, job_id: str) -> str | None:
        if "/" in job_id or job_id.startswith("."):
            return None
        try:
            text = (self.ids / job_id).read_text().strip()
        except OSError:
            return None
        return text or None

    def job_ids(self) -> list[str]:
        return sorted(p.name[:-len(".json")] for p in self.jobs.iterdir()
                      if p.name.endswith(".json") and not p.name.startswith("."))


# -- process facts ------------------------------------------------------------------------------
def is_alive(record: JobRecord) -> bool:
    """The recorded process still runs: same pid, same start time, same boot."""
    if record.pid is None or record.start_time is None:
        return False
    if record.boot_id and boot_id() not in (None, record.boot_id):
        return False
    return process_start_time(record.pid) == record.start_time
