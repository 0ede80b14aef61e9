"""Scheduler settings and lanes: which partition/QOS/time a controller job is submitted with.

A *lane* is where a run's controller goes: runs with `gpus = 0` go to the `cpu` lane, runs with
`gpus = N > 0` to the `gpu` lane and request all N devices there. These models are embedded in a
campaign plan under `[scheduler]` (see docs/slurm.md); they forbid unknown keys so a typo such as
`partiton` is an error naming `lanes.gpu.partiton`, not a silently ignored setting. Every value that
becomes an sbatch argument is validated here, at the boundary, so nothing odd reaches Slurm later.
"""
from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_NAME_LIST_RE = re.compile(r"[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*")    # partition "a,b", account, qos
_TYPE_RE = re.compile(r"[A-Za-z0-9._-]+")
_MEM_RE = re.compile(r"\d+[KMGTkmgt]?")
_SIGNAL_RE = re.compile(r"(?:[RB]{1,2}:)?(?:SIG)?[A-Z0-9]+(?:@\d+)?")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (and UNLIMITED/INFINITE)
_TIME_FORMS = (
    re.compile(r"(?P<m>\d+)"),
    re.compile(r"(?P<m>\d+):(?P<s>\d{1,2})"),
    re.compile(r"(?P<h>\d+):(?P<m>\d{1,2}):(?P<s>\d{1,2})"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2})"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2}):(?P<m>\d{1,2})"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2}):(?P<m>\d{1,2}):(?P<s>\d{1,2})"),
)
# options sweep sets itself; a lane that also set them would silently break a contract
_RESERVED_OPTIONS = {
    "--job-name": "the job name is how queue() finds this campaign's jobs",
    "--output": "controller logs go to the run directory",
    "--error": "controller logs go to the run directory",
    "--chdir": "the job runs in its run directory",
    "--parsable": "sweep parses sbatch's output itself",
    "--wrap": "the controller argv is passed as script arguments",
    "--array": "one controller job per run",
    "--open-mode": "controller logs are appended across attempts",
    "--signal": "set the lane's warn_before_end_s (or [scheduler] signal) instead",
    "--requeue": "set the lane's requeue = \"slurm\" instead",
    "--no-requeue": "set the lane's requeue = \"tick\" instead (the default)",
    "--partition": "set the lane's partition instead",
    "--time": "set the lane's time instead",
    "--export": "the job gets exactly the environment sweep builds; name more variables in "
                "[scheduler] pass_env",
    "--get-user-env": "the job gets exactly the environment sweep builds, not a login shell's",
}
# on the gpu lane a second --gres/--gpus would replace the device request sweep computes
_GPU_LANE_RESERVED = {
    "--gres": "set gpu_request/gpu_type on the gpu lane instead",
    "--gpus": "set gpu_request/gpu_type on the gpu lane instead",
}
_OPTION_RE = re.compile(r"--[A-Za-z0-9][A-Za-z0-9-]*")


def check_slurm_time(value: str) -> str:
    """Validate a Slurm time limit string (ValueError with the accepted forms otherwise)."""
    if value.upper() in ("UNLIMITED", "INFINITE"):
        return value
    for form in _TIME_FORMS:
        match = form.fullmatch(value)
        if not match:
            continue
        parts = {key: int(text) for key, text in match.groupdict().items()}
        leading = next(iter(parts))   # the leading component may be any size ("90" minutes)
        for key, limit, word in (("h", 24, "hours"), ("m", 60, "minutes"), ("s", 60, "seconds")):
            if key in parts and key != leading and parts[key] >= limit:
                raise ValueError(f"{value!r}: {word} must be below {limit}")
        return value
    raise ValueError(f"{value!r} is not a Slurm time: use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
                     "D-HH:MM:SS or UNLIMITED")


