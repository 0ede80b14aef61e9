"""The gates phase runs its independent trials at once (sweep/controller/concurrent.py), with the
evidence the serial order gives: real trials (bubblewrap, the harness, real git), the phase run
in-process on a real campaign's run, the trials' processes watched in /proc while it runs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from runstate.models import RunState
from runstate.runs import load_record, save_record
from sweep.campaign import Campaign, init_campaign, load_candidate
from sweep.controller import phases
from sweep.controller.budget import Budget
from sweep.controller.concurrent import run_in_order
from sweep.controller.context import Ctx, Ending
from sweep.harbor.bundle import bundle_sha256
from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.harbor.samples import FLAKY_TEST, make_verified_pr
from tests.campaigns import write_plan
from tests.fakes.runs import candidate, local_plan

needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a job with 2 CPUs")

# a test every run passes, fix or no fix (PASS_TO_PASS), after holding its trial open a while
SLOW_TEST = '''import time
import unittest


class SlowTest(unittest.TestCase):
    def test_takes_a_while(self):
        time.sleep(0.25)
'''


def _ctx(tmp_path: Path, *, memory_mb: int = 1024, repeats: int = 2) -> Ctx:
    """A run past its author phase: intake done, the oracle's bundle of a PR whose new tests hold a
    hash-order-flaky one (FLAKY_TEST) and a slow one, in `task/` as revision 1."""
    src = make_verified_pr(tmp_path / "repos", "slow-flaky", extra_files={
        "tests/test_clamp_above.py": FLAKY_TEST.format(counter=None), "tests/test_slow.py": SLOW_TEST})
    plan = local_plan([candidate("pr", src)], defaults={"quality": {"gate_repeats": repeats}},
                      limits={"memory_mb": memory_mb})
    camp = tmp_path / "camp"
    init_campaign(write_plan(tmp_path / "plan.json", plan), camp)
    campaign = Campaign.load(camp)
    paths = campaign.run("pr")
    record = load_record(paths.dir).value
    record = save_record(paths.dir, record.model_copy(update={"state": RunState.active, "job_id": "77",
                                                              "submit_token": "tok"}))
    ctx = Ctx(campaign, paths, "tok", "77", record, Budget(paths.dir, "pr", None), load_candidate(paths.dir))
    phases.intake(ctx)
    build_bundle_from_git(src, paths.task)
    ctx.save(checkpoints={"author": {"revision": 1, "bundle_sha256": bundle_sha256(paths.task)}})
    return ctx


class TrialWatch(threading.Thread):
    """Which gate trials of `work` had a live process at the same moment (their work directory in its
    argv, or in its mount table: bwrap takes its binds through a descriptor, so a sandbox's argv names
    none, while the mount table of a process inside names the trial's bind sources; the machine may
    run other campaigns' gates)."""

    def __init__(self, work: Path) -> None:
        super().__init__(daemon=True)
        self.pattern = re.compile(re.escape(str(work)) + r"/gates-r0001-([a-z]+-(?:\d|selected))")
        self.done = threading.Event()
        self.together: set[frozenset[str]] = set()

    def run(self) -> None:
        while not self.done.is_set():
            live = set()
            for pid in os.listdir("/proc"):
                for name in ("cmdline", "mountinfo"):
                    try:
                        text = Path(f"/proc/{pid}/{name}").read_bytes().decode(errors="replace")
                    except OSError:
                        continue
                    live.update(self.pattern.findall(text))
            if len(live) > 1:
                self.together.add(frozenset(live))
            time.sleep(0.02)


def _gates(ctx: Ctx, cpus: set[int]) -> tuple[dict, set[frozenset[str]]]:
    """Run the gates phase with this thread's affinity `cpus`; its evidence and the trials seen together."""
    before = os.sched_getaffinity(0)
    watch = TrialWatch(ctx.paths.work)
    watch.start()
    os.sched_setaffinity(0, cpus)
    try:
        phases.gates(ctx)
    except Ending:          # failing gates end the run (max_repairs 0): the evidence is written first
        pass
    finally:
        os.sched_setaffinity(0, before)
        watch.done.set()
        watch.join()
    ev = json.loads(ctx.paths.evidence_file("gates", 1).read_text())
    ev.pop("at")
    return ev, watch.together


def _timeless(evidence: dict) -> str:
    """The evidence less what differs between any two runs: unittest's "Ran N tests in 0.251s"."""
    return re.sub(r"in \d+\.\d+s", "in Ts", json.dumps(evidence, sort_keys=True))


@needs_two_cpus
def test_concurrent_gates_run_trials_together_and_write_the_serial_evidence(tmp_path):
    ctx = _ctx(tmp_path)
    serial, alone = _gates(ctx, {0})
    assert alone == set()                       # one CPU: one trial at a time
    together, seen = _gates(ctx, {0, 1})
    # reference and empty of one repeat, and the two selected runs, each ran alongside the other
    assert frozenset({"reference-0", "empty-0"}) in seen, seen
    assert all(len(s) <= 2 for s in seen), seen         # never more than the CPUs
    assert _timeless(together) == _timeless(serial)
    gates = together["gates"]
    # what the gates prove is unchanged: the hash-order test fails under seed 2 only, the repeat sees it
    assert gates["repeat"]["ok"] is False and together["passed"] is False
    assert gates["reference"]["rewards"] == [1.0, 0.0] and together["hash_seeds"] == [1, 2]


@needs_two_cpus
def test_trials_whose_memory_bound_the_job_cannot_hold_twice_run_one_at_a_time(tmp_path):
    from sweep.controller.concurrent import job_memory_bytes
    half = job_memory_bytes() // 2 // (1 << 20) + 1
    ctx = _ctx(tmp_path, memory_mb=half, repeats=1)
    _, seen = _gates(ctx, {0, 1})
    assert seen == set()


def test_the_memory_slurm_gave_the_job_bounds_it(monkeypatch):
    from sweep.controller.concurrent import job_cpus, job_memory_bytes
    host = job_memory_bytes()
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "3000")
    assert job_memory_bytes() == 3000 << 20
    monkeypatch.delenv("SLURM_MEM_PER_NODE")
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "1000")
    assert job_memory_bytes() == min(host, (1000 << 20) * job_cpus())


