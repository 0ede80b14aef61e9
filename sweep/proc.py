"""Process facts and process-group signalling: the one home for /proc parsing and killpg.

Stdlib only: the local backend's launcher imports it (through scheduler/local/records.py) in the
job's own process before it execs the controller, and that must cost milliseconds.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_LINUX = sys.platform.startswith("linux")


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (the command name may contain spaces and parens)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return data[data.rfind(b")") + 2:].decode(errors="replace").split()


def process_start_time(pid: int) -> str | None:
    """When `pid` started, as an opaque string; None if no such (live, non-zombie) process."""
    if pid <= 0:
        return None
    if _LINUX:
        rest = _proc_stat(pid)
        if not rest or rest[0] in ("Z", "X"):   # a zombie has finished; only its parent can reap it
            return None
        return rest[19]                          # field 22 (starttime): rest[0] is field 3
    try:   # macOS and other BSDs: no /proc
        out = subprocess.run(["ps", "-o", "stat=,lstart=", "-p", str(pid)], capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not out or out.startswith("Z"):
        return None
    return out.split(None, 1)[1] if " " in out else None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    if not _LINUX:
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            rest = _proc_stat(int(entry))
            if rest and rest[0] not in ("Z", "X") and rest[2] == str(pgid):   # field 5 = pgrp
                members.append(int(entry))
    return members


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to process group `pgid`; False if the group is already gone (or only zombies
    we may not signal are left). Never raises for a group that vanished meanwhile."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def child_group_leaders(parent: int) -> list[int]:
    """Processes that are children of `parent` and lead their own process group (not ours)."""
    own_group = os.getpgid(0)
    leaders = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        rest = _proc_stat(int(entry))
        # rest[1] = field 4 (ppid), rest[2] = field 5 (pgrp)
        if rest and rest[1] == str(parent) and rest[2] == entry and int(entry) != own_group:
            leaders.append(int(entry))
    return leaders


def stop_child_groups(grace_s: float) -> list[int]:
    """TERM, then KILL after `grace_s`, every process group led by a child of this process.

    Sessions and trials run as children that lead their own process group (the provider starts
    them in a new session), so a signal sent to the controller's group does not reach them. Only
    direct children are signalled, and their group ids cannot have been recycled: a child that
    exited stays a zombie until the provider's interrupted wait reaps it, which now never happens.
    Returns the groups signalled (empty where /proc is unavailable).
    """
    try:
        leaders = child_group_leaders(os.getpid())
    except OSError:
        return []
    for pgid in leaders:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_members(g) for g in leaders):
        time.sleep(0.05)
    for pgid in leaders:
        if group_members(pgid):
            signal_group(pgid, signal.SIGKILL)
    return leaders
