"""Run one child process: own process group, closed stdin, redacted transcripts, a hard walltime.

What this guarantees, and what a crash leaves:
- The child is a new session and process-group leader (`start_new_session`), so one `killpg` reaches
  it and everything it forked that stayed in the group.
- On walltime the group gets SIGTERM, then (the local provider's keeper) the keeper's end signal,
  then SIGKILL after the grace period. The leader is left a
  zombie (waitid WNOWAIT) until the group has been killed, so its pid, and hence the group id we
  signal, cannot be recycled by an unrelated process in between.
- After the leader exits, normally or not, the group is SIGKILLed once more, so background
  processes it left behind do not outlive the session. A process that left the group on purpose
  (setsid, double fork) is reached through the local provider's keeper (keeper.py: a subreaper that
  kills every child it is left with) and the sandbox (bubblewrap runs the session in its own pid
  namespace, which the kernel empties when the sandbox ends).
- stdout/stderr are streamed through a redactor into 0600 files: a secret value never reaches disk,
  not even in a partial write that a crash could leave behind.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sweep.proc import signal_group
from sweep.redact import Redactor   # every spelling of a secret (base64, hex, split), see sweep/redact.py

TAIL_BYTES = 16 * 1024
POLL_S = 0.05


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Pump(threading.Thread):
    """Copies one pipe into a transcript file through the redactor and keeps a tail in memory."""

    def __init__(self, pipe, path: Path | None, redactor: Redactor, watch=None,
                 keep_bytes: int | None = None) -> None:
        super().__init__(daemon=True)
        self._pipe = pipe
        self._path = path
        self._redactor = redactor
        self._watch = watch
        # Transcript bound: the first half is written as it comes, the last half is held in memory
        # (a deque of chunks) and written at the end after a marker saying how much was cut.
        self._head_left = None if keep_bytes is None else keep_bytes // 2
        self._tail_keep = 0 if keep_bytes is None else keep_bytes - keep_bytes // 2
        self._held: deque[bytes] = deque()
        self._held_len = 0
        self.cut_bytes = 0
        self.tail = b""
        self.last_output = time.monotonic()
        self.stop_reason: str | None = None

    def _out(self, fd: int | None, data: bytes) -> None:
        if not data:
            return
        if fd is not None:
            head = data
            if self._head_left is not None:
                head = data[:self._head_left]
                self._head_left -= len(head)
                rest = data[len(head):]
                if rest:
                    self._held.append(rest)
                    self._held_len += len(rest)
                    while self._held and self._held_len - len(self._held[0]) >= self._tail_keep:
                        dropped = self._held.popleft()
                        self._held_len -= len(dropped)
                        self.cut_bytes += len(dropped)
            _write_all(fd, head)
        self.tail = (self.tail + data)[-TAIL_BYTES:]
        self.last_output = time.monotonic()
        if self._watch is not None and self.stop_reason is None:
            try:
                self.stop_reason = self._watch(data) or None
            except Exception as exc:   # a watcher bug must stop the session, not leave it unwatched
                self.stop_reason = f"watcher error: {type(exc).__name__}: {exc}"

    def run(self) -> None:
        fd = None
        if self._path is not None:
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            os.fchmod(fd, 0o600)
        try:
            while True:
                chunk = self._pipe.read1(65536) if hasattr(self._pipe, "read1") else self._pipe.read(65536)
                if not chunk:
                    break
                self._out(fd, self._redactor.feed(chunk))
            self._out(fd, self._redactor.flush())
        except (OSError, ValueError):
            pass   # the pipe was closed under us after a kill: what we have is the transcript
        finally:
            if fd is not None:
                self._write_held(fd)
                os.close(fd)

    def _write_held(self, fd: int) -> None:
        held = b"".join(self._held)
        extra = max(0, len(held) - self._tail_keep)
        self.cut_bytes += extra
        held = held[extra:]
        try:
            if self.cut_bytes:
                _write_all(fd, f"\n[sweep: {self.cut_bytes} bytes cut here; the transcript keeps the first "
                               f"and the last {self._tail_keep} bytes]\n".encode())
            _write_all(fd, held)
        except OSError:
            pass


@dataclass
class ProcessOutcome:
    rc: int | None
    timed_out: bool
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    pid: int | None
    pgid: int | None
    launch_error: str | None = None
    signal: int | None = None
    stopped: str | None = None      # "stalled" (no stdout for idle_timeout_s) or the watcher's reason


def _leader_exited(pid: int) -> bool:
    """True once the leader has exited; it stays a zombie (not reaped) so its pid is not reused."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid != 0


