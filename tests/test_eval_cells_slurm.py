"""An evaluation run through sbatch on the real Slurm test cluster (tests/slurm_cluster.py), by
repeated `sweep tick` calls: the hand-made 3-task Harbor dataset (tests/test_eval_harbor.py) x an
oracle-like and a nop-like command arm x 3 repeats, 18 cells, each cell's controller a Slurm job;
and a cell's Slurm controller killed with SIGKILL twice, resuming without repeating finished work.

Every `sweep tick` runs with a PATH whose `squeue` is a wrapper that logs its caller's pid before it
runs the real one, so the test counts the queue calls of each tick: exactly one. The solver
sessions count themselves on the test's socket (tests/test_eval_cells.py): each cell's session ran
once. The report is checked against the same hand computation as the local run's.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from runstate.runs import list_runs
from tests.campaigns import REPO, sweep
from tests.fakes.runs import wait_until
from tests.test_eval_cells import kill_twice, lab, manifest, results, write_eval  # noqa: F401  (the fixture)
from tests.test_eval_harbor import TASKS

pytestmark = pytest.mark.slurm

SCHEDULER = ('[scheduler]\nbackend = "slurm"\naccounting = "jobcomp"\n'
             '[scheduler.lanes.cpu]\npartition = "cpu"\ntime = "10"\n')


def squeue_wrapper(bin_dir: Path, log: Path) -> Path:
    real = shutil.which("squeue")
    assert real, "squeue is not installed"
    bin_dir.mkdir()
    wrapper = bin_dir / "squeue"
    wrapper.write_text(f'#!/bin/sh\necho "$PPID" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir


def test_an_evaluation_runs_to_its_end_through_sbatch_one_squeue_per_tick(slurm_cluster, lab, tmp_path):  # noqa: F811
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    camp = write_eval(lab, name="onslurm", repeats=3, max_parallel=4, scheduler=SCHEDULER)
    cells = manifest(camp)
    assert len(cells) == 18
    log = tmp_path / "squeue.log"
    path = f"{squeue_wrapper(tmp_path / 'bin', log)}:{os.environ['PATH']}"
    ticks: list[int] = []

    def tick_and_done() -> bool:
        proc = subprocess.run([sys.executable, "-m", "sweep", "tick", "--campaign", str(camp)], cwd=REPO,
                              env={**os.environ, **env, "PATH": path}, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        report = json.loads((camp / "tick.json").read_text())
        ticks.append(int(report["host"].rsplit(".", 1)[1]))         # the tick's pid
        assert report["squeue_known"] is True and not report["errors"], report
        return all(r.state.value == "ended" for r in list_runs(camp).records.values())
    wait_until("every cell to end through sbatch", tick_and_done, 400, poll=1.0)
    # each tick asked the queue exactly once (and nothing else did)
    calls = Counter(int(line) for line in log.read_text().split())
    assert calls == Counter({pid: 1 for pid in ticks}) and len(ticks) >= 5, (calls, ticks)
    records = list_runs(camp).records
    assert {(r.state.value, r.outcome.value, r.attempts) for r in records.values()} == {("ended", "verified", 0)}
    assert all(r.job_id and r.job_id.isdigit() for r in records.values())    # Slurm job ids: sbatch ran them
    assert all(list((camp / "runs" / c["cell_id"] / "logs").glob("job-*.sbatch")) for c in cells)
    assert lab["counter"].counts() == Counter(c["cell_id"] for c in cells)     # each session once
    got = results(camp)
    assert {c["cell_id"]: got[c["cell_id"]]["reward"] for c in cells} == \
        {c["cell_id"]: 1.0 if c["arm"] == "oracle" else 0.0 for c in cells}
    report = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json").stdout)
    arms = {a["arm"]: a for a in report["arms"]}
    z2 = 1.959963984540054 ** 2
    # oracle 9/9: Wilson [9 / (9 + z^2), 1] = [.70085, 1]; nop 0/9: [0, z^2 / (9 + z^2)] = [0, .29915]
    assert (arms["oracle"]["cells"], arms["oracle"]["solved"], arms["nop"]["solved"]) == (9, 9, 0)
    assert arms["oracle"]["ci95"] == [pytest.approx(0.70085, abs=1e-5), 1.0]
    assert arms["nop"]["ci95"] == [0.0, pytest.approx(z2 / (9 + z2))]
    assert arms["oracle"]["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert arms["nop"]["pass_at_k"] == {"1": 0.0, "2": 0.0, "3": 0.0}
    (paired,) = report["paired"]
    # three discordant tasks, all the oracle's: exact McNemar p = 2 * (1/2)^3 = .25, effect (3 - 0) / 3 = 1
    assert (paired["first"], paired["tasks"], paired["first_only"], paired["second_only"]) == ("oracle", 3, 3, 0)
    assert paired["p_value"] == pytest.approx(0.25) and paired["effect"] == 1.0
    assert report["solved_by"] == {t: ["oracle"] for t in sorted(TASKS)}


def test_a_cell_whose_slurm_job_is_killed_resumes_without_repeating_finished_work(slurm_cluster, lab):  # noqa: F811
    """kill -9 of a cell's controller (the Slurm job's batch process) inside its solver session, then
    of its successor inside the final verifier: the tick sees each job gone from squeue (jobcomp says
    it FAILED), requeues the cell at its recorded phase, and the finished solver session never runs
    again (tests/test_eval_cells.py `kill_twice`)."""
    camp = write_eval(lab, name="killedslurm", repeats=1, max_parallel=2, scheduler=SCHEDULER, tasks=1)
    kill_twice(lab, camp, {"SLURM_CONF": str(slurm_cluster.conf)})
    assert all(r.job_id.isdigit() for r in list_runs(camp).records.values() if r.job_id)
