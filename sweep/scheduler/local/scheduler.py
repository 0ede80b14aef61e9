"""LocalScheduler: controller jobs as detached processes on this machine (laptops, the demo).

The same interface as Slurm, so the tick runs its real code path here:
- `submit` claims a never-reused id, writes the job record, and starts the launcher
  (launch.py) in a new session with stdin /dev/null and stdout/stderr appended to the job's log
  files (0600). The launcher records its own pid + start time and execs the controller argv, so a
  submitter killed right after spawning still leaves a recognisable job. `submit` returns once
  the controller is running, or raises SchedulerError with the launcher's reason.
- `queue` is one scan of the records: a job is RUNNING only while its pid exists with the
  recorded start time (pids are reused); records of dead jobs are reaped on the way.
- `cancel` sends TERM to the job's process group, then KILL after a short grace.
- Slots bound what runs at once: one cpu slot per CPU job, N gpu slots per N-GPU job, with
  distinct device ids handed out in CUDA_VISIBLE_DEVICES. A submit that does not fit raises
  SchedulerError naming the lane and the slots.
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any
from pathlib import Path

from runstate.errors import SchedulerError
from sweep.scheduler.base import (LANE_CPU, LANE_GPU, EndStates, JobInfo, JobSpec, Preflight, QueueSnapshot,
                                  StopCause, check_name_prefix, validate_job, without_job_context)
from sweep.proc import boot_id, group_members, process_start_time, signal_group
from sweep.scheduler.local.records import FILE_MODE, JobRecord, StateDir, is_alive

PARTITIONS = {LANE_CPU: "local-cpu", LANE_GPU: "local-gpu"}
LAUNCH_GRACE = 30.0     # a record without a pid this old: its launcher never ran (submitter died first)
CANCEL_GRACE = 5.0      # TERM, then KILL after this long


def detect_gpu_count(timeout: float = 10.0) -> int:
    """GPUs `nvidia-smi -L` lists here; 0 without nvidia-smi or when it fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


