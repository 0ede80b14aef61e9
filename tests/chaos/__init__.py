"""The chaos harness: a real campaign on the real throwaway Slurm cluster, under injected faults.

`python -m tests.chaos --seed 7 --kills 1000` (see docs/reliability.md). The CI-sized run is
tests/test_reliability_chaos.py.
"""
