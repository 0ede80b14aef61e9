"""Shared fixtures. The real Slurm cluster lives in tests/slurm_cluster.py (also a CLI)."""
from tests.slurm_cluster import scrontab_bin, slurm_cluster, slurm_preempt_cluster  # noqa: F401 - re-exported fixtures