class LaneSettings(BaseModel):
    """How a controller job is submitted on one lane (all optional: unset = the site's default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str | None = None      # None or "" = the cluster's default partition
    account: str | None = None
    qos: str | None = None
    time: str | None = None           # Slurm time string: "30", "4:00:00", "1-00:00:00", ...
    mem: str | None = None            # "8G", "16000" (MB), "512M"
    cpus: int | None = Field(default=None, ge=1, le=4096)   # --cpus-per-task
    constraint: str | None = None     # --constraint, e.g. "a100&ib"
    extra_args: list[str] = Field(default_factory=list)    # more sbatch options, "--opt" or "--opt=value"
    # Preemption and the time limit (docs/slurm.md, "Preemption, time limits and node failures"):
    # seconds before the time limit Slurm sends the controller SIGUSR1, so it checkpoints and the
    # run is re-queued without spending an attempt (None = [scheduler] signal, "B:USR1@120")
    warn_before_end_s: int | None = Field(default=None, ge=10, le=7 * 86400)
    # who reruns a controller that was preempted or lost its node: "tick" (--no-requeue: the job
    # ends and the next tick submits a new one) or "slurm" (--requeue: Slurm requeues the same job
    # id, which keeps its place in the queue and resumes the run under the same lease)
    requeue: Literal["tick", "slurm"] = "tick"
    # the site may preempt jobs of this lane (a scavenger partition or QOS): a SIGTERM whose cause
    # the controller cannot establish (scontrol unanswered) then counts as a preemption, not an attempt
    preemptible: bool = False

    _extra_reserved: ClassVar[dict[str, str]] = {}

    @field_validator("partition", mode="before")
    @classmethod
    def _empty_partition_means_default(cls, value: object) -> object:
        return None if value == "" else value   # TOML has no null: "" spells "cluster default"

    @field_validator("partition", "account", "qos")
    @classmethod
    def _check_names(cls, value: str | None) -> str | None:
        if value is not None and not _NAME_LIST_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid Slurm name: use letters, digits, '.', '_', '-' "
                             "(partitions may be a comma-separated list)")
        return value

    @field_validator("time")
    @classmethod
    def _check_time(cls, value: str | None) -> str | None:
        return None if value is None else check_slurm_time(value)

    @field_validator("mem")
    @classmethod
    def _check_mem(cls, value: str | None) -> str | None:
        if value is not None and not _MEM_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a Slurm memory size: use a number with an optional "
                             "K, M, G or T suffix (no suffix = megabytes)")
        return value

    @field_validator("constraint")
    @classmethod
    def _check_constraint(cls, value: str | None) -> str | None:
        if value is not None and (not value or not value.isprintable() or value.strip() != value):
            raise ValueError(f"{value!r} is not a valid constraint: printable text without "
                             "surrounding spaces")
        return value

    @field_validator("extra_args")
    @classmethod
    def _check_extra_args(cls, value: list[str]) -> list[str]:
        for arg in value:
            option = arg.split("=", 1)[0]
            if not _OPTION_RE.fullmatch(option):
                raise ValueError(f"{arg!r}: extra_args entries must be long options like "
                                 "'--reservation=big' (start with '--', one option per entry)")
            if not arg.isprintable():
                raise ValueError(f"{arg!r}: extra_args entries must not contain newlines or "
                                 "control characters")
            reserved = {**_RESERVED_OPTIONS, **cls._extra_reserved}
            if option in reserved:
                raise ValueError(f"{option} cannot be set in extra_args: {reserved[option]}")
        return value

    def sbatch_options(self, gpus: int = 0) -> list[str]:
        """The sbatch options (argv items, never shell text) this lane adds for a job of `gpus` GPUs."""
        opts: list[str] = []
        if self.partition:
            opts.append(f"--partition={self.partition}")
        if self.account:
            opts.append(f"--account={self.account}")
        if self.qos:
            opts.append(f"--qos={self.qos}")
        if self.time:
            opts.append(f"--time={self.time}")
        if self.mem:
            opts.append(f"--mem={self.mem}")
        if self.cpus:
            opts.append(f"--cpus-per-task={self.cpus}")
        if self.constraint:
            opts.append(f"--constraint={self.constraint}")
        opts.extend(self.gpu_options(gpus))
        opts.extend(self.extra_args)
        return opts

    def job_signal(self, default: str) -> str:
        """The --signal value for this lane's jobs: the lane's warning, else the scheduler's."""
        return default if self.warn_before_end_s is None else f"B:USR1@{self.warn_before_end_s}"

    def requeue_option(self) -> str:
        return "--requeue" if self.requeue == "slurm" else "--no-requeue"

    def gpu_options(self, gpus: int) -> list[str]:
        if gpus > 0:
            raise ValueError("this lane cannot request GPUs; GPU runs go to the gpu lane")
        return []


