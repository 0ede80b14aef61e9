"""Scheduler backends behind one small interface (see base.py and docs/slurm.md).

One folder per backend: `local/` (the embedded default: detached processes on this machine),
`slurm/` (sbatch/squeue/scancel), `pyslurm/` (optional; only where pyslurm matches the site's
Slurm). `make_scheduler` imports the chosen backend only when it is asked for one, so `sweep
status` (which never calls a scheduler) pays for none of them — and never imports pyslurm.
Module-level imports here stay stdlib-only.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweep.scheduler.base import (JobInfo, JobSpec, QueueSnapshot, Scheduler, SchedulerBackend,
                                  check_job_name, parse_gpu_count)

from sweep.registry import Plugin, Registry

if TYPE_CHECKING:
    from sweep.models.lanes import SchedulerSettings


LOCAL_JOBS_DIR = "local-jobs"     # == runstate.paths.LOCAL_JOBS_DIR (not imported: the launcher is stdlib only)

# backend name -> "module:class", imported only when a campaign asks for that backend
SCHEDULERS = Registry("scheduler backend", "scheduler.backend", {
    "local": "sweep.scheduler.local:LocalScheduler",
    "slurm": "sweep.scheduler.slurm:SlurmScheduler",
    "pyslurm": Plugin("sweep.scheduler.pyslurm:PyslurmScheduler", extra="pyslurm"),
})

__all__ = ["JobInfo", "JobSpec", "QueueSnapshot", "Scheduler", "SchedulerBackend", "check_job_name",
           "parse_gpu_count", "make_scheduler", "backend", "LOCAL_JOBS_DIR", "SCHEDULERS"]


def backend(name: str) -> SchedulerBackend:
    """The backend `name` itself (its class): preflight, and what a running job asks of it."""
    cls: SchedulerBackend = SCHEDULERS.load(name)
    return cls


def make_scheduler(settings: SchedulerSettings, campaign_dir: Path, name_prefix: str, *,
                   env: Mapping[str, str] | None = None) -> Scheduler:
    """The scheduler a campaign's settings ask for.

    `name_prefix` is how this campaign's jobs are told apart from every other job of the user
    (e.g. "sw.<campaign id>."). `env` defaults to this process's environment at call time
    (SLURM_CONF and friends pass through as the caller has them).
    Raises ConfigError when the backend cannot be used here (e.g. pyslurm missing or mismatched).
    """
    backend = settings.backend
    cls: Any = SCHEDULERS.load(backend)
    scheduler: Scheduler
    if backend == "local":
        from runstate.paths import CampaignPaths
        scheduler = cls(CampaignPaths(campaign_dir).local_jobs, name_prefix,
                        cpu_slots=settings.local.cpu_slots, gpu_slots=settings.local.gpu_slots,
                        call_timeout=settings.call_timeout_seconds, env=env)
    elif backend == "slurm":
        scheduler = cls(name_prefix, settings.lanes, call_timeout=settings.call_timeout_seconds,
                        squeue_user=settings.squeue_user, signal=settings.signal, env=env,
                        accounting=settings.accounting)
    else:   # pyslurm
        scheduler = cls(name_prefix, settings.lanes, call_timeout=settings.call_timeout_seconds,
                        squeue_user=settings.squeue_user, signal=settings.signal, env=env)
    return scheduler
