"""Independent trials of one phase at once, with exactly the results of the serial order.

The gates phase runs its reference and empty trials (every repeat) as one batch, then the
`selected` pair; each trial has its own copy of the repository, its own work directory and its own
sandbox, so none depends on another. `run_in_order` runs such a batch with at most `width` at a
time and returns what the serial loop would have: the results in the jobs' order, or the exception
of the first job (in that order) that raised. Whoever reads the results (GateRuns, the evidence
file, the repeat comparison) sees them in the order it always did.

How many at once (`trial_width`), and why it falls back to one:
- at most one trial per CPU the controller job has (`os.sched_getaffinity`, which Slurm's
  cgroup/affinity plugins set for the job; 1 on a job with one CPU);
- at most as many as the job's memory holds at the trials' own bound (`limits.memory_mb` each,
  against the job's memory cgroup limit, the memory Slurm gave the job and the host's RAM): a test
  that may use its whole bound must not fail beside another where it passed alone;
- only the local provider under bubblewrap: each sandbox has its own pid, network and ipc
  namespaces and a private /tmp, so two trials cannot meet through a fixed port, a /tmp file or a
  signal. With `isolation = "none"` they could (a test binding port 8080 would fail beside
  another), and a remote provider's sandboxes are the provider's to count: both stay serial.

A stopped controller: the worker threads' processes are children of the controller (each under its
keeper, leading its own process group), so SIGTERM's `stop_child_groups` reaches them all, and a
SIGKILL reaches them through each keeper's parent-death signal (the worker thread that started it
dies with the process). The exception raised in the main thread stops the workers from starting
another job and, until they have all returned, stops again whatever they started meanwhile.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
STOP_GRACE_S = 1.0


def job_cpus() -> int:
    """The CPUs this process may run on (its affinity mask); 1 where the mask is unknown."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return 1


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None       # "max" (v2): no limit here


def job_memory_bytes() -> int | None:
    """The memory this job may use: the smallest of its memory cgroup's limits (on its path up, v1
    or v2), the memory Slurm gave the job (SLURM_MEM_PER_NODE, or SLURM_MEM_PER_CPU x its CPUs, in
    MB: Slurm may end a job over it without a cgroup) and the host's RAM; None when none is known."""
    from sweep.providers.local.limits import CGROUP_ROOT, _own_cgroups
    found: list[int] = []
    per_node, per_cpu = os.environ.get("SLURM_MEM_PER_NODE", ""), os.environ.get("SLURM_MEM_PER_CPU", "")
    if per_node.isdigit():
        found.append(int(per_node) << 20)
    elif per_cpu.isdigit():
        found.append((int(per_cpu) << 20) * job_cpus())
    own = _own_cgroups()
    for key, base, name in (("", CGROUP_ROOT, "memory.max"), ("memory", CGROUP_ROOT / "memory", "memory.limit_in_bytes")):
        if key not in own:
            continue
        group = base / own[key].lstrip("/")
        for d in (group, *group.parents):
            limit = _read_limit(d / name)
            if limit is not None:
                found.append(limit)
            if d == base:
                break
    try:
        found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    return min(found) if found else None


def trial_width(provider: object, memory_bytes: int | None, jobs: int) -> int:
    """How many of `jobs` independent trials on `provider` run at once (see the module's doc)."""
    from sweep.providers.local import LocalProvider
    if jobs <= 1 or not isinstance(provider, LocalProvider) or provider.isolation != "bwrap":
        return 1
    width = min(jobs, job_cpus())
    job_memory = job_memory_bytes()
    if job_memory is not None:
        width = min(width, job_memory // memory_bytes if memory_bytes else 1)
    return max(1, width)


def run_in_order(jobs: Sequence[Callable[[], T]], width: int, stop: Callable[[], object]) -> list[T]:
    """Each job's result, in the jobs' order, with at most `width` running at once (1: the plain
    loop, in this thread). A job that raised: the first such (in order) is raised once every job
    started has returned; no job is started after one raised. An exception in this thread while
    they run (a signal handler's): no job starts any more, `stop()` is called until every worker
    has returned (it ends the processes they started), and the exception goes on."""
    if width <= 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    results: list = [None] * len(jobs)
    raised: list[BaseException | None] = [None] * len(jobs)
    lock = threading.Lock()
    pending = iter(range(len(jobs)))
    halt = threading.Event()
    n_workers = min(width, len(jobs))
    left = [n_workers]
    all_done = threading.Event()

    def worker() -> None:
        try:
            while not halt.is_set():
                with lock:
                    i = next(pending, None)
                if i is None:
                    return
                try:
                    results[i] = jobs[i]()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, in order
                    raised[i] = exc
                    halt.set()
        finally:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    all_done.set()

    for n in range(n_workers):
        threading.Thread(target=worker, name=f"sweep-trial-{n}", daemon=True).start()
    # waited on with an Event, not Thread.join: a signal handler raising inside join() makes
    # Python 3.11 mark a thread that still runs as stopped (its tstate lock is released for it)
    try:
        while not all_done.wait(0.1):
            pass
    except BaseException:
        halt.set()
        while not all_done.is_set():
            try:
                stop()
            except Exception:  # noqa: BLE001, S110 - stopping goes on; the exception that matters is this thread's
                pass
            all_done.wait(0.05)
        raise
    for exc in raised:
        if exc is not None:
            raise exc
    return results