class GpuLaneSettings(LaneSettings):
    """The GPU lane: like any lane, plus how to ask the site for devices."""

    partition: str | None = "gpu"
    _extra_reserved: ClassVar[dict[str, str]] = _GPU_LANE_RESERVED
    gpu_request: Literal["gres", "gpus"] = "gres"   # --gres=gpu[:type]:N (any Slurm) or --gpus=[type:]N
    gpu_type: str | None = None                     # e.g. "a100"; None = any GPU

    @field_validator("gpu_type")
    @classmethod
    def _check_gpu_type(cls, value: str | None) -> str | None:
        if value is not None and not _TYPE_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid GPU type: use letters, digits, '.', '_', '-'")
        return value

    def gpu_options(self, gpus: int) -> list[str]:
        if gpus <= 0:
            return []
        typed = f"{self.gpu_type}:{gpus}" if self.gpu_type else str(gpus)
        if self.gpu_request == "gpus":
            return [f"--gpus={typed}"]
        return [f"--gres=gpu:{typed}"]


class LanesSettings(BaseModel):
    """The two lanes. `cpu` for runs without GPUs, `gpu` for the rest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: LaneSettings = Field(default_factory=LaneSettings)
    gpu: GpuLaneSettings = Field(default_factory=GpuLaneSettings)

    def for_gpus(self, gpus: int) -> tuple[str, LaneSettings]:
        """(lane name, its settings) for a run needing `gpus` devices."""
        return ("gpu", self.gpu) if gpus > 0 else ("cpu", self.cpu)


class LocalSettings(BaseModel):
    """Slots of the local backend (controller jobs as detached processes on this machine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_slots: int | None = Field(default=None, ge=0)   # None = os.cpu_count()
    gpu_slots: int | None = Field(default=None, ge=0)   # None = GPUs `nvidia-smi -L` lists, else 0


class SchedulerSettings(BaseModel):
    """`[scheduler]` of a campaign plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["local", "slurm", "pyslurm"] = "local"
    lanes: LanesSettings = Field(default_factory=LanesSettings)
    local: LocalSettings = Field(default_factory=LocalSettings)
    call_timeout_seconds: float = Field(default=20.0, gt=0, le=600)   # every sbatch/squeue/scancel
    squeue_user: Literal["me", "user"] = "me"    # --me, or -u $USER where --me is refused
    # --signal: SIGUSR1 to the batch shell (the controller itself: the job script execs it) 120 s
    # before the time limit; the controller checkpoints and the run is re-queued without an attempt
    signal: str = "B:USR1@120"
    # how the tick learns why a controller job vanished (ONE call per tick, only when one did):
    # "sacct" (slurmdbd), "jobcomp" (`sacct -c`: JobCompType=jobcomp/filetxt, no slurmdbd needed),
    # "none" (no call: a vanished job counts as an attempt). See docs/slurm.md.
    accounting: Literal["sacct", "jobcomp", "none"] = "sacct"
    # more variables a controller job gets from the tick's environment, by name, beside the ones
    # sweep always passes (sweep/tick/jobenv.py): e.g. ["LD_LIBRARY_PATH", "CUDA_HOME"]
    pass_env: list[str] = Field(default_factory=list)

    @field_validator("pass_env")
    @classmethod
    def _check_pass_env(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME_RE.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name: use [A-Za-z_][A-Za-z0-9_]*")
            if name.startswith(("SLURM_", "SLURMD_")) and name != "SLURM_CONF":
                raise ValueError(f"{name} is the tick's own job context: Slurm sets a job's SLURM_* "
                                 "variables itself, and another job's would mislead the controller")
            if name == "SWEEP_JOB_ID":
                raise ValueError("SWEEP_JOB_ID is set by the scheduler for each job")
        return value

    @field_validator("signal")
    @classmethod
    def _check_signal(cls, value: str) -> str:
        if not _SIGNAL_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid --signal value: use e.g. 'B:USR1@120'")
        return value
