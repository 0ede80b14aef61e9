"""sweep: a Slurm-native orchestrator for agent sweeps."""

__version__ = "0.1.0"
