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

Clusters never outlive the process that started them (their owner):
- `cluster.json` records the owner (pid and start time, and the `SWEEP_TEST_RUN` id when set) and
  every daemon and keeper (pid and start time), written before the first daemon starts;
- each daemon runs under sweep's keeper (sweep/providers/local/keeper.py): the kernel signals the
  keeper when the owner dies (SIGKILL included), and the keeper SIGKILLs the daemon and everything
  reparented to it (slurmstepd, job processes);
- SIGTERM and SIGINT stop the owner's clusters at once (then the signal does what it did before);
- `reap_stale_clusters()` (run at every pytest session start) stops every cluster whose owner is
  gone, by the recorded pids after checking each is still that process, and removes its directory;
- `python tests/slurm_cluster.py leftovers` prints every suite daemon still running (CI's last step).
A cluster started by hand (`up`) has no owner and is never reaped: `down` stops it.

In pytest: the session fixture `slurm_cluster` (re-exported by tests/conftest.py). Outside CI a
machine without root or the Slurm packages skips those tests with the reason; with `CI=true` it
fails them, so a broken CI image cannot turn the Slurm suite into a silent pass.
"""
from __future__ import annotations

import atexit
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
KEEPER = REPO_ROOT / "sweep" / "providers" / "local" / "keeper.py"
KEEPER_PARENT_GONE = signal.SIGUSR2   # the keeper's "kill everything now" (also its parent-death signal)
RUN_ID_VAR = "SWEEP_TEST_RUN"          # set by .ci/run: which run a cluster and its daemons belong to
CLUSTER_GLOB = "sweep-*/cluster.json"  # under /tmp: every cluster directory of the suite
SUITE_DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "munged", "slurmscriptd")

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
# `scavenger-grace` requeues with GraceTime=5. Measured here (22.05): the grace's first SIGTERM goes
# to the job's steps only, never to the batch script, so a controller (the batch script, no srun)
# hears nothing until the grace ends (at slurmctld's next limit check), then TERM and KILL after
# KillWait; with SlurmctldParameters=preempt_send_user_signal (a test sets it and reconfigures)
# the batch script gets the job's --signal at the preemption.
PREEMPT_CONF = """\
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=scavenger Nodes={node} MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=scavenger-cancel Nodes={node} MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=scavenger-grace Nodes={node} MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=5
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


def _proc_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), or None when it
    is gone or a zombie: with the pid, it names one process, never a later one given the same pid."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError, PermissionError):
        return None
    if not fields or fields[0] in ("Z", "X") or len(fields) < 20:
        return None
    return int(fields[19])


def _proc_record(pid: int) -> dict[str, int | None]:
    return {"pid": pid, "start": _proc_start(pid)}


def _is_process(record: object) -> bool:
    """True while the process of `record` ({"pid", "start"}) still runs: same pid, same start time."""
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        return False
    start = _proc_start(record["pid"])
    return start is not None and start == record.get("start")


