"""The local backend's launcher: the first thing a local job runs, in its own process.

    python -m sweep.scheduler.local.launch STATE_DIR JOB_ID READY_FD -- ARGV...

Why it exists: the job must be recognisable even if the submitting process dies right after
spawning it (a tick killed by its own time limit, a Ctrl-C). So the job does not rely on its
parent to record it. This launcher, already running as the job's process (own session, so its pid
is also its process-group id), writes its own pid, start time and boot id into the job record and
then execs the controller argv in place. exec keeps the pid and the start time, so the record
identifies the controller itself, and `cancel` can kill the whole process group.

Handshake with the submitter: READY_FD is the write end of a pipe. It is closed on exec, so the
submitter reads EOF once the controller is running; if anything fails first (record gone, job
cancelled before start, command not found) the launcher writes the reason there and exits 127.

A cancel that arrives before the launcher ran marks the record `cancelled`; the launcher checks
that under the state dir's lock and then never execs.
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from sweep.proc import boot_id, process_start_time
from sweep.scheduler.local.records import StateDir

LOCK_TIMEOUT = 30.0


def main(args: list[str]) -> int:
    if len(args) < 5 or args[3] != "--":
        print("usage: python -m sweep.scheduler.local.launch STATE_DIR JOB_ID READY_FD -- ARGV...",
              file=sys.stderr)
        return 2
    state, job_id, ready_fd, argv = StateDir(Path(args[0])), args[1], int(args[2]), args[4:]
    try:
        with state.locked(LOCK_TIMEOUT):
            record = state.read(job_id)
            if record is None:
                raise RuntimeError("its record is gone (reaped before the job could start)")
            if record.cancelled:
                raise RuntimeError("it was cancelled before it started")
            record.pid = os.getpid()
            record.start_time = process_start_time(record.pid)
            record.boot_id = boot_id()
            state.write(record)
        # Python ignores SIGPIPE and SIGXFSZ; ignored signals survive exec, the controller must not
        # inherit that.
        for sig in (signal.SIGPIPE, getattr(signal, "SIGXFSZ", None)):
            if sig is not None:
                signal.signal(sig, signal.SIG_DFL)
        os.set_inheritable(ready_fd, False)   # closed by exec: the submitter's EOF means "running"
        os.execvp(argv[0], argv)   # noqa: S606 - the job's own argv list, no shell
    except BaseException as exc:   # noqa: BLE001 - every failure must reach the submitter
        message = f"local job {job_id} did not start: {exc}"
        print(f"sweep: {message}", file=sys.stderr)
        try:
            os.write(ready_fd, message.encode(errors="replace"))
        except OSError:
            pass   # the submitter is gone; the record (or its absence) tells the next tick
        os._exit(127)
    return 0   # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
