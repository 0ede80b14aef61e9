"""Lane and scheduler settings: typos and bad values are refused naming the field (pydantic `loc`),
and valid lanes turn into exactly the sbatch options a GPU cluster expects."""
from __future__ import annotations

import tomllib

import pytest
from pydantic import ValidationError

from sweep.models.lanes import (GpuLaneSettings, LaneSettings, LanesSettings, SchedulerSettings,
                                check_slurm_time)

TYPICAL_GPU_CLUSTER = """
[scheduler]
backend = "slurm"
call_timeout_seconds = 30

[scheduler.lanes.cpu]
partition = "cpu"
account = "proj-123"
time = "1-00:00:00"
mem = "8G"
cpus = 2

[scheduler.lanes.gpu]
partition = "gpu"
account = "proj-123"
qos = "normal"
time = "2-00:00:00"
mem = "64G"
cpus = 8
gpu_request = "gres"
gpu_type = "a100"
constraint = "a100&ib"
extra_args = ["--reservation=sweep"]
"""


def _errors(data: dict) -> list[tuple[tuple, str]]:
    with pytest.raises(ValidationError) as excinfo:
        SchedulerSettings.model_validate(data)
    return [(e["loc"], e["msg"]) for e in excinfo.value.errors()]


def test_defaults_are_local_with_a_default_cpu_partition_and_a_gpu_partition():
    settings = SchedulerSettings()
    assert settings.backend == "local"
    assert settings.lanes.cpu.partition is None and settings.lanes.gpu.partition == "gpu"
    assert settings.lanes.cpu.sbatch_options() == []
    assert settings.lanes.gpu.sbatch_options(2) == ["--partition=gpu", "--gres=gpu:2"]
    assert settings.call_timeout_seconds == 20 and settings.signal == "B:USR1@120"


def test_the_documented_gpu_cluster_example_renders_the_expected_options():
    settings = SchedulerSettings.model_validate(tomllib.loads(TYPICAL_GPU_CLUSTER)["scheduler"])
    lane_name, lane = settings.lanes.for_gpus(4)
    assert lane_name == "gpu"
    assert lane.sbatch_options(4) == [
        "--partition=gpu", "--account=proj-123", "--qos=normal", "--time=2-00:00:00", "--mem=64G",
        "--cpus-per-task=8", "--constraint=a100&ib", "--gres=gpu:a100:4", "--reservation=sweep"]
    assert settings.lanes.for_gpus(0) == ("cpu", settings.lanes.cpu)


def test_the_gpu_lane_requests_the_runs_full_device_count_in_either_syntax():
    assert GpuLaneSettings(gpu_request="gpus").sbatch_options(3)[-1] == "--gpus=3"
    assert GpuLaneSettings(gpu_request="gpus", gpu_type="h100").sbatch_options(2)[-1] == "--gpus=h100:2"
    assert GpuLaneSettings(gpu_type="a100").sbatch_options(2)[-1] == "--gres=gpu:a100:2"
    assert GpuLaneSettings().sbatch_options(0) == ["--partition=gpu"]


def test_the_cpu_lane_cannot_request_gpus():
    with pytest.raises(ValueError, match="gpu lane"):
        LaneSettings().sbatch_options(1)


def test_overriding_one_gpu_field_keeps_the_gpu_partition_default():
    settings = SchedulerSettings.model_validate({"lanes": {"gpu": {"time": "4:00:00"}}})
    assert settings.lanes.gpu.partition == "gpu"


def test_an_empty_partition_means_the_cluster_default():
    assert LaneSettings(partition="").partition is None
    assert GpuLaneSettings(partition="").sbatch_options(1) == ["--gres=gpu:1"]


