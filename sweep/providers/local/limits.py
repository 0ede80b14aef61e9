"""Resource bounds for one sandboxed run: a cgroup where this process may make one, rlimits otherwise.

What enforces each bound of `Limits` (recorded per run in `ExecResult.limits_enforced`):
- memory: the cgroup's memory limit (v1 memory.limit_in_bytes, v2 memory.max) when a child cgroup
  can be made under ours; otherwise RLIMIT_AS (address space: coarser, and a runtime that
  reserves large virtual ranges may need a higher bound).
- processes: the cgroup's pids.max; otherwise RLIMIT_NPROC, but only for a non-root user: the
  kernel does not apply RLIMIT_NPROC to root, and it counts every process of the uid, so as root
  without a usable cgroup the bound is recorded as "none" (the pid namespace still ends them all
  with the run).
- file size: RLIMIT_FSIZE (a write past it fails with EFBIG, or SIGXFSZ kills the writer).
- workspace bytes: polled from outside every second by the provider (apparent size, so a sparse
  file counts at its full size); the run is stopped when it is exceeded.
The child joins the cgroup before it execs (`preexec`), so nothing it forks escapes the bound.
A crash leaves an empty `sweep-PID-N` cgroup behind at worst; the next run on the host removes it.

`SWEEP_LIMITS_FALLBACK=rlimit` in the controller's environment skips the cgroups and uses the
rlimit fallbacks (for tests of that path on a host whose cgroups are writable; a site has no reason
to set it). Without a cgroup's counters, a run that hit RLIMIT_AS or RLIMIT_NPROC is recognised from
its own error text (an allocation or fork refused), which the run controls: it can only claim to
have hit a bound, which fails it anyway.
"""
from __future__ import annotations

import itertools
import os
import resource
import signal
import time
from pathlib import Path

from sweep.providers.base import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
# How a refused allocation / fork reads in a program's stderr (Python, C/C++ runtimes, shells)
RLIMIT_AS_SIGNS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
RLIMIT_NPROC_SIGNS = ("Resource temporarily unavailable", "BlockingIOError", "fork: retry", "can't fork")
_counter = itertools.count(1)


def _own_cgroups() -> dict[str, str]:
    """controller -> our path in its hierarchy, from /proc/self/cgroup ("" key = cgroup v2)."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            out[controller] = parts[2]
    return out


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _reap_stale(parent: Path) -> None:
    """Remove the empty cgroups a killed controller left (`sweep-PID-N` whose PID is gone); a cgroup
    still holding a process cannot be removed, so nothing running is touched."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "sweep" or not parts[1].isdigit() or int(parts[1]) == os.getpid():
            continue
        if Path(f"/proc/{parts[1]}").exists():
            continue
        try:
            (parent / name).rmdir()
        except OSError:
            pass


