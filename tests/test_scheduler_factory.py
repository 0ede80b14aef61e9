"""make_scheduler picks the backend from settings, and importing the scheduler package stays
light (`sweep status` must never import pyslurm, pydantic-heavy backends or the Slurm code)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from runstate.errors import ConfigError
from sweep.models.lanes import LanesSettings, LocalSettings, SchedulerSettings
from sweep.scheduler import LOCAL_JOBS_DIR, make_scheduler

REPO = Path(__file__).resolve().parents[1]


def test_local_is_the_default_and_keeps_its_state_in_the_campaign(tmp_path):
    settings = SchedulerSettings(local=LocalSettings(cpu_slots=3, gpu_slots=1))
    scheduler = make_scheduler(settings, tmp_path, "sw.c1.")
    assert scheduler.name == "local"
    assert scheduler.capacity() == {"cpu": 3, "gpu": 1}
    assert (tmp_path / LOCAL_JOBS_DIR).stat().st_mode & 0o777 == 0o700


def test_slurm_backend_gets_the_lanes_and_timeouts(tmp_path):
    settings = SchedulerSettings.model_validate({
        "backend": "slurm", "call_timeout_seconds": 7, "squeue_user": "user",
        "lanes": {"gpu": {"partition": "a100", "gpu_request": "gpus"}}})
    scheduler = make_scheduler(settings, tmp_path, "sw.c1.")
    assert scheduler.name == "slurm"
    assert (scheduler.call_timeout, scheduler.squeue_user) == (7, "user")
    assert scheduler.lanes.gpu.sbatch_options(2) == ["--partition=a100", "--gpus=2"]
    assert not (tmp_path / LOCAL_JOBS_DIR).exists()


@pytest.mark.skipif(importlib.util.find_spec("pyslurm") is not None, reason="pyslurm is installed here")
def test_pyslurm_backend_without_pyslurm_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="needs the pyslurm package"):
        make_scheduler(SchedulerSettings(backend="pyslurm"), tmp_path, "sw.c1.")


def test_an_unknown_backend_is_a_config_error(tmp_path):
    settings = SchedulerSettings.model_construct(backend="pbs", lanes=LanesSettings())
    with pytest.raises(ConfigError, match="unknown scheduler backend 'pbs'"):
        make_scheduler(settings, tmp_path, "sw.c1.")


def test_importing_the_scheduler_package_stays_light():
    code = ("import sys, sweep.scheduler, sweep.scheduler.base;"
            "heavy = [m for m in ('pyslurm', 'pydantic', 'orjson', 'runstate.models', 'runstate.files',"
            " 'sweep.scheduler.slurm', 'sweep.scheduler.local.scheduler', 'sweep.scheduler.pyslurm')"
            " if m in sys.modules];"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "[]"


def test_the_local_launcher_imports_only_the_stdlib():
    # runstate.atomic and runstate.errors are stdlib-only by contract (tests/test_layers.py)
    code = ("import sys, sweep.scheduler.local.launch;"
            "print([m for m in sys.modules if m.split('.')[0] in ('pydantic', 'orjson')"
            " or m.startswith('runstate') and m not in ('runstate', 'runstate.atomic', 'runstate.errors')])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "[]"