def test_results_come_in_order_and_the_first_error_in_order_is_raised(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    def meets(me: str, other: str):
        # a real process that leaves its marker and waits (bounded) for the other's
        script = f'touch {me}; for i in $(seq 100); do [ -e {other} ] && exit 0; sleep 0.05; done; exit 1'
        return lambda: subprocess.run(["bash", "-c", script], cwd=marks).returncode == 0

    assert run_in_order([meets("a", "b"), meets("b", "a")], 2, stop=lambda: None) == [True, True]
    started = []

    def job(i: int, wait: float, fail: bool = False):
        def run():
            started.append(i)
            time.sleep(wait)
            if fail:
                raise ValueError(i)
            return i
        return run
    # the slow first job's result still comes first
    assert run_in_order([job(0, 0.3), job(1, 0.0), job(2, 0.0)], 2, stop=lambda: None) == [0, 1, 2]
    started.clear()
    with pytest.raises(ValueError, match="^1$"):
        run_in_order([job(0, 0.2), job(1, 0.1, fail=True), job(2, 0.0, fail=True), job(3, 0.0)], 2, stop=lambda: None)
    assert 2 not in started and 3 not in started        # nothing starts after a job raised
    # two errors: the first in the jobs' order, though the other came first
    with pytest.raises(ValueError, match="^0$"):
        run_in_order([job(0, 0.3, fail=True), job(1, 0.0, fail=True)], 2, stop=lambda: None)


class Stopped(Exception):
    pass


def test_a_signal_while_trials_run_stops_them_and_whatever_they_start_after(tmp_path):
    """What SIGTERM does to a controller in its gates (pipeline.on_term): its handler stops the
    children's process groups and raises. A job that then starts another process (a reference
    trial's test.sh after its solve.sh) has it stopped too, and no queued job starts."""
    import signal
    procs: list[subprocess.Popen] = []
    started = []

    def kill_all():
        for p in list(procs):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def job(i: int):
        def run():
            started.append(i)
            for _ in range(2):
                p = subprocess.Popen(["sleep", "20"], start_new_session=True)
                procs.append(p)
                p.wait()
        return run

    def on_term(signum, frame):
        kill_all()
        raise Stopped()

    old = signal.signal(signal.SIGTERM, on_term)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(Stopped):
            run_in_order([job(0), job(1), job(2)], 2, stop=kill_all)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
    assert time.monotonic() - t0 < 10
    assert sorted(started) == [0, 1] and all(p.poll() is not None for p in procs), procs
