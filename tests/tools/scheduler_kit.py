"""Helpers shared by the scheduler tests: build jobs, wait for their output, clean up."""
from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sweep.scheduler.base import JobSpec, QueueSnapshot

WRITE_ARGV = str(Path(__file__).with_name("write_argv.py"))


def unique_prefix(tag: str = "t") -> str:
    """A fresh campaign job-name prefix: the Slurm cluster is shared by the whole session."""
    return f"sw.{tag}{uuid.uuid4().hex[:8]}."


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class JobFactory:
    """Makes JobSpecs for the write_argv.py test job in per-job run directories under `root`."""

    def __init__(self, root: Path, prefix: str):
        self.root = Path(root)
        self.prefix = prefix
        self.count = 0

    def spec(self, *args: str, gpus: int = 0, sleep: float = 0, env: dict[str, str] | None = None,
             name: str | None = None, argv: list[str] | None = None,
             pass_env: tuple[str, ...] = ()) -> tuple[JobSpec, Path]:
        self.count += 1
        run_dir = self.root / f"run-{self.count}"
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        out = run_dir / "argv.json"
        job_env = {"SWEEP_TEST_SLEEP": str(sleep), **(env or {})}
        spec = JobSpec(name=name or f"{self.prefix}tok{self.count}.run-{self.count}",
                       argv=argv if argv is not None else [sys.executable, WRITE_ARGV, str(out), *args],
                       workdir=run_dir, stdout=run_dir / "logs" / "controller.out",
                       stderr=run_dir / "logs" / "controller.err", gpus=gpus, env=job_env,
                       script_path=run_dir / "logs" / "controller.sbatch", pass_env=pass_env)
        return spec, out


def read_output(out: Path, timeout: float = 30.0) -> dict:
    wait_for(out.exists, timeout, f"{out} to be written by the job")
    return json.loads(out.read_text())


def queue_ids(snapshot: QueueSnapshot) -> set[str]:
    assert snapshot.known, f"queue unexpectedly UNKNOWN: {snapshot.error}"
    return set(snapshot.jobs)
