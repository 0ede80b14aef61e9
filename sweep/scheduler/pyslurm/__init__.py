"""The optional pyslurm backend (`pip install sweep[pyslurm]`).

Importing this package does not import pyslurm; constructing `PyslurmScheduler` does, and
refuses with a ConfigError unless pyslurm's version matches the site's Slurm major.minor.
"""
from sweep.scheduler.pyslurm.scheduler import PyslurmScheduler, check_versions

__all__ = ["PyslurmScheduler", "check_versions"]