@pytest.mark.parametrize("data, loc", [
    ({"lanes": {"gpu": {"partiton": "gpu"}}}, ("lanes", "gpu", "partiton")),      # typo
    ({"lanes": {"gpus": {}}}, ("lanes", "gpus")),
    ({"lanes": {"cpu": {"gpu_type": "a100"}}}, ("lanes", "cpu", "gpu_type")),      # gpu-only field
    ({"lanes": {"gpu": {"time": "4:61:00"}}}, ("lanes", "gpu", "time")),
    ({"lanes": {"gpu": {"time": "four hours"}}}, ("lanes", "gpu", "time")),
    ({"lanes": {"cpu": {"mem": "8GB"}}}, ("lanes", "cpu", "mem")),
    ({"lanes": {"cpu": {"cpus": 0}}}, ("lanes", "cpu", "cpus")),
    ({"lanes": {"cpu": {"partition": "cpu;rm"}}}, ("lanes", "cpu", "partition")),
    ({"lanes": {"cpu": {"account": "a b"}}}, ("lanes", "cpu", "account")),
    ({"lanes": {"gpu": {"gpu_request": "mig"}}}, ("lanes", "gpu", "gpu_request")),
    ({"lanes": {"gpu": {"gpu_type": "a100:2"}}}, ("lanes", "gpu", "gpu_type")),
    ({"lanes": {"cpu": {"constraint": "a\nb"}}}, ("lanes", "cpu", "constraint")),
    ({"lanes": {"cpu": {"extra_args": ["-p gpu"]}}}, ("lanes", "cpu", "extra_args")),
    ({"lanes": {"cpu": {"extra_args": ["--comment=a\nb"]}}}, ("lanes", "cpu", "extra_args")),
    ({"lanes": {"cpu": {"extra_args": ["--partition gpu"]}}}, ("lanes", "cpu", "extra_args")),
    ({"lanes": {"cpu": {"extra_args": ["--job-name=x"]}}}, ("lanes", "cpu", "extra_args")),
    ({"lanes": {"gpu": {"extra_args": ["--gres=gpu:1"]}}}, ("lanes", "gpu", "extra_args")),
    ({"backend": "pbs"}, ("backend",)),
    ({"squeue_user": "root"}, ("squeue_user",)),
    ({"call_timeout_seconds": 0}, ("call_timeout_seconds",)),
    ({"signal": "TERM;reboot"}, ("signal",)),
    ({"local": {"gpu_slots": -1}}, ("local", "gpu_slots")),
    ({"local": {"slots": 2}}, ("local", "slots")),
])
def test_invalid_settings_are_refused_naming_the_field(data, loc):
    errors = _errors(data)
    assert [e[0] for e in errors] == [loc], errors


def test_messages_say_what_is_accepted():
    (_, msg), = _errors({"lanes": {"gpu": {"time": "four hours"}}})
    assert "HH:MM:SS" in msg
    (_, msg), = _errors({"lanes": {"gpu": {"extra_args": ["--gres=gpu:1"]}}})
    assert "gpu_request" in msg


def test_gres_in_extra_args_is_fine_on_the_cpu_lane():
    assert LaneSettings(extra_args=["--gres=lscratch:10"]).sbatch_options() == ["--gres=lscratch:10"]


@pytest.mark.parametrize("value", ["30", "90", "30:00", "4:00:00", "100:00:00", "1-0", "2-12",
                                   "1-12:30", "7-00:00:00", "UNLIMITED", "infinite"])
def test_slurm_time_forms_are_accepted(value):
    assert check_slurm_time(value) == value


@pytest.mark.parametrize("value", ["", "1h", "1:2:3:4", "1-24:00:00", "1-2:60", "10:60", "-5", "1 -2"])
def test_bad_slurm_times_are_refused(value):
    with pytest.raises(ValueError):
        check_slurm_time(value)


def test_settings_are_frozen_so_a_tick_cannot_change_them_by_accident():
    settings = SchedulerSettings()
    with pytest.raises(ValidationError):
        settings.backend = "slurm"  # type: ignore[misc]
    assert LanesSettings() == LanesSettings()