class Bounds:
    """The bounds of one run: `prepare()` before the launch, `preexec()` in the child, `finish()`
    after, which also says which bound (if any) was hit."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.enforced: dict[str, str] = {}
        self._dirs: dict[str, Path] = {}      # "pids" / "memory" / "v2" -> cgroup directory
        self._procs_fds: list[int] = []

    # --- cgroups -------------------------------------------------------------------------------

    def _make(self, key: str, parent: Path) -> Path | None:
        if not parent.is_dir():
            return None
        _reap_stale(parent)
        path = parent / f"sweep-{os.getpid()}-{next(_counter)}"
        try:
            path.mkdir()
        except OSError:
            return None
        self._dirs[key] = path
        return path

    def prepare(self) -> None:
        lim = self.limits
        own = {} if os.environ.get("SWEEP_LIMITS_FALLBACK") == "rlimit" else _own_cgroups()
        if (CGROUP_ROOT / "cgroup.controllers").exists() and "" in own:       # cgroup v2
            group = self._make("v2", CGROUP_ROOT / own[""].lstrip("/"))
            if group is not None:
                if lim.processes is not None and _write(group / "pids.max", str(lim.processes)):
                    self.enforced["processes"] = "cgroup v2 pids.max"
                if lim.memory_bytes is not None and _write(group / "memory.max", str(lim.memory_bytes)):
                    _write(group / "memory.swap.max", "0")
                    self.enforced["memory"] = "cgroup v2 memory.max"
        else:                                                                  # cgroup v1
            if lim.processes is not None and "pids" in own:
                group = self._make("pids", CGROUP_ROOT / "pids" / own["pids"].lstrip("/"))
                if group is not None and _write(group / "pids.max", str(lim.processes)):
                    self.enforced["processes"] = "cgroup v1 pids.max"
            if lim.memory_bytes is not None and "memory" in own:
                group = self._make("memory", CGROUP_ROOT / "memory" / own["memory"].lstrip("/"))
                if group is not None and _write(group / "memory.limit_in_bytes", str(lim.memory_bytes)):
                    _write(group / "memory.memsw.limit_in_bytes", str(lim.memory_bytes))
                    self.enforced["memory"] = "cgroup v1 memory.limit_in_bytes"
        for key, group in self._dirs.items():
            try:
                self._procs_fds.append(os.open(group / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
            except OSError:
                self.enforced = {k: v for k, v in self.enforced.items()
                                 if not v.startswith("cgroup " + ("v2" if key == "v2" else "v1"))}
        if lim.memory_bytes is not None and "memory" not in self.enforced:
            self.enforced["memory"] = "RLIMIT_AS"
        if lim.processes is not None and "processes" not in self.enforced:
            self.enforced["processes"] = "RLIMIT_NPROC" if os.getuid() != 0 else "none (root without a cgroup)"
        if lim.file_bytes is not None:
            self.enforced["file_size"] = "RLIMIT_FSIZE"
        if lim.workspace_bytes is not None:
            self.enforced["workspace_bytes"] = "watched every second"

    @property
    def cgroup_dirs(self) -> list[Path]:
        """The cgroups made for this run alone (empty without them): the keeper ends whatever is
        left in them when the run ends or its controller dies (keeper.py)."""
        return list(self._dirs.values())

    def preexec(self) -> None:
        """In the child, before exec: only system calls, no allocation-heavy Python."""
        for fd in self._procs_fds:
            os.write(fd, b"0")
        lim = self.limits
        if lim.file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_bytes, lim.file_bytes))
        if self.enforced.get("memory") == "RLIMIT_AS" and lim.memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (lim.memory_bytes, lim.memory_bytes))
        if self.enforced.get("processes") == "RLIMIT_NPROC" and lim.processes is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (lim.processes, lim.processes))

    # --- after the run -------------------------------------------------------------------------

    def _read(self, key: str, name: str) -> str:
        group = self._dirs.get(key)
        if group is None:
            return ""
        try:
            return (group / name).read_text()
        except OSError:
            return ""

    def hit(self, stderr_tail: str = "") -> str | None:
        """The bound the run ran into, from the cgroup's own counters, or for an rlimit fallback
        from the run's error text (None if none did)."""
        if self.enforced.get("memory") == "RLIMIT_AS" and any(m in stderr_tail for m in RLIMIT_AS_SIGNS):
            return "memory"
        if self.enforced.get("processes") == "RLIMIT_NPROC" and any(m in stderr_tail for m in RLIMIT_NPROC_SIGNS):
            return "processes"
        v2 = "v2" in self._dirs
        events = self._read("v2", "memory.events") if v2 else self._read("memory", "memory.oom_control")
        for line in events.splitlines():
            name, _, count = line.partition(" ")
            if name == "oom_kill" and count.strip().isdigit() and int(count) > 0:
                return "memory"
        pids = self._read("v2" if v2 else "pids", "pids.events")
        for line in pids.splitlines():
            name, _, count = line.partition(" ")
            if name == "max" and count.strip().isdigit() and int(count) > 0:
                return "processes"
        return None

    def finish(self) -> None:
        """Kill what is left in the cgroups and remove them."""
        for fd in self._procs_fds:
            os.close(fd)
        self._procs_fds = []
        for group in self._dirs.values():
            for _ in range(50):
                try:
                    pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


def tree_bytes(paths) -> int:
    """Apparent size of every regular file under `paths` (links not followed)."""
    import stat

    from sweep.providers.audit import walk_tree
    total = 0
    for root in paths:
        for _, st in walk_tree(Path(root)):
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total
