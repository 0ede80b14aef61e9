"""Nothing a killed controller started outlives it: real bwrap sandboxes, real kill -9.

A "controller" here is a real Python process that runs one sandboxed program through
LocalProvider.run, as the controller does for a session or a trial. The test kills it (its whole
process group, as a dying node or a cancelled local job does; or only its own pid, as the OOM killer
does) at many moments of the sandbox's start, including the first milliseconds in which bwrap has
not yet armed its own --die-with-parent, and asserts that no process is left working in the run's
directory. Before the keeper, 19 of 20 such kills left the sandbox running its program to the end.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.fakes.runs import processes_under, wait_until

REPO = Path(__file__).resolve().parents[1]

CONTROLLER = r'''
import sys
from pathlib import Path
from sweep.providers.base import ExecSpec
from sweep.providers.local import LocalProvider
ws, isolation, program = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
LocalProvider(isolation=isolation).run(ExecSpec(argv=[sys.executable, "-c", program], cwd=ws, timeout_s=120,
                                                write_paths=(ws,)))
'''

# Sleeps long, and with isolation none also leaves a daemon that setsid()s and double-forks (out of
# every process group the controller knows of).
PROGRAM = r'''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(120)
    os._exit(0)
time.sleep(120)
'''


@pytest.fixture
def root():
    """Outside /tmp: a sandbox shows a private /tmp, and a campaign lives on a shared filesystem."""
    d = Path(tempfile.mkdtemp(prefix="sweep-test-keeper-", dir="/var/tmp"))
    yield d
    for pid in processes_under(d):            # only what this test started, by its working directory
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    subprocess.run(["rm", "-rf", str(d)], check=False)


def _sandbox_started(ws: Path) -> bool:
    """A process other than the keeper works in `ws`: bwrap (bwrap isolation) or the program."""
    for pid in processes_under(ws):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"keeper.py" not in cmdline:
            return True
    return False


def _kill_at(root: Path, i: int, isolation: str, delay_s: float, whole_group: bool) -> dict[int, str]:
    ws = root / f"run-{i}" / "work"
    ws.mkdir(parents=True)
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(ws), isolation, PROGRAM],
                                  cwd=REPO, start_new_session=True)
    try:
        wait_until("the run's first process in its directory", lambda: processes_under(ws), 30, poll=0.001)
        if delay_s >= 0:
            wait_until("bwrap (or the program) to start", lambda: _sandbox_started(ws), 30, poll=0.001)
            deadline = time.monotonic() + delay_s
            while time.monotonic() < deadline:    # a busy wait: a sleep would overshoot the small delays
                pass
    finally:
        if whole_group:
            os.killpg(controller.pid, signal.SIGKILL)
        else:
            controller.kill()
        controller.wait()
    try:
        wait_until("nothing of the run left", lambda: not processes_under(ws), 20)
    except AssertionError:
        return {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode(errors="replace")
                for pid in processes_under(ws)}
    return {}


@pytest.mark.parametrize("whole_group", [True, False], ids=["group", "pid"])
def test_a_controller_killed_at_any_moment_of_a_sandbox_start_takes_the_sandbox_with_it(root, whole_group):
    # -1: as soon as the keeper is up (before bwrap); then from bwrap's first instant to well after
    # the sandbox is running
    delays = [-1.0, 0.0, 0.0, 0.0, 0.002, 0.004, 0.008, 0.012, 0.02, 0.03, 0.05, 0.3]
    left = {d: _kill_at(root, i, "bwrap", d, whole_group) for i, d in enumerate(delays)}
    assert not any(left.values()), {d: v for d, v in left.items() if v}


def test_an_unsandboxed_run_and_the_daemon_it_left_die_with_the_controller(root):
    ws = root / "none"
    ws.mkdir()
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(ws), "none", PROGRAM],
                                  cwd=REPO, start_new_session=True)
    # the program and its setsid() daemon are both up: keeper, program, daemon
    wait_until("the program and its daemon", lambda: len(processes_under(ws)) >= 3, 30)
    os.killpg(controller.pid, signal.SIGKILL)
    controller.wait()
    wait_until("nothing of the run left", lambda: not processes_under(ws), 20)


def test_a_daemon_left_by_a_finished_unsandboxed_run_is_ended_with_it(root):
    from sweep.providers.base import ExecSpec, Limits
    from sweep.providers.local import LocalProvider
    ws = root / "done"
    ws.mkdir()
    # the program returns only once its daemon (setsid, double fork) is up and has said so
    daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        open('daemon-up', 'w').close()\n        time.sleep(120)\n    os._exit(0)\n"
              "while not os.path.exists('daemon-up'):\n    time.sleep(0.01)\nprint('done', flush=True)\n")
    out = LocalProvider(isolation="none").run(ExecSpec(argv=[sys.executable, "-c", daemon], cwd=ws, timeout_s=60,
                                                       write_paths=(ws,),
                                                       # no cgroup: the keeper alone must end the daemon
                                                       limits=Limits(memory_bytes=None, processes=None)))
    assert out.rc == 0 and "done" in out.stdout_tail, out
    assert (ws / "daemon-up").exists()
    wait_until("the daemon to be gone", lambda: not processes_under(ws), 10)


def test_a_killed_keeper_takes_the_sandbox_with_it_and_the_provider_returns(root):
    """The keeper sits in the run's cgroup, so the cgroup's OOM killer could pick it (or anyone
    could kill it): the sandbox under it must end with it (bwrap's parent-death signal is armed
    against the keeper), and the provider must return a result for the run, not wait for it."""
    import threading

    from sweep.providers.base import ExecSpec
    from sweep.providers.local import LocalProvider
    ws = root / "keeper-killed"
    ws.mkdir()
    results: list = []

    def run() -> None:
        results.append(LocalProvider(isolation="bwrap", kill_grace_s=1.0).run(ExecSpec(
            argv=[sys.executable, "-c", "import time\nopen('up', 'w').close()\ntime.sleep(120)"], cwd=ws,
            timeout_s=120, write_paths=(ws,))))
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    wait_until("the sandboxed program to be up", lambda: (ws / "up").exists(), 60)
    keepers = [pid for pid in processes_under(ws) if b"keeper.py" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(keepers) == 1, keepers
    os.kill(keepers[0], signal.SIGKILL)
    worker.join(60)
    assert not worker.is_alive(), "the provider is still waiting for a run whose keeper was killed"
    out = results[0]
    assert out.rc != 0, out                          # the run did not end as the program would have
    wait_until("nothing of the run left", lambda: not processes_under(ws), 20)


def test_the_keeper_ends_whatever_is_left_in_the_runs_cgroup_whoever_its_parent(root):
    """A process in the run's own cgroup that is not among the keeper's children (here: started by
    the test and moved into it, as a sandbox's init would be if it ever escaped the keeper's
    parentage) is killed when the run ends; the cgroup is the run's alone, so nothing else is."""
    from sweep.providers.base import Limits
    from sweep.providers.local.limits import Bounds
    bounds = Bounds(Limits(processes=64, memory_bytes=None))
    bounds.prepare()
    try:
        groups = bounds.cgroup_dirs
        if not groups:
            pytest.skip("no writable cgroup here: the keeper has no cgroup to sweep")
        stray = subprocess.Popen(["sleep", "120"], cwd=root)
        outside = subprocess.Popen(["sleep", "120"], cwd=root)          # not in the run's cgroup
        for group in groups:
            (group / "cgroup.procs").write_text(str(stray.pid))
        keeper = REPO / "sweep" / "providers" / "local" / "keeper.py"
        args = [a for g in groups for a in ("--cgroup", str(g))]
        done = subprocess.run([sys.executable, "-I", "-S", str(keeper), "--parent", str(os.getpid()), *args,
                               "--", "/bin/true"], timeout=60)
        assert done.returncode == 0
        assert stray.wait(10) == -signal.SIGKILL          # swept from the cgroup
        assert outside.poll() is None                      # what is not in the run's cgroup is untouched
        outside.kill()
        outside.wait()
    finally:
        bounds.finish()
