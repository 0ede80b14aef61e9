"""A real, throwaway single-node Slurm cluster for tests and for developers by hand.

Everything lives in one fresh directory under /tmp (config, state, spool, logs, munge socket and
key, fake GPU device files); nothing under /etc is read or written, and clients find the cluster
through `SLURM_CONF` only. The measured facts this relies on are in
the team's measured notes on a local Slurm; the short version:

- one node `sweepnode` claiming 16 CPUs on a small box (`SlurmdParameters=config_overrides`) and
  4 GPUs whose `File=` entries are symlinks to /dev/null (file-less GPUs are dropped by slurmd,
  regular files log errors);
- partitions `cpu` (default) and `gpu`; free ports per cluster, so two clusters can run side by side;
- `ScronParameters=enable` for scrontab, `MinJobAge=5` so finished jobs are purged quickly;
- munged needs o+x on its socket directory *and every ancestor*, so the directory comes from
  `tempfile.mkdtemp()` in /tmp and is chmod 755 (pytest's `tmp_path` sits under a 0700 dir).

By hand:

    python tests/slurm_cluster.py up [DIR]    # prints the `export SLURM_CONF=...` line
    python tests/slurm_cluster.py down DIR    # cancels jobs, stops the daemons by PID

In pytest: the session fixture `slurm_cluster` (re-exported by tests/conftest.py). Outside CI a
machine without root or the Slurm packages skips those tests with the reason; with `CI=true` it
fails them, so a broken CI image cannot turn the Slurm suite into a silent pass.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

try:  # the CLI half of this file must work without pytest installed
    import pytest
except ImportError:  # pragma: no cover
    pytest = None  # type: ignore[assignment]

REPO_ROOT = Path(__file__).resolve().parents[1]
NODE = "sweepnode"
NCPU = 16
NGPU = 4
DAEMONS = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scancel", "sinfo")
CLIENT_TIMEOUT = 20.0   # a client call blocks ~9 s when slurmctld is down; never wait forever

SLURM_CONF = """\
# throwaway test cluster written by tests/slurm_cluster.py
ClusterName=sweeptest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/jobcomp.txt
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
MinJobAge=5
KillWait=5
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=2
ScronParameters=enable
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={ncpu} RealMemory=16000 Gres=gpu:{ngpu} State=UNKNOWN
PartitionName=cpu Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={node} MaxTime=INFINITE State=UP
"""

# The preemption option (SlurmCluster(..., preempt=True)): partition-priority preemption, the only
# kind a cluster without slurmdbd can have (preempt/qos needs QOS records, which live in slurmdbd).
# `scavenger` jobs are requeued when an `urgent` job needs their CPUs, `scavenger-cancel` jobs are
# cancelled; `cpu`/`gpu` stay as in the default cluster. GraceTime=0: TERM, then KILL after KillWait.
PREEMPT_CONF = """\
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=scavenger Nodes={node} MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=scavenger-cancel Nodes={node} MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=urgent Nodes={node} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
"""


class ClusterError(RuntimeError):
    """The throwaway cluster could not be started (the message carries the daemon's log tail)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    """True while `pid` runs. A zombie counts as gone: PID 1 in some containers never reaps."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    """Poll `predicate` until it returns something truthy; TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def missing_requirements() -> str | None:
    """Why a cluster cannot run here, or None when it can."""
    if sys.platform != "linux":
        return "the throwaway Slurm cluster needs Linux"
    if os.geteuid() != 0:
        return "the throwaway Slurm cluster needs root (slurmd runs jobs as their user)"
    missing = [b for b in DAEMONS if shutil.which(b) is None
               and not Path("/usr/sbin", b).exists()]
    if missing:
        return ("real Slurm not available: missing " + ", ".join(missing)
                + " (apt-get install --no-install-recommends slurmctld slurmd slurm-client munge)")
    return None


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _clean_env() -> dict[str, str]:
    """The caller's environment minus anything that would point clients at another cluster.

    A developer may run the tests inside a real Slurm job: its SLURM_JOB_ID, SBATCH_* and
    SQUEUE_* variables would leak into every client call and change what they do.
    """
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SALLOC_", "SRUN_", "SCANCEL_"))}


class SlurmCluster:
    """One throwaway cluster in `directory`. Start with `start()`, always `stop()`."""

    def __init__(self, directory: Path, *, preempt: bool = False, jobcomp: bool = True):
        """`preempt`: add the PREEMPT_CONF partitions; `jobcomp=False`: no job completion log
        either, so not even `sacct -c` can say how a job ended (the default already has no
        accounting storage: plain `sacct` fails with "Slurm accounting storage is disabled")."""
        self.dir = Path(directory)
        self.preempt = preempt
        self.jobcomp = jobcomp
        self.conf = self.dir / "slurm.conf"
        self.log_dir = self.dir / "log"
        self.env = dict(_clean_env(), SLURM_CONF=str(self.conf))
        self.pids: dict[str, int] = {}
        self._children: dict[str, subprocess.Popen] = {}

    # -- client calls -------------------------------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = CLIENT_TIMEOUT,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client against this cluster (argv list, bounded, output captured)."""
        result = subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                                timeout=timeout, input=input)
        if check and result.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} failed (rc {result.returncode}): "
                               f"{result.stderr.strip() or result.stdout.strip()}")
        return result

    def squeue_names(self) -> list[str]:
        """Names of every job of this user (any campaign), straight from squeue."""
        out = self.run("squeue", "--me", "-h", "-o", "%j").stdout
        return [line for line in out.splitlines() if line]

    # -- lifecycle ----------------------------------------------------------------------------
    def write_config(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "log", "dev"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)   # munged refuses a socket dir without o+x
        for i in range(NGPU):
            dev = d / "dev" / f"nvidia{i}"
            if not dev.is_symlink():
                dev.symlink_to("/dev/null")   # a real device node; a file-less GPU is dropped
        conf = SLURM_CONF.format(d=d, node=NODE, ncpu=NCPU, ngpu=NGPU,
                                 ctld_port=_free_port(), slurmd_port=_free_port())
        if not self.jobcomp:
            conf = re.sub(r"^JobComp(Type|Loc)=.*\n", "", conf, flags=re.MULTILINE)
            conf += "JobCompType=jobcomp/none\n"
        if self.preempt:
            conf += PREEMPT_CONF.format(node=NODE)
        self.conf.write_text(conf)
        (d / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={NODE} Name=gpu File={d}/dev/nvidia[0-{NGPU - 1}]\n")

    def start(self, timeout: float = 30.0) -> None:
        reason = missing_requirements()
        if reason:
            raise ClusterError(reason)
        self._check_ancestors_traversable()
        self.write_config()
        d = self.dir
        if not (d / "munge.key").exists():
            subprocess.run([_which("mungekey"), "-c", "-k", str(d / "munge.key")], check=True,
                           capture_output=True, timeout=30)
        subprocess.run([_which("munged"), f"--key-file={d}/munge.key", f"--socket={d}/munge.sock",
                        f"--pid-file={d}/munged.pid", f"--log-file={d}/log/munged.log",
                        f"--seed-file={d}/munge.seed"],
                       check=True, capture_output=True, timeout=30)   # daemonizes itself
        self.pids["munged"] = int((d / "munged.pid").read_text().strip())
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-f", str(self.conf)])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", NODE])
        self._save_pids()
        self.wait_node_responding(timeout, want_idle=True)

    def stop(self) -> None:
        """Cancel every job, then stop the daemons by PID (never by name: other clusters may run)."""
        if _pid_alive(self.pids.get("slurmctld", -1)):
            try:
                self.run("scancel", "--me", check=False, timeout=10)
                # slurmstepd and job processes are re-parented to PID 1 and outlive slurmd
                wait_for(lambda: not self.run("squeue", "--me", "-h", "-o", "%i", check=False,
                                              timeout=10).stdout.strip(), 15, "jobs to end")
            except (TimeoutError, subprocess.TimeoutExpired):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.get(name)
            if pid:
                self._terminate(name, pid)
        # munged writes munge.seed as it exits: only now is the directory safe to remove.

    def stop_controller(self) -> None:
        """Stop slurmctld only (jobs and slurmd keep running): for the outage tests."""
        pid = self.pids.get("slurmctld")
        if pid:
            self._terminate("slurmctld", pid)

    def start_controller(self, timeout: float = 30.0, wait_for_node: bool = True) -> None:
        """Restart slurmctld without -c, so it recovers jobs from its state directory.

        The node reads `unknown` for ~4 s until slurmd re-registers; pass wait_for_node=False when
        answering clients is all that is needed (no new job has to start).
        """
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
        self._save_pids()
        if wait_for_node:
            self.wait_node_responding(timeout, want_idle=False)
        else:
            try:
                wait_for(lambda: self._check_daemons() or self._controller_listening(), timeout,
                         "slurmctld to listen")
            except TimeoutError as exc:
                raise ClusterError(f"{exc}\n{self.log_tail()}") from None

    def wait_node_responding(self, timeout: float, want_idle: bool) -> None:
        """Wait until sinfo answers and the node is usable; fail fast if a daemon died."""
        def ready() -> bool:
            self._check_daemons()
            if not self._controller_listening():
                return False   # a client would retry for ~9 s against a closed port
            try:   # a client call blocks ~9 s while slurmctld isn't listening yet
                r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=self.env,
                                   capture_output=True, text=True, timeout=3)
            except subprocess.TimeoutExpired:
                return False
            states = r.stdout.split()
            if r.returncode != 0 or not states:
                return False
            # after a restart the node may be mixed/allocated (jobs kept running): responding is enough
            ok = {"idle"} if want_idle else {"idle", "mixed", "allocated", "completing"}
            return states[0].rstrip("*~#$@+") in ok
        try:
            wait_for(ready, timeout, f"node {NODE} to respond")
        except TimeoutError as exc:
            raise ClusterError(f"{exc}; logs in {self.log_dir}\n{self.log_tail()}") from None

    # -- helpers ------------------------------------------------------------------------------
    def _controller_listening(self) -> bool:
        match = re.search(r"^SlurmctldPort=(\d+)", self.conf.read_text(), re.MULTILINE)
        if not match:
            return True
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", int(match.group(1)))) == 0

    def log_tail(self, lines: int = 15) -> str:
        chunks = []
        for path in sorted(self.log_dir.glob("*")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            chunks.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(chunks)

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.log_dir / f"{name}.out", "a") as out:
            proc = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self._children[name] = proc
        self.pids[name] = proc.pid

    def _check_daemons(self) -> None:
        for name, proc in self._children.items():
            if proc.poll() is not None and self.pids.get(name) == proc.pid:
                out = (self.log_dir / f"{name}.out").read_text(errors="replace")[-1500:]
                log = self.log_dir / f"{name}.log"
                tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
                raise ClusterError(f"{name} exited with rc {proc.returncode}:\n{out}\n{tail}")

    def _terminate(self, name: str, pid: int) -> None:
        proc = self._children.get(name)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            if proc is not None and proc.pid == pid:
                proc.wait(10)
            else:
                wait_for(lambda: not _pid_alive(pid), 10, f"{name} to stop")
        except (subprocess.TimeoutExpired, TimeoutError):
            # a slurmd that never registered ignores SIGTERM
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if proc is not None and proc.pid == pid:
                proc.wait(10)
            else:
                wait_for(lambda: not _pid_alive(pid), 10, f"{name} to die")

    def _save_pids(self) -> None:
        (self.dir / "cluster.json").write_text(json.dumps(self.pids))

    def _check_ancestors_traversable(self) -> None:
        for parent in [self.dir.resolve(), *self.dir.resolve().parents]:
            if parent.exists() and parent != self.dir.resolve() and not (parent.stat().st_mode & 0o001):
                raise ClusterError(f"munged needs o+x on every ancestor of {self.dir}; {parent} lacks it "
                                   "(use a directory under /tmp, not pytest's tmp_path)")

    @classmethod
    def attach(cls, directory: Path) -> SlurmCluster:
        """A handle on a cluster started earlier by `up` (for `down`)."""
        cluster = cls(directory)
        pid_file = cluster.dir / "cluster.json"
        if pid_file.exists():
            cluster.pids = {k: int(v) for k, v in json.loads(pid_file.read_text()).items()}
        return cluster