def _proc_children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == str(pid) and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def _proc_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _proc_comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _proc_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


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

    def __init__(self, directory: Path, *, preempt: bool = False, jobcomp: bool = True,
                 owned: bool = True):
        """`preempt`: add the PREEMPT_CONF partitions; `jobcomp=False`: no job completion log
        either, so not even `sacct -c` can say how a job ended (the default already has no
        accounting storage: plain `sacct` fails with "Slurm accounting storage is disabled").
        `owned=False` (the `up` CLI): no owner, no keepers; the cluster lives until `down`."""
        self.dir = Path(directory)
        self.preempt = preempt
        self.jobcomp = jobcomp
        self.owned = owned
        self.conf = self.dir / "slurm.conf"
        self.log_dir = self.dir / "log"
        self.env = dict(_clean_env(), SLURM_CONF=str(self.conf))
        self.pids: dict[str, int] = {}          # daemon name -> the daemon's own pid
        self.keepers: dict[str, int] = {}       # daemon name -> pid of the keeper it runs under
        self._children: dict[str, subprocess.Popen] = {}
        self._records: dict[str, dict] = {}     # "daemon:NAME" / "keeper:NAME" -> {"pid", "start"}

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
        self._save_pids()     # the owner is on disk before any daemon exists
        if self.owned:
            _OWNED[id(self)] = self
            _install_stop_on_signal()
        self.write_config()
        d = self.dir
        if not (d / "munge.key").exists():
            subprocess.run([_which("mungekey"), "-c", "-k", str(d / "munge.key")], check=True,
                           capture_output=True, timeout=30)
        munged = [_which("munged"), f"--key-file={d}/munge.key", f"--socket={d}/munge.sock",
                  f"--pid-file={d}/munged.pid", f"--log-file={d}/log/munged.log",
                  f"--seed-file={d}/munge.seed"]
        if self.owned:
            self._spawn("munged", [*munged, "--foreground"])   # in the foreground, under a keeper
            wait_for(lambda: (d / "munge.sock").exists() or self._check_daemons(), 30,
                     "munged's socket")
        else:
            subprocess.run(munged, check=True, capture_output=True, timeout=30)   # daemonizes itself
            self.pids["munged"] = int((d / "munged.pid").read_text().strip())
            self._records["daemon:munged"] = _proc_record(self.pids["munged"])
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-f", str(self.conf)])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", NODE])
        self._save_pids()
        self.wait_node_responding(timeout, want_idle=True)

    def stop(self) -> None:
        """Cancel every job, then stop the daemons by PID (never by name: other clusters may run)."""
        _OWNED.pop(id(self), None)
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

    def kill_now(self, grace: float = 5.0) -> None:
        """Stop everything at once, no job cancelled (the owner is being killed): each keeper
        SIGKILLs its daemon and whatever was reparented to it; a daemon without a keeper is
        SIGKILLed by its pid, after checking it is still that process."""
        _OWNED.pop(id(self), None)
        for name, pid in self.keepers.items():
            if _is_process(self._records.get(f"keeper:{name}")):
                try:
                    os.kill(pid, KEEPER_PARENT_GONE)
                except ProcessLookupError:
                    pass
        for name, pid in self.pids.items():
            if _is_process(self._records.get(f"daemon:{name}")) and name not in self.keepers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self._children.values():
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()

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
        """Start a daemon in the foreground; an owned cluster's daemon runs under a keeper, which
        the kernel signals when this process dies (the keeper then SIGKILLs the daemon and every
        process reparented to it: slurmd's slurmstepd and the jobs under them)."""
        if self.owned:
            argv = [sys.executable, "-I", "-S", str(KEEPER), "--parent", str(os.getpid()), "--", *argv]
        with open(self.log_dir / f"{name}.out", "a") as out:
            proc = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self._children[name] = proc
        if not self.owned:
            self.pids[name] = proc.pid
            self._records[f"daemon:{name}"] = _proc_record(proc.pid)
            self._save_pids()
            return
        self.keepers[name] = proc.pid
        self._records[f"keeper:{name}"] = _proc_record(proc.pid)
        self._save_pids()
        children = wait_for(lambda: _proc_children(proc.pid) or self._check_daemons(), 10,
                            f"{name} to start under its keeper", interval=0.01)
        self.pids[name] = children[0]
        self._records[f"daemon:{name}"] = _proc_record(children[0])
        self._save_pids()

    def _check_daemons(self) -> None:
        for name, proc in self._children.items():
            if proc.poll() is not None and proc.pid in (self.pids.get(name), self.keepers.get(name)):
                out = (self.log_dir / f"{name}.out").read_text(errors="replace")[-1500:]
                log = self.log_dir / f"{name}.log"
                tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
                raise ClusterError(f"{name} exited with rc {proc.returncode}:\n{out}\n{tail}")

    def _terminate(self, name: str, pid: int) -> None:
        """SIGTERM the daemon, SIGKILL after 10 s; a keeper ends with its daemon (killing what
        was left under it), so waiting for the keeper is waiting for the daemon."""
        proc = self._children.get(name)
        keeper = self.keepers.get(name)
        own = proc is not None and proc.pid in (pid, keeper)
        if not _is_process(self._records.get(f"daemon:{name}", {"pid": pid, "start": _proc_start(pid)})):
            if own:
                assert proc is not None
                proc.wait(10)
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            if own:
                assert proc is not None
                proc.wait(10)
            else:
                wait_for(lambda: not _pid_alive(pid), 10, f"{name} to stop")
        except (subprocess.TimeoutExpired, TimeoutError):
            # a slurmd that never registered ignores SIGTERM
            try:
                os.kill(keeper if own and keeper else pid,
                        KEEPER_PARENT_GONE if own and keeper else signal.SIGKILL)
            except ProcessLookupError:
                pass
            if own:
                assert proc is not None
                proc.wait(10)
            else:
                wait_for(lambda: not _pid_alive(pid), 10, f"{name} to die")

    def _save_pids(self) -> None:
        """cluster.json: the owner and every process of the cluster (pid and start time), written
        whole through a temporary file, so a reaper never reads half of it."""
        owner = _proc_record(os.getpid()) if self.owned else None
        state = {"owner": owner, "run": os.environ.get(RUN_ID_VAR) if self.owned else None,
                 "pids": self.pids, "keepers": self.keepers, "processes": self._records}
        tmp = self.dir / "cluster.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.dir / "cluster.json")

    def _check_ancestors_traversable(self) -> None:
        for parent in [self.dir.resolve(), *self.dir.resolve().parents]:
            if parent.exists() and parent != self.dir.resolve() and not (parent.stat().st_mode & 0o001):
                raise ClusterError(f"munged needs o+x on every ancestor of {self.dir}; {parent} lacks it "
                                   "(use a directory under /tmp, not pytest's tmp_path)")

    @classmethod
    def attach(cls, directory: Path) -> SlurmCluster:
        """A handle on a cluster started earlier by `up` (for `down`)."""
        cluster = cls(directory, owned=False)
        state = _read_state(cluster.dir)
        if state is not None:
            cluster.pids = {k: int(v) for k, v in state.get("pids", {}).items()}
            cluster._records = dict(state.get("processes", {}))
        return cluster


