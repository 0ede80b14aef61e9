"""The chaos harness, CI-sized: one round of a 20-run campaign on the real test cluster under
injected faults (kill -9 of ticks and controllers, scancel, slurmctld stalled and restarted,
corrupted files, outages, drain). The long run is `python -m tests.chaos` (docs/reliability.md)."""
import os
import random

import pytest

from tests.chaos.harness import Chaos

pytestmark = pytest.mark.slurm


def test_chaos_round_keeps_every_invariant(slurm_cluster, tmp_path):
    seed = int(os.environ.get("SWEEP_CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    print(f"chaos seed {seed} (rerun with SWEEP_CHAOS_SEED={seed})")
    lines = []
    chaos = Chaos(slurm_cluster, tmp_path, seed, runs=20, kills=30, round_faults=30, deadline_s=60,
                  log=lines.append)
    fig = chaos.run()
    breaker = [line for line in lines if "circuit breaker tripped on" in line or line.startswith("  pr-")]
    assert fig.violations == [], f"seed {seed}:\n" + "\n".join(fig.violations + breaker + lines[-20:])
    assert fig.rounds >= 1 and fig.kills >= 10, fig.as_dict()
    assert sum(fig.endings.values()) + fig.corrupt_runs == fig.runs, fig.as_dict()
