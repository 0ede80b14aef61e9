"""The keeper: the process the local provider starts for every run, between the controller and what
runs (bwrap, or the program itself with isolation none). Standard library only; run as
`python -I -S keeper.py --parent PID [--cgroup DIR ...] -- PROGRAM ARGS...`.

Why it exists: when the controller dies (kill -9 of its job's process group, the OOM killer), what
it started must die too, at once, whatever it was doing. `bwrap --die-with-parent` alone does not
hold that: bwrap sets its parent-death signal only after it has cloned the sandbox, and the
sandbox's init sets its own only after the mounts are made. A controller killed in those first
tens of milliseconds (measured: 19 of 20 kills landing there) left a sandbox that ran its program
to the end, in a run directory the next controller was about to reuse; and the sandbox's init is a
session leader of its own, out of reach of any process-group kill.

What the keeper guarantees:
- It asks the kernel for SIGUSR2 when the controller's thread that started it dies
  (PR_SET_PDEATHSIG), then checks the controller is still its parent: a controller that died
  before that check is seen, never missed. No child exists before the check.
- It is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever its program leaves behind (bwrap's
  sandbox init when bwrap dies, a daemon that setsid()s and double-forks with isolation none) is
  reparented to it, not to the host's init.
- On SIGUSR2 (the controller died, or the provider asks for everything to end now) and when its
  program exits, it SIGKILLs every child it has, reaps it, and repeats until it has none. Killing
  the sandbox's init ends its whole pid namespace.
- Then, when the provider gave it the run's own cgroups (`--cgroup DIR`, made for this run alone
  by limits.py), it SIGKILLs every other process still in them until it is alone there: whatever
  the run started is in them, whoever its parent has become.
- SIGTERM (the walltime's first signal, sent to the whole group) is left to the program: the keeper
  keeps waiting for it.
- Its exit mirrors the program's: the same exit code, or death by the same signal.
"""
import ctypes
import os
import resource
# the C module: signal.py's enum import is ~4 ms of every run's start (the numbers are the same)
import _signal as signal
import sys
import time

PARENT_GONE = signal.SIGUSR2      # the parent-death signal, and the provider's "end everything now"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


class _EndNow(Exception):
    pass


def _end_now(signum, frame):
    raise _EndNow()


def _ignore(signum, frame):
    pass


def _children():
    """Live children of this process, from /proc (ppid field)."""
    me = str(os.getpid())
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read().decode(errors="replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == me and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def kill_all(program_pid, status):
    """SIGKILL and reap every child until none is left; returns the program's wait status if it
    was reaped here (else `status` unchanged)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {PARENT_GONE, signal.SIGTERM})
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            pid, st = os.wait()
        except ChildProcessError:
            return status
        if pid == program_pid and status is None:
            status = st


def kill_cgroups(cgroups):
    """SIGKILL every process but this one in the run's own cgroups until none is left (bounded:
    a process that cannot be killed is left to the provider's own sweep of them)."""
    me = os.getpid()
    for _ in range(200):
        others = set()
        for group in cgroups:
            try:
                with open(os.path.join(group, "cgroup.procs"), "rb") as fh:
                    others.update(int(p) for p in fh.read().split() if int(p) != me)
            except (OSError, ValueError):
                continue
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:    # what was reparented to this subreaper meanwhile
                pass
        except ChildProcessError:
            pass
        time.sleep(0.01)


def _die_like(status):
    """Exit as the program did."""
    if status is None:
        status = signal.SIGKILL   # ended by the controller's death or request: killed
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else signal.SIGKILL
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # never a core file of the keeper in the workspace
    except (ValueError, OSError):
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def main(argv):
    cgroups = []
    rest = argv[2:]
    while len(rest) >= 2 and rest[0] == "--cgroup":
        cgroups.append(rest[1])
        rest = rest[2:]
    if len(argv) < 4 or argv[0] != "--parent" or not argv[1].isdigit() or len(rest) < 2 or rest[0] != "--":
        sys.stderr.write("keeper: usage: --parent PID [--cgroup DIR ...] -- PROGRAM ARGS...\n")
        return 2
    parent, program = int(argv[1]), rest[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    # Until this handler is set, SIGUSR2 simply ends the keeper, which has no child yet.
    signal.signal(PARENT_GONE, _end_now)
    signal.signal(signal.SIGTERM, _ignore)
    child = None
    status = None
    try:
        if libc.prctl(PR_SET_PDEATHSIG, int(PARENT_GONE), 0, 0, 0) != 0:
            sys.stderr.write(f"keeper: cannot set the parent-death signal: errno {ctypes.get_errno()}\n")
            return 126
        if os.getppid() != parent:
            return 137        # the controller is already gone: start nothing
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            sys.stderr.write(f"keeper: cannot become a subreaper: errno {ctypes.get_errno()}\n")
            return 126
        # Python ignores SIGPIPE and SIGXFSZ for itself: the program gets the defaults back (a
        # writer past RLIMIT_FSIZE must see SIGXFSZ). Handlers set above reset at exec by themselves.
        child = os.posix_spawn(program[0], program, os.environ,
                               setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGUSR2, signal.SIGTERM))
        while status is None:
            pid, st = os.wait()
            if pid == child:
                status = st
    except _EndNow:
        pass
    except OSError as exc:
        if child is None:
            sys.stderr.write(f"keeper: cannot start {program[0]!r}: {exc.strerror or exc}\n")
            return 127
    status = kill_all(child, status)
    kill_cgroups(cgroups)
    _die_like(status)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