def new_cluster_dir(prefix: str = "sweep-slurm-") -> Path:
    """A fresh 0755 directory under /tmp (munged needs o+x on every ancestor)."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, 0o755)
    return d


def remove_cluster_dir(d: Path) -> None:
    if not os.environ.get("KEEP_SLURM_DIR"):
        shutil.rmtree(d, ignore_errors=True)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


# -- scrontab: not shipped by Debian bookworm's slurm-client; built from Debian's source -------
SCRONTAB_CACHE = REPO_ROOT / ".cache" / "slurm-bin" / "scrontab"
BUILD_SCRONTAB = REPO_ROOT / "tests" / "tools" / "build-scrontab.sh"


def find_or_build_scrontab(build_timeout: float = 600.0) -> Path:
    """Path of a scrontab client: the CI cache, PATH, or a fresh build into the cache."""
    if SCRONTAB_CACHE.exists():
        return SCRONTAB_CACHE
    on_path = shutil.which("scrontab")
    if on_path:
        return Path(on_path)
    result = subprocess.run(["bash", str(BUILD_SCRONTAB), str(SCRONTAB_CACHE.parent)],
                            capture_output=True, text=True, timeout=build_timeout)
    if result.returncode != 0 or not SCRONTAB_CACHE.exists():
        raise ClusterError(f"building scrontab failed (rc {result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()[-1500:]}")
    return SCRONTAB_CACHE


# -- pytest fixtures -----------------------------------------------------------------------------
if pytest is not None:

    def _unavailable(reason: str):
        """Skip on a developer machine; fail in CI, where the cluster is part of the contract."""
        if in_ci():
            pytest.fail(f"CI=true but the Slurm test cluster is unavailable: {reason}", pytrace=False)
        pytest.skip(reason)

    def start_throwaway_cluster(prefix: str = "sweep-slurm-", **options):
        """Start a cluster or skip/fail the requesting test; returns (cluster, directory).
        `options` go to SlurmCluster (preempt=True, jobcomp=False)."""
        reason = missing_requirements()
        if reason:
            _unavailable(reason)
        d = new_cluster_dir(prefix)
        cluster = SlurmCluster(d, **options)
        try:
            cluster.start()
        except (ClusterError, OSError, subprocess.SubprocessError) as exc:
            cluster.stop()
            remove_cluster_dir(d)
            _unavailable(f"the throwaway Slurm cluster did not start: {exc}")
        return cluster, d

    @pytest.fixture(scope="session")
    def slurm_cluster():
        """One real Slurm 22.05+ cluster shared by the whole session (give each test unique job names)."""
        cluster, d = start_throwaway_cluster()
        try:
            yield cluster
        finally:
            cluster.stop()
            remove_cluster_dir(d)

    @pytest.fixture(scope="module")
    def slurm_preempt_cluster():
        """A cluster of its own with partition-priority preemption (PREEMPT_CONF) and the job
        completion log (`sacct -c`), per test module: preemption tests take the whole node, and
        a failed-node test downs it, so they must not share a cluster with other tests."""
        cluster, d = start_throwaway_cluster("sweep-slurm-preempt-", preempt=True)
        try:
            yield cluster
        finally:
            cluster.stop()
            remove_cluster_dir(d)

    @pytest.fixture(scope="session")
    def scrontab_bin() -> Path:
        """A scrontab client for the installed Slurm (built from Debian's source if missing)."""
        try:
            return find_or_build_scrontab()
        except (ClusterError, OSError, subprocess.SubprocessError) as exc:
            _unavailable(f"no scrontab client: {exc}")


# -- CLI -------------------------------------------------------------------------------------------
def _cli(argv: list[str]) -> int:
    usage = "usage: python tests/slurm_cluster.py up [--preempt] [DIR] | down DIR"
    preempt = "--preempt" in argv       # the preemption partitions of PREEMPT_CONF
    argv = [a for a in argv if a != "--preempt"]
    if not argv or argv[0] not in ("up", "down") or (argv[0] == "down" and len(argv) != 2):
        print(usage, file=sys.stderr)
        return 2
    if argv[0] == "up":
        if len(argv) > 1:
            d = Path(argv[1]).resolve()
            d.mkdir(parents=True, exist_ok=True)
        else:
            d = new_cluster_dir()
        cluster = SlurmCluster(d, preempt=preempt)
        try:
            cluster.start()
        except (ClusterError, OSError, subprocess.SubprocessError) as exc:
            print(f"slurm_cluster: {exc}", file=sys.stderr)
            cluster.stop()
            return 1
        print(f"export SLURM_CONF={cluster.conf}")
        print(f"# stop with: python {Path(__file__).relative_to(REPO_ROOT)} down {d}", file=sys.stderr)
        return 0
    d = Path(argv[1]).resolve()
    if not (d / "cluster.json").exists():
        print(f"slurm_cluster: no cluster.json in {d}", file=sys.stderr)
        return 1
    SlurmCluster.attach(d).stop()
    print(f"stopped the cluster in {d}; remove it with: rm -rf {d}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