# -- owners: a cluster never outlives the process that started it ---------------------------------
_OWNED: dict[int, SlurmCluster] = {}      # this process's running clusters
_SIGNALS_INSTALLED = False


def _read_state(d: Path) -> dict | None:
    """cluster.json of `d`, in either format (a flat {name: pid} before owners were recorded)."""
    try:
        raw = json.loads((d / "cluster.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    if "owner" not in raw:
        return {"owner": None, "legacy": True, "pids": raw, "keepers": {}, "processes": {}}
    return raw


def _stop_owned_now() -> None:
    for cluster in list(_OWNED.values()):
        try:
            cluster.kill_now()
        finally:
            remove_cluster_dir(cluster.dir)


def _install_stop_on_signal() -> None:
    """SIGTERM (a timeout's signal) and SIGINT stop this process's clusters at once, then do what
    they did before (pytest's KeyboardInterrupt, a script's own handler, or the default death)."""
    global _SIGNALS_INSTALLED
    if _SIGNALS_INSTALLED:
        return
    import threading
    if threading.current_thread() is not threading.main_thread():
        return    # signal handlers can only be set from the main thread; the keepers still hold
    _SIGNALS_INSTALLED = True
    atexit.register(_stop_owned_now)
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)
        if previous == signal.SIG_IGN:
            continue    # a process that ignores the signal keeps running, and so do its clusters

        def handler(num, frame, previous=previous):
            _stop_owned_now()
            if callable(previous):
                previous(num, frame)
                return
            signal.signal(num, signal.SIG_DFL)
            os.kill(os.getpid(), num)
        signal.signal(signum, handler)


def _conf_processes(d: Path) -> list[int]:
    """Processes started for the cluster in `d` that no recorded pid names: slurmstepd and job
    processes carry its SLURM_CONF in their environment."""
    conf = str(d / "slurm.conf")
    me = os.getpid()
    return [pid for pid in _all_pids()
            if pid != me and _proc_environ(pid).get("SLURM_CONF") == conf]


def reap_stale_clusters(root: Path = Path("/tmp")) -> list[str]:
    """Stop every cluster under `root` whose owner is gone and remove its directory; one line per
    cluster reaped. A recorded pid is killed only while it is still that process (same start
    time); a cluster whose owner lives, or that has no owner (started by hand, or by a checkout
    from before owners were recorded), is left alone."""
    reaped = []
    for state_file in sorted(root.glob(CLUSTER_GLOB)):
        d = state_file.parent
        state = _read_state(d)
        if state is None or not state.get("owner") or _is_process(state["owner"]):
            continue
        keepers = [r for k, r in state.get("processes", {}).items() if k.startswith("keeper:")]
        daemons = [r for k, r in state.get("processes", {}).items() if k.startswith("daemon:")]
        killed = []
        for record, sig in [*((r, KEEPER_PARENT_GONE) for r in keepers),
                            *((r, signal.SIGKILL) for r in daemons)]:
            if _is_process(record):
                try:
                    os.kill(record["pid"], sig)
                    killed.append(record["pid"])
                except ProcessLookupError:
                    pass
        try:
            wait_for(lambda procs=keepers + daemons: not any(_is_process(r) for r in procs), 10,
                     f"the daemons of {d} to die")
        except TimeoutError:
            pass
        for pid in _conf_processes(d):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        shutil.rmtree(d, ignore_errors=True)
        owner = state["owner"]
        reaped.append(f"reaped the test cluster in {d} (owner pid {owner.get('pid')} gone; "
                      f"killed {len(killed)} process(es){': ' if killed else ''}"
                      f"{' '.join(map(str, killed))})")
    return reaped


def suite_leftovers(run_id: str | None = None) -> list[str]:
    """One line per Slurm or munge daemon of the suite still running: a process named like one
    whose environment carries SWEEP_TEST_RUN=`run_id`, or without a run id, whose command line or
    SLURM_CONF points into a /tmp/sweep-* cluster directory (any run's, other sessions' too)."""
    lines = []
    me = os.getpid()
    for pid in _all_pids():
        if pid == me or _proc_start(pid) is None:
            continue
        comm = _proc_comm(pid)
        if not comm.startswith(SUITE_DAEMONS):
            continue
        env = _proc_environ(pid)
        cmd = _proc_cmdline(pid)
        where = env.get("SLURM_CONF", "")
        if run_id is not None:
            if env.get(RUN_ID_VAR) != run_id:
                continue
        elif not (where.startswith("/tmp/sweep-") or " /tmp/sweep-" in cmd or "=/tmp/sweep-" in cmd):
            continue
        lines.append(f"pid {pid} {comm}: {cmd[:200]}")
    return lines


def new_cluster_dir(prefix: str = "sweep-slurm-") -> Path:
    """A fresh 0755 directory under /tmp (munged needs o+x on every ancestor), owned by this
    process from the start: a reaper removes it if this process dies before the cluster starts."""
    assert prefix.startswith("sweep-"), "the reaper and the leftovers check look at /tmp/sweep-*"
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, 0o755)
    (d / "cluster.json").write_text(json.dumps({"owner": _proc_record(os.getpid()),
                                                "run": os.environ.get(RUN_ID_VAR),
                                                "pids": {}, "keepers": {}, "processes": {}}))
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
def _leftovers_cli(argv: list[str]) -> int:
    """`leftovers [--run ID] [--wait S] [--fail]`: print every suite daemon still running (of
    the run ID only, when given), after waiting up to S seconds for keepers still finishing;
    with --fail, exit 1 when there is one."""
    run_id = argv[argv.index("--run") + 1] if "--run" in argv else None
    wait = float(argv[argv.index("--wait") + 1]) if "--wait" in argv else 0.0
    deadline = time.monotonic() + wait
    while True:
        left = suite_leftovers(run_id)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    scope = f"of run {run_id}" if run_id else "of any run"
    dirs = [str(f.parent) for f in Path("/tmp").glob(CLUSTER_GLOB)
            if run_id is None or (_read_state(f.parent) or {}).get("run") == run_id]
    print(f"test-cluster daemons {scope} still running: {len(left)}")
    for line in left:
        print(f"  {line}")
    if dirs:
        print(f"test-cluster directories {scope} still present: {len(dirs)}")
        for d in dirs:
            print(f"  {d}")
    return 1 if left and "--fail" in argv else 0


def _cli(argv: list[str]) -> int:
    usage = ("usage: python tests/slurm_cluster.py up [--preempt] [DIR] | down DIR | reap"
             " | leftovers [--run ID] [--wait S] [--fail]")
    if argv[:1] == ["leftovers"]:
        return _leftovers_cli(argv[1:])
    if argv[:1] == ["reap"]:
        for line in reap_stale_clusters():
            print(line)
        return 0
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
        cluster = SlurmCluster(d, preempt=preempt, owned=False)   # lives until `down`
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
