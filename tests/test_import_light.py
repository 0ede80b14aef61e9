"""`sweep --help` and `sweep status` stay import-light: no agent SDK, no pyslurm, no controller,
provider, runtime or scheduler backend code (status makes no scheduler call at all).

Each check runs the real CLI entry point (`sweep.cli:main`, what the `sweep` console script calls)
in a fresh interpreter, then prints every module that interpreter ended up importing. The
interpreter imports this checkout (cwd and PYTHONPATH are the repository), so a stray top-level
import anywhere on the path of those verbs makes the test fail, naming the module.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.campaigns import payload_plan, sweep, write_plan

REPO = Path(__file__).resolve().parents[1]

FORBIDDEN = ("modal", "daytona", "pyslurm", "sweep.controller", "sweep.providers", "sweep.runtimes",
             "sweep.scheduler.slurm", "sweep.scheduler.local", "sweep.scheduler.pyslurm")

# Runs the CLI in-process, then writes sorted(sys.modules) to the file named by argv[1] (stdout
# belongs to the CLI). Any `-c` prelude in argv[2] runs first: the self-check below uses it.
RUNNER = """
import json, sys
out, prelude, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
exec(prelude)
from sweep.cli import main
try:
    rc = main(argv)
finally:
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
sys.exit(rc)
"""


def modules_after(tmp_path: Path, *argv: str, prelude: str = "") -> tuple[list[str], str]:
    """(modules imported, stdout) of one `sweep ARGV` in a fresh interpreter of this checkout."""
    out = tmp_path / f"modules-{len(list(tmp_path.glob('modules-*')))}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", RUNNER, str(out), prelude, *argv], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"sweep {' '.join(argv)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return json.loads(out.read_text()), r.stdout


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]


@pytest.fixture(scope="module")
def small_campaign(tmp_path_factory) -> Path:
    """A real campaign made by `sweep init`, drained and ticked once (so status reads a drain
    marker and a tick.json too; draining keeps the tick from starting any job)."""
    root = tmp_path_factory.mktemp("light")
    plan = write_plan(root / "plan.json", payload_plan(3))
    campaign = root / "campaign"
    sweep("init", str(plan), "--campaign", str(campaign))
    sweep("drain", "--campaign", str(campaign))
    sweep("tick", "--campaign", str(campaign))
    return campaign


def test_the_checker_sees_a_heavy_import(tmp_path):
    # the check must be able to fail: import one forbidden module before the CLI runs
    modules, _ = modules_after(tmp_path, "--help", prelude="import sweep.scheduler.local.scheduler")
    assert "sweep.scheduler.local" in heavy(modules)


def test_help_imports_no_backend_sdk_or_controller(tmp_path):
    modules, stdout = modules_after(tmp_path, "--help")
    assert "Commands:" in stdout and "status" in stdout
    assert not heavy(modules), f"imported {heavy(modules)}"


def test_status_imports_no_scheduler_backend_sdk_or_controller(tmp_path, small_campaign):
    modules, stdout = modules_after(tmp_path, "status", "--campaign", str(small_campaign))
    assert "runs: 3 runs" in stdout and "last tick:" in stdout and "drained" in stdout
    assert not heavy(modules), f"imported {heavy(modules)}"


def test_status_json_imports_no_scheduler_backend_sdk_or_controller(tmp_path, small_campaign):
    modules, stdout = modules_after(tmp_path, "status", "--json", "--campaign", str(small_campaign))
    assert json.loads(stdout)["runs"] == 3
    assert not heavy(modules), f"imported {heavy(modules)}"
