"""The Slurm backend over the command-line clients (sbatch, squeue, scancel); any Slurm >= 20.11."""
from sweep.scheduler.slurm.scheduler import SlurmScheduler

__all__ = ["SlurmScheduler"]
