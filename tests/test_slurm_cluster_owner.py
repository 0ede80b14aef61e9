"""The suite's Slurm clusters never outlive the pytest that started them (tests/slurm_cluster.py).

Each test runs a child pytest holding a real cluster with a job running on it, ends that child the
way a timeout or a developer does (SIGKILL, SIGTERM, SIGINT), and checks what is left: no daemon of
that cluster, no job process, and, once the next session has started, no directory.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import slurm_cluster as sc
from tests.campaigns import ctrl_c_default

pytestmark = pytest.mark.skipif(sc.missing_requirements() is not None and not sc.in_ci(),
                                reason=str(sc.missing_requirements()))

HOLDER = '''
import os, time
from pathlib import Path

def test_hold(slurm_cluster):
    job = slurm_cluster.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 600").stdout.strip()
    for _ in range(900):
        if slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING":
            break
        time.sleep(0.1)
    Path(os.environ["HOLD_FILE"]).write_text(str(slurm_cluster.dir))
    time.sleep(600)
'''

NOTHING = '''
def test_nothing():
    pass
'''


def _session_dir(tmp_path: Path, name: str, body: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    # the suite's conftest: its fixtures, and the session-start reaper
    (d / "conftest.py").write_text("from tests.conftest import *  # noqa\n"
                                   "from tests.conftest import pytest_sessionstart  # noqa\n")
    (d / "test_child.py").write_text(body)
    return d


def _child_env(hold_file: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(sc.REPO_ROOT), HOLD_FILE=str(hold_file))


def _start_holder(tmp_path: Path) -> tuple[subprocess.Popen, Path, dict]:
    """A child pytest holding a cluster with a running job; returns it, the cluster dir and its
    cluster.json."""
    d = _session_dir(tmp_path, "holder", HOLDER)
    hold = tmp_path / "hold"
    child = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "-p", "no:xdist", "--rootdir", str(d), str(d / "test_child.py")],
                             cwd=sc.REPO_ROOT, env=_child_env(hold), preexec_fn=ctrl_c_default,
                             stdout=open(tmp_path / "holder.out", "w"), stderr=subprocess.STDOUT)
    try:
        sc.wait_for(lambda: hold.exists() or child.poll() is not None, 120, "the child to hold a cluster")
    except TimeoutError:
        child.kill()
        raise
    assert child.poll() is None, (tmp_path / "holder.out").read_text()
    cdir = Path(hold.read_text())
    state = json.loads((cdir / "cluster.json").read_text())
    assert state["owner"]["pid"] == child.pid
    assert sc._is_process(state["owner"])
    return child, cdir, state


def _cluster_processes(cdir: Path, state: dict) -> list[int]:
    """Every process of the cluster still running: a recorded one (same pid, same start time),
    or one whose SLURM_CONF is the cluster's (slurmstepd, the job's sleep)."""
    recorded = [r["pid"] for r in state["processes"].values() if sc._is_process(r)]
    return sorted(set(recorded) | set(sc._conf_processes(cdir)))


def _next_session(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    d = _session_dir(tmp_path, "next", NOTHING)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--rootdir", str(d), str(d / "test_child.py")], cwd=sc.REPO_ROOT,
                          env=_child_env(tmp_path / "unused"), capture_output=True, text=True, timeout=120)


def _job_running(cdir: Path, state: dict) -> bool:
    return any(sc._proc_comm(p) == "sleep" for p in _cluster_processes(cdir, state))


def test_sigkilled_pytest_leaves_no_daemon_and_the_next_session_removes_its_directory(tmp_path):
    child, cdir, state = _start_holder(tmp_path)
    sc.wait_for(lambda: _job_running(cdir, state), 60, "the held cluster to run its job")
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    # the keepers' parent-death signal: daemons, slurmstepd and the job die with their owner
    sc.wait_for(lambda: not _cluster_processes(cdir, state), 15, "the cluster's processes to die")
    result = _next_session(tmp_path)    # (another session on this machine may have reaped it first)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not cdir.exists(), result.stderr


def test_reaper_stops_daemons_whose_keepers_died_with_their_owner(tmp_path):
    child, cdir, state = _start_holder(tmp_path)
    keepers = [r for k, r in state["processes"].items() if k.startswith("keeper:")]
    daemons = [r for k, r in state["processes"].items() if k.startswith("daemon:")]
    assert {k.split(":")[1] for k in state["processes"]} == {"munged", "slurmctld", "slurmd"}
    for r in keepers:       # no keeper left to kill them: only the reaper can
        os.kill(r["pid"], signal.SIGKILL)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    time.sleep(1)
    alive = [r for r in daemons if sc._is_process(r)]
    assert alive, "no orphaned daemon left for the reaper (did the keepers die first?)"
    result = _next_session(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not cdir.exists(), result.stderr
    assert not _cluster_processes(cdir, state)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_terminated_pytest_stops_its_cluster_at_once(tmp_path, signum):
    child, cdir, state = _start_holder(tmp_path)
    child.send_signal(signum)
    rc = child.wait(30)
    out = (tmp_path / "holder.out").read_text()
    assert rc != 0, out
    # gone when the process is, with no later session to reap it
    assert not _cluster_processes(cdir, state), out
    assert not cdir.exists(), out


def test_reaper_leaves_a_live_owner_and_a_reused_pid_alone(tmp_path):
    """A cluster whose owner runs is not touched; a dead owner's recorded pid now held by another
    process (another start time) is not killed, though the directory goes."""
    live = subprocess.Popen(["sleep", "300"])
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        live_dir = sc.new_cluster_dir("sweep-reaptest-live-")
        (live_dir / "cluster.json").write_text(json.dumps({
            "owner": sc._proc_record(live.pid), "pids": {}, "keepers": {}, "processes": {}}))
        dead_dir = sc.new_cluster_dir("sweep-reaptest-dead-")
        gone = subprocess.Popen(["true"])
        gone_record = sc._proc_record(gone.pid)
        gone.wait()
        reused = {"pid": bystander.pid, "start": sc._proc_start(bystander.pid) - 1}   # not that process
        (dead_dir / "cluster.json").write_text(json.dumps({
            "owner": gone_record, "pids": {"slurmctld": bystander.pid}, "keepers": {},
            "processes": {"daemon:slurmctld": reused}}))
        lines = sc.reap_stale_clusters()
        assert live_dir.exists()
        assert not dead_dir.exists()
        assert bystander.poll() is None, "a pid reused by another process is never killed"
        assert any(str(dead_dir) in line for line in lines) and not any(str(live_dir) in line for line in lines)
    finally:
        live.kill()
        bystander.kill()
        live.wait()
        bystander.wait()
        sc.remove_cluster_dir(live_dir)
