"""SlurmScheduler: sbatch --parsable to submit, ONE squeue per queue(), scancel to cancel.

What a call costs the site: `queue()` is one squeue for this user's jobs (filtered to the
campaign by job-name prefix here, not by Slurm); `submit` is one sbatch; `cancel` one scancel for
all ids. Nothing else is called. Everything reaches Slurm as an argv list; the only text a shell
ever reads is the job script, whose variable parts are validated and quoted (see script.py).

The job's environment is exactly `job_environment(job)`: sbatch runs with that environment (plus
SLURM_CONF, which the client itself needs) and `--export=ALL`, so the job gets precisely what
sbatch had and nothing from a login shell. `--export=NONE` or a list of names would not do:
Slurm then also passes every SLURM_* variable of the submitter (a scrontab tick's
SLURM_RESTART_COUNT reached every controller) and loads the user's login environment on the node.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import os
import pwd
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from runstate.errors import SchedulerError, SubmissionUncertain
from sweep.models.lanes import LanesSettings
from sweep.scheduler.base import (NOT_JOB_CONTEXT, JobSpec, QueueSnapshot, check_name_prefix,
                                  passed_environment, validate_job)
from sweep.scheduler.slurm.client import (SQUEUE_ENV_PREFIX, SlurmCallFailed, client_env,
                                          run_client)
from sweep.scheduler.slurm.script import render_controller_script, write_private
from sweep.scheduler.slurm.squeue import SqueueParseError, parse_squeue, squeue_argv

LOG_MODE = 0o600
_JOB_ID_RE = re.compile(r"\d+(?:_\d+)?")
# sbatch expands %j, %x, ... in -o/-e paths and a backslash disables that; either would send the
# controller's logs somewhere other than the run directory.
_UNSAFE_PATH_CHARS = ("%", "\\", "\n", "\r", "\0")

if TYPE_CHECKING:
    from sweep.models.lanes import SchedulerSettings
    from sweep.scheduler.base import EndStates, Preflight, StopCause


class SlurmScheduler:
    """The `slurm` backend. One instance per tick; it keeps no state between calls."""

    name = "slurm"
    uses_lanes = True
    jobs_get_tickers_environment = False

    def __init__(self, name_prefix: str, lanes: LanesSettings | None = None, *,
                 call_timeout: float = 20.0, squeue_user: str = "me", signal: str = "B:USR1@120",
                 env: Mapping[str, str] | None = None, accounting: str = "sacct"):
        try:
            self.name_prefix = check_name_prefix(name_prefix)
        except ValueError as exc:
            raise SchedulerError(str(exc)) from None
        if squeue_user not in ("me", "user"):
            raise SchedulerError(f"squeue_user must be 'me' or 'user', not {squeue_user!r}")
        self.lanes = lanes or LanesSettings()
        self.call_timeout = call_timeout
        self.squeue_user = squeue_user
        self.signal = signal
        self._env = dict(env) if env is not None else None   # None: os.environ at call time
        self.accounting = accounting       # "sacct" | "jobcomp" | "none": see accounting.py

    # -- submit ---------------------------------------------------------------------------------
    def sbatch_options(self, job: JobSpec) -> list[str]:
        """The sbatch options for `job`: sweep's own, then its lane's (argv items, no shell)."""
        _, lane = self.lanes.for_gpus(job.gpus)
        return [
            "--parsable",
            f"--job-name={job.name}",
            f"--chdir={job.workdir}",
            f"--output={job.stdout}",
            f"--error={job.stderr}",
            "--open-mode=append",     # every attempt's log kept in one file
            "--export=ALL",           # exactly sbatch's own environment, which submit() builds
            f"--signal={lane.job_signal(self.signal)}",   # the time-limit warning (SIGUSR1)
            lane.requeue_option(),    # --no-requeue unless the lane lets Slurm requeue (docs/slurm.md)
            *lane.sbatch_options(job.gpus),
        ]

    def submit(self, job: JobSpec) -> str:
        try:
            validate_job(job, self.name_prefix)
            for label, path in (("workdir", job.workdir), ("stdout", job.stdout), ("stderr", job.stderr)):
                _check_path(label, path)
            if not Path(job.workdir).is_dir():
                raise ValueError(f"workdir {job.workdir} is not a directory")
        except ValueError as exc:
            raise SchedulerError(f"refusing to submit {job.name!r}: {exc}") from None
        script_path = Path(job.script_path or Path(job.stdout).parent / "controller.sbatch")
        options = self.sbatch_options(job)
        source = client_env(self._env)
        job_env = self.job_environment(job)
        # the client's own configuration (SLURM_CONF) on top: it also reaches the job, which needs it
        sbatch_env = {**job_env, **{k: source[k] for k in NOT_JOB_CONTEXT if k in source}}
        sbatch = shutil.which("sbatch", path=source.get("PATH")) or "sbatch"
        # the controller argv goes after the script as its arguments, never into its text
        argv = [sbatch, *options, str(script_path), *job.argv]
        try:
            _prepare_logs(job)
            write_private(script_path, render_controller_script(job.name, options, job.env,
                                                                passed=sorted(sbatch_env)))
        except OSError as exc:
            raise SchedulerError(f"cannot prepare job {job.name}: {exc}", path=exc.filename) from None
        try:
            out = run_client(argv, env=sbatch_env, timeout=self.call_timeout)
        except SlurmCallFailed as exc:
            if exc.uncertain:
                raise SubmissionUncertain(
                    f"sbatch got no answer for job {job.name}: {exc}",
                    hint="the job may have been queued anyway; its submission token lets the next "
                         "tick find it in squeue") from None
            raise SchedulerError(f"sbatch refused job {job.name}: {exc}") from None
        job_id = out.strip().splitlines()[0].split(";")[0].strip() if out.strip() else ""
        if not _JOB_ID_RE.fullmatch(job_id):
            # rc 0: Slurm took the request; without an id we cannot tell which job it made
            raise SubmissionUncertain(f"sbatch accepted job {job.name} but printed no job id: {out.strip()!r}")
        return job_id

    # -- queue ----------------------------------------------------------------------------------
    def queue(self) -> QueueSnapshot:
        try:
            argv = squeue_argv(self.squeue_user, _user_name())
            out = run_client(argv, env=client_env(self._env, drop_prefixes=(SQUEUE_ENV_PREFIX,)),
                             timeout=self.call_timeout)
            return QueueSnapshot.of(parse_squeue(out, self.name_prefix))
        except (SlurmCallFailed, SqueueParseError) as exc:
            return QueueSnapshot.unknown(str(exc))
        except Exception as exc:   # an UNKNOWN queue is safe; a crashed tick judges nothing at all
            return QueueSnapshot.unknown(f"squeue could not be read: {type(exc).__name__}: {exc}")

    # -- cancel ---------------------------------------------------------------------------------
    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = sorted({str(j) for j in job_ids})
        bad = [j for j in ids if not _JOB_ID_RE.fullmatch(j)]
        if bad:   # never let "--user=x" or "-u" reach scancel as an "id"
            raise SchedulerError(f"refusing to cancel: not Slurm job ids: {', '.join(map(repr, bad))}")
        if not ids:
            return
        try:
            # unknown and finished ids are silent with rc 0, which makes cancel idempotent
            run_client(["scancel", *ids], env=client_env(self._env), timeout=self.call_timeout)
        except SlurmCallFailed as exc:
            raise SchedulerError(f"scancel {' '.join(ids)} failed: {exc}") from None

    def capacity(self) -> dict[str, int | None]:
        return {"cpu": None, "gpu": None}   # the site decides; sweep does not count its GPUs

    def job_environment(self, job: JobSpec) -> dict[str, str]:
        """The job's environment besides SWEEP_JOB_ID, SLURM_CONF and Slurm's own SLURM_* for the
        job: its `pass_env` names from the submitter's environment and `job.env`, nothing else."""
        return passed_environment(job, client_env(self._env))

    # -- end states (accounting.py) -------------------------------------------------------------
    def end_states(self, job_ids: Iterable[str]) -> EndStates:
        """How vanished jobs ended: ONE bounded sacct call (see accounting.py)."""
        from sweep.scheduler.slurm.accounting import end_states
        return end_states(job_ids, source=self.accounting, env=self._env, timeout=self.call_timeout)

    # -- the backend's side: before a campaign exists, and inside a running job ------------------
    @classmethod
    def preflight(cls, settings: SchedulerSettings, needs_gpu_lane: bool, max_gpus: int) -> Preflight:
        """The lanes against the cluster and MessageTimeout: one sinfo, one scontrol (preflight.py)."""
        from sweep.scheduler.slurm.preflight import preflight
        return preflight(settings, needs_gpu_lane, max_gpus)

    @classmethod
    def job_restart_count(cls, environ: Mapping[str, str], job_id: str) -> int:
        """SLURM_RESTART_COUNT, only inside `job_id` itself (SLURM_JOB_ID is it): a count from any
        other job's environment is never this one's."""
        if environ.get("SLURM_JOB_ID") != job_id:
            return 0
        try:
            return max(0, int(environ.get("SLURM_RESTART_COUNT", "0")))
        except ValueError:
            return 0

    @classmethod
    def job_stop_cause(cls, job_id: str, restarts: int, environ: Mapping[str, str]) -> StopCause:
        """After SIGTERM: ONE `scontrol show job` (accounting.py); outside a Slurm job of its own
        (no SLURM_JOB_ID, or another job's) a SIGTERM is a cancel."""
        from sweep.scheduler.base import StopCause
        from sweep.scheduler.slurm.accounting import stop_cause
        if environ.get("SLURM_JOB_ID") != job_id:
            return StopCause("cancelled", "SIGTERM outside a Slurm job of its own (a cancel)")
        return stop_cause(job_id, restarts, env=environ)


def _check_path(label: str, path: Path) -> None:
    text = str(path)
    bad = [c for c in _UNSAFE_PATH_CHARS if c in text]
    if bad:
        raise ValueError(f"{label} path {text!r} contains {bad[0]!r}, which sbatch would interpret")
    if not Path(path).is_absolute():
        raise ValueError(f"{label} path {text!r} must be absolute (the job starts elsewhere)")


def _prepare_logs(job: JobSpec) -> None:
    """Create the log files 0600 before sbatch: Slurm would create them with the job's umask,
    and a missing log directory makes the job fail without a single line of output."""
    for path in (Path(job.stdout), Path(job.stderr)):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, LOG_MODE)
        try:
            os.fchmod(fd, LOG_MODE)
        finally:
            os.close(fd)


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
