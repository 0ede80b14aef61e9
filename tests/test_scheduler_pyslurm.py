"""The optional pyslurm backend. pyslurm on PyPI is 25.11 only and cannot build against this
machine's Slurm 22.05, so the tests that need it skip; the version check does not need it."""
from __future__ import annotations

import importlib.util
import os

import pytest

from runstate.errors import ConfigError
from sweep.scheduler.pyslurm import check_versions
from sweep.scheduler.pyslurm.scheduler import _gpu_count

HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None


@pytest.mark.parametrize("ours, site", [("25.11.2", "25.11.0"), ("23.2.2", "23.02.7"),
                                        ("22.5.0", "slurm-wlm 22.05.8")])
def test_matching_major_minor_is_accepted(ours, site):
    check_versions(ours, site)


@pytest.mark.parametrize("ours, site", [("25.11.2", "22.05.8"), ("24.11.0", "25.11.1"), ("unknown", "22.05.8")])
def test_a_mismatch_names_both_versions(ours, site):
    with pytest.raises(ConfigError) as excinfo:
        check_versions(ours, site)
    message = str(excinfo.value)
    assert ours in message and site in message
    assert excinfo.value.field == "scheduler.backend"
    assert 'backend = "slurm"' in message


@pytest.mark.skipif(HAVE_PYSLURM, reason="pyslurm is installed here")
def test_without_pyslurm_the_backend_refuses_with_a_clear_error():
    from sweep.scheduler.pyslurm import PyslurmScheduler
    with pytest.raises(ConfigError, match="needs the pyslurm package") as excinfo:
        PyslurmScheduler("sw.c1.")
    assert "sweep[pyslurm]" in str(excinfo.value)


def test_gpu_counts_from_pyslurm_gres_dicts():
    assert _gpu_count({"gpu": 2}) == 2
    assert _gpu_count({"gpu:a100": 2, "shard": 4}) == 2
    assert _gpu_count({"gpu": {"a100": 1, "v100": 1}}) == 2
    assert _gpu_count(None) == 0


@pytest.mark.slurm
@pytest.mark.skipif(not HAVE_PYSLURM, reason="pyslurm is not installed: PyPI ships only 25.11, which "
                    "cannot build against this machine's Slurm 22.05")
def test_pyslurm_queue_matches_the_cli_backend(slurm_cluster, tmp_path):  # pragma: no cover - needs pyslurm
    from sweep.scheduler.pyslurm import PyslurmScheduler
    from sweep.scheduler.slurm import SlurmScheduler
    from tests.tools.scheduler_kit import JobFactory, unique_prefix
    os.environ["SLURM_CONF"] = slurm_cluster.env["SLURM_CONF"]
    prefix = unique_prefix("p")
    cli = SlurmScheduler(prefix, env=slurm_cluster.env)
    job_id = cli.submit(JobFactory(tmp_path, prefix).spec(gpus=1, sleep=60)[0])
    try:
        assert set(PyslurmScheduler(prefix, env=slurm_cluster.env).queue().jobs) == {job_id}
    finally:
        cli.cancel([job_id])