class LocalScheduler:
    """The `local` backend. State lives in `state_dir` (e.g. `<campaign>/local-jobs/`, 0700)."""

    name = "local"
    uses_lanes = False
    jobs_get_tickers_environment = True

    def __init__(self, state_dir: Path, name_prefix: str, *, cpu_slots: int | None = None,
                 gpu_slots: int | None = None, call_timeout: float = 20.0,
                 cancel_grace: float = CANCEL_GRACE, env: Mapping[str, str] | None = None,
                 python: str | None = None):
        try:
            self.name_prefix = check_name_prefix(name_prefix)
        except ValueError as exc:
            raise SchedulerError(str(exc)) from None
        self.state = StateDir(Path(state_dir))
        self.state.create()
        self.cpu_slots = (os.cpu_count() or 1) if cpu_slots is None else cpu_slots
        self.gpu_slots = detect_gpu_count() if gpu_slots is None else gpu_slots
        self.call_timeout = call_timeout
        self.cancel_grace = cancel_grace
        self._env = dict(env) if env is not None else None
        self._python = python or sys.executable

    def capacity(self) -> dict[str, int | None]:
        return {LANE_CPU: self.cpu_slots, LANE_GPU: self.gpu_slots}

    # -- submit ---------------------------------------------------------------------------------
    def submit(self, job: JobSpec) -> str:
        try:
            validate_job(job, self.name_prefix)
        except ValueError as exc:
            raise SchedulerError(f"refusing to submit {job.name!r}: {exc}") from None
        if shutil.which(job.argv[0], path=self._base_env().get("PATH")) is None:
            raise SchedulerError(f"cannot start {job.name}: command {job.argv[0]!r} not found")
        if not Path(job.workdir).is_dir():
            raise SchedulerError(f"cannot start {job.name}: workdir {job.workdir} is not a directory")
        try:
            with self.state.locked(self.call_timeout):
                live = self._scan(reap=True)
                gpu_ids = self._reserve_slots(job, live)
                job_id = self.state.allocate_id()
                record = JobRecord(job_id=job_id, name=job.name, argv=list(job.argv),
                                   workdir=str(job.workdir), stdout=str(job.stdout),
                                   stderr=str(job.stderr), gpus=job.gpus, gpu_ids=gpu_ids,
                                   submitted_at=time.time(), submitter_pid=os.getpid())
                self.state.write(record)
        except TimeoutError as exc:
            raise SchedulerError(f"cannot submit {job.name}: {exc}") from None
        except OSError as exc:
            raise SchedulerError(f"cannot submit {job.name}: {exc}", path=exc.filename) from None
        try:
            message = self._launch(job, record)
        except BaseException:
            self._abandon(job_id)
            raise
        if message is None:
            if self._abandon(job_id):
                return job_id   # slow, but it recorded itself: it runs, and queue() will say so
            raise SchedulerError(f"local job {job_id} ({job.name}) did not start within "
                                 f"{self.call_timeout:g} s; it was withdrawn and will not start")
        if message:
            self.state.remove(job_id)   # the launcher said why and exited: nothing runs
            raise SchedulerError(message)
        return job_id

    def _abandon(self, job_id: str) -> bool:
        """Withdraw a launch that failed or did not answer. True if the job recorded its pid
        first (then the record stays: removing it would leave a running job nobody can see)."""
        try:
            with self.state.locked(self.call_timeout):
                record = self.state.read(job_id)
                if record is not None and record.pid is not None and is_alive(record):
                    return True
                self.state.remove(job_id)   # the launcher finds no record and refuses to exec
        except (OSError, TimeoutError, ValueError):
            pass   # the record ages out: without a pid it is reaped after LAUNCH_GRACE
        return False

    def _reserve_slots(self, job: JobSpec, live: list[JobRecord]) -> list[str]:
        """Check the job fits its lane; return the GPU device ids it gets (SchedulerError if not)."""
        if job.gpus == 0:
            used = sum(1 for r in live if r.lane == LANE_CPU)
            if used + 1 > self.cpu_slots:
                raise SchedulerError(f"lane cpu is full: {used} of {self.cpu_slots} cpu slots in use, "
                                     f"{job.name} needs 1", hint="raise [scheduler.local] cpu_slots")
            return []
        if job.gpus > self.gpu_slots:
            raise SchedulerError(f"{job.name} needs {job.gpus} GPU, lane gpu has {self.gpu_slots}",
                                 hint="set [scheduler.local] gpu_slots, or run it on a GPU machine")
        taken = {gid for r in live for gid in r.gpu_ids}
        devices = self._device_ids()
        free = [d for d in devices if d not in taken]
        if len(free) < job.gpus:
            raise SchedulerError(f"lane gpu is full: {len(devices) - len(free)} of {self.gpu_slots} "
                                 f"gpu slots in use, {job.name} needs {job.gpus}")
        return free[:job.gpus]

    # -- the backend's side: before a campaign exists, and inside a running job ------------------
    @classmethod
    def preflight(cls, settings: Any, needs_gpu_lane: bool, max_gpus: int) -> Preflight:
        """Nothing to ask: this machine's slots are counted by the tick (capacity())."""
        return Preflight([], "the local backend runs jobs on this machine; nothing to check")

    @classmethod
    def job_restart_count(cls, environ: Mapping[str, str], job_id: str) -> int:
        return 0        # a local job is never restarted: the tick submits a new one

    @classmethod
    def job_stop_cause(cls, job_id: str, restarts: int, environ: Mapping[str, str]) -> StopCause:
        return StopCause("cancelled", "SIGTERM from the local backend (a cancel)")

    def job_environment(self, job: JobSpec) -> dict[str, str]:
        """A local job is a process of this machine: it inherits the submitter's environment, bar
        the submitter's own scheduler job context (SLURM_JOB_ID, SLURM_RESTART_COUNT, ... of a
        tick run inside a Slurm job), with `job.env` over it; besides that, SWEEP_JOB_ID and, on
        the GPU lane, CUDA_VISIBLE_DEVICES."""
        return {**without_job_context(self._base_env()), **job.env}

    def _device_ids(self) -> list[str]:
        """Device ids for CUDA_VISIBLE_DEVICES: the caller's own restriction if it has one."""
        visible = self._base_env().get("CUDA_VISIBLE_DEVICES")
        if visible:
            ids = [d.strip() for d in visible.split(",") if d.strip()]
            return ids[:self.gpu_slots]
        return [str(i) for i in range(self.gpu_slots)]

    def _launch(self, job: JobSpec, record: JobRecord) -> str | None:
        """Start the launcher and wait for it: "" = running, text = why not, None = no answer."""
        env = {**self.job_environment(job), "SWEEP_JOB_ID": record.job_id}
        if record.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(record.gpu_ids)
        read_fd, write_fd = os.pipe()
        try:
            out = _open_log(Path(job.stdout))
            err = out if Path(job.stderr) == Path(job.stdout) else _open_log(Path(job.stderr))
            try:
                argv = [self._python, "-m", "sweep.scheduler.local.launch", str(self.state.root),
                        record.job_id, str(write_fd), "--", *job.argv]
                _spawn(argv, cwd=str(job.workdir), env=env, stdout=out, stderr=err, pass_fds=(write_fd,))
            finally:
                os.close(out)
                if err != out:
                    os.close(err)
            os.close(write_fd)
            write_fd = -1
            message = _read_until_eof(read_fd, self.call_timeout)
        except OSError as exc:
            raise SchedulerError(f"cannot start {job.name}: {exc}", path=exc.filename) from None
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
        return message

    # -- queue ----------------------------------------------------------------------------------
    def queue(self) -> QueueSnapshot:
        try:
            with self.state.locked(self.call_timeout):
                records = self._scan(reap=True)
        except (OSError, TimeoutError) as exc:
            return QueueSnapshot.unknown(f"cannot read local jobs in {self.state.root}: {exc}")
        return QueueSnapshot.of(_job_info(r) for r in records if r.name.startswith(self.name_prefix))

    def _scan(self, reap: bool) -> list[JobRecord]:
        """Records of jobs that run (or are being launched); dead ones are reaped. Call locked."""
        now = time.time()
        active = []
        for job_id in self.state.job_ids():
            try:
                record = self.state.read(job_id)
            except (ValueError, TypeError, OSError):
                continue   # written atomically, so never half-written; an alien file is skipped, kept
            if record is None:
                continue
            if record.pid is None:
                launching = not record.cancelled and now - record.submitted_at < LAUNCH_GRACE
                if launching:
                    active.append(record)
                elif reap:
                    self.state.record_end(job_id, "CANCELLED" if record.cancelled else "FAILED")
                    self.state.remove(job_id)
                continue
            if is_alive(record):
                active.append(record)
            elif reap:
                _reap_child(record.pid)
                self.state.record_end(job_id, _end_state(record))
                self.state.remove(job_id)
        return active

    # -- cancel ---------------------------------------------------------------------------------
    def cancel(self, job_ids: Iterable[str]) -> None:
        groups: list[int] = []
        try:
            with self.state.locked(self.call_timeout):
                for job_id in sorted(set(map(str, job_ids))):
                    if "/" in job_id or job_id.startswith("."):
                        raise SchedulerError(f"refusing to cancel: {job_id!r} is not a local job id")
                    try:
                        record = self.state.read(job_id)
                    except (ValueError, TypeError):
                        continue
                    if record is None:
                        continue                      # unknown or already reaped: nothing to do
                    if record.pid is None:            # not started yet: the launcher will refuse
                        record.cancelled = True
                        self.state.write(record)
                        continue
                    if _owns_group(record):
                        if not record.cancelled:   # so its end state reads CANCELLED, not FAILED
                            record.cancelled = True
                            self.state.write(record)
                        signal_group(record.pid, signal.SIGTERM)
                        groups.append(record.pid)
        except TimeoutError as exc:
            raise SchedulerError(f"cannot cancel: {exc}") from None
        self._wait_groups(groups, self.cancel_grace, kill_after=True)
        for pgid in groups:
            _reap_child(pgid)

    # -- end states ---------------------------------------------------------------------------
    def end_states(self, job_ids: Iterable[str]) -> EndStates:
        """How vanished local jobs ended, from the end each reap recorded (the claim file).

        CANCELLED: `cancel` stopped it; NODE_FAIL: the machine rebooted under it (its boot id
        changed), which is this backend's node failure; FAILED: it died on its own (a crash, the
        OOM killer, a kill -9). A job gone without a recorded end counts as FAILED: this backend is
        the only thing that runs its jobs, so nothing else can have ended it.
        """
        ids = sorted(set(map(str, job_ids)))
        if not ids:
            return EndStates()
        return EndStates(asked=True, known=True,
                         states={j: self.state.read_end(j) or "FAILED" for j in ids})

    def _wait_groups(self, groups: list[int], grace: float, kill_after: bool) -> None:
        deadline = time.monotonic() + grace
        pending = list(groups)
        while pending and time.monotonic() < deadline:
            pending = [g for g in pending if group_members(g)]
            if pending:
                time.sleep(0.05)
        if pending and kill_after:
            for pgid in pending:
                signal_group(pgid, signal.SIGKILL)
            self._wait_groups(pending, 5.0, kill_after=False)

    def _base_env(self) -> dict[str, str]:
        return dict(os.environ if self._env is None else self._env)