class _ExitWait:
    """Naps of at most POLL_S that end as soon as the leader exits: a pidfd of it (readable from its
    exit on, reaped or not) where the kernel has them, else plain sleeps. A fixed sleep cost every
    run up to 50 ms after its end (a run that took 5 ms took 55), twice per reference trial."""

    def __init__(self, pid: int) -> None:
        self.poller = select.poll()      # poll, not select: a descriptor number past 1023 is fine
        try:
            self.fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):      # no pidfd_open (Linux < 5.3, another OS)
            self.fd = None
        else:
            self.poller.register(self.fd, select.POLLIN)

    def nap(self, seconds: float | None = None) -> None:
        seconds = POLL_S if seconds is None else seconds
        if self.fd is None:
            time.sleep(seconds)
        else:
            self.poller.poll(seconds * 1000)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _stop(proc: subprocess.Popen, pgid: int, kill_grace_s: float, end_signal: int | None,
          waiter: _ExitWait) -> None:
    """TERM the group and wait out the grace; then, if the leader is the keeper, its end signal."""
    signal_group(pgid, signal.SIGTERM)
    grace_end = time.monotonic() + kill_grace_s
    while not _leader_exited(proc.pid) and time.monotonic() < grace_end:
        waiter.nap()
    if end_signal is not None and not _leader_exited(proc.pid):
        os.kill(proc.pid, end_signal)      # the leader is alive (not even a zombie): its pid is ours
        end_by = time.monotonic() + 5.0
        while not _leader_exited(proc.pid) and time.monotonic() < end_by:
            waiter.nap()


def _drain_pumps(proc: subprocess.Popen, pumps: list[_Pump]) -> None:
    for pump in pumps:
        pump.join(timeout=5.0)   # a process that escaped the group may hold the pipe open: do not hang
    for pump, stream in zip(pumps, (proc.stdout, proc.stderr), strict=True):
        if pump.is_alive():
            continue   # closing a reader another thread is blocked in would deadlock; it is a daemon
        if stream is None:
            continue
        try:
            stream.close()
        except OSError:
            pass


def run_process(argv: list[str], *, env: dict[str, str], cwd: Path, timeout_s: float,
                stdout_path: Path | None, stderr_path: Path | None, secrets: list[str],
                kill_grace_s: float, pass_fds: tuple[int, ...] = (), stdin_path: Path | None = None,
                idle_timeout_s: float | None = None, stdout_watch=None, keep_bytes: int | None = None,
                preexec_fn=None, poll=None, poll_every_s: float = 1.0,
                end_signal: int | None = None) -> ProcessOutcome:
    """`keep_bytes` bounds each transcript (head + tail, cut marked); `preexec_fn` runs in the child
    before exec (joining a cgroup, setting rlimits); `poll()` is called every `poll_every_s` while
    the child runs and a reason it returns stops the child (a bound was exceeded); `end_signal`,
    when the child is the keeper (keeper.py), is sent to it after the grace period so that it ends
    everything it holds, sessions that left the group included, before the group is SIGKILLed."""
    redactor = Redactor(secrets)
    started = time.monotonic()
    stdin: int | BinaryIO = subprocess.DEVNULL
    try:
        if stdin_path is not None:
            stdin = open(stdin_path, "rb")
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                                    pass_fds=pass_fds, preexec_fn=preexec_fn)
        finally:
            if not isinstance(stdin, int):
                stdin.close()
    except OSError as exc:
        for path in (stdout_path, stderr_path):
            if path is not None:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        return ProcessOutcome(rc=None, timed_out=False, duration_s=time.monotonic() - started,
                              stdout_tail="", stderr_tail="", pid=None, pgid=None,
                              launch_error=redactor.scrub_text(f"cannot start {argv[0]!r}: {exc.strerror or exc}"))
    pgid = proc.pid   # start_new_session: the child leads its own group
    pumps = [_Pump(proc.stdout, stdout_path, redactor, stdout_watch, keep_bytes),
             _Pump(proc.stderr, stderr_path, Redactor(secrets), keep_bytes=keep_bytes)]
    for pump in pumps:
        pump.start()

    deadline = started + timeout_s
    timed_out = False
    stopped = None
    next_poll = started + poll_every_s
    waiter = _ExitWait(proc.pid)
    try:
        while not _leader_exited(proc.pid):
            now = time.monotonic()
            if poll is not None and now >= next_poll:
                next_poll = now + poll_every_s
                stopped = poll() or None
            if stopped is not None:
                pass
            elif pumps[0].stop_reason is not None:
                stopped = pumps[0].stop_reason
            elif idle_timeout_s is not None and now - pumps[0].last_output >= idle_timeout_s:
                stopped = "stalled"
            if now >= deadline or stopped is not None:
                timed_out = stopped is None
                _stop(proc, pgid, kill_grace_s, end_signal, waiter)
                break
            waiter.nap(min(POLL_S, max(0.0, deadline - now)))
    finally:
        waiter.close()
    # Kill whatever is left in the group while the leader's zombie still pins the group id.
    signal_group(pgid, signal.SIGKILL)
    rc = proc.wait()
    _drain_pumps(proc, pumps)
    sig = -rc if rc is not None and rc < 0 else None
    return ProcessOutcome(rc=rc, timed_out=timed_out, duration_s=time.monotonic() - started,
                          stdout_tail=pumps[0].tail.decode(errors="replace"),
                          stderr_tail=pumps[1].tail.decode(errors="replace"),
                          pid=proc.pid, pgid=pgid, signal=sig, stopped=stopped)