def _end_state(record: JobRecord) -> str:
    if record.cancelled:
        return "CANCELLED"
    if record.boot_id and boot_id() not in (None, record.boot_id):
        return "NODE_FAIL"
    return "FAILED"


def _job_info(record: JobRecord) -> JobInfo:
    launching = record.pid is None
    return JobInfo(job_id=record.job_id, name=record.name,
                   state="PENDING" if launching else "RUNNING",
                   reason="Launching" if launching else "None",
                   partition=PARTITIONS[record.lane],
                   gres=f"gpu:{record.gpus}" if record.gpus else "", gpus=record.gpus)


def _spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start the launcher detached: own session (own process group), stdin from /dev/null."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True,
                            close_fds=True, **kwargs)


def _open_log(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def _read_until_eof(fd: int, timeout: float) -> str | None:
    """Everything written to `fd` until EOF; None if EOF did not come within `timeout`."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        data = os.read(fd, 65536)
        if not data:
            return b"".join(chunks).decode(errors="replace").strip()
        chunks.append(data)


def _owns_group(record: JobRecord) -> bool:
    """The job's process group is still its own: the leader runs with the recorded start time,
    or the leader is gone but members remain (the kernel never hands out a pid that is still
    some group's id). A pid now held by another process means the group is not ours to kill."""
    if is_alive(record):
        return True
    if record.pid is None:
        return False
    started = process_start_time(record.pid)
    return started is None and bool(group_members(record.pid))


def _reap_child(pid: int) -> None:
    """If the job is our own child (a long-lived submitter such as the demo), collect its exit
    status so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
