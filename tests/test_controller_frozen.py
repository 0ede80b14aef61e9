"""A frozen runtime: controller jobs run the frozen copy, and a controller on any other code refuses.

The wheel is built once per test session (`pip wheel --no-deps`) from this source tree.
"""
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from runstate import acquire_lease, hand_over_lease, load_record, run_dir, save_record
from runstate.models import Outcome, RunState
from sweep.frozen import current_runtime
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import REPO, sweep, write_plan
from tests.fakes.runs import candidate, local_job, local_plan, record


@pytest.fixture(scope="session")
def sweep_wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
                   check=True, capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    return next(out.glob("sweep-*.whl"))


def other_wheel(wheel: Path, dest_dir: Path) -> Path:
    """The same wheel with one more file: different bytes, so a different runtime."""
    dest_dir.mkdir()
    other = dest_dir / wheel.name
    shutil.copy2(wheel, other)
    with zipfile.ZipFile(other, "a") as zf:
        zf.writestr("sweep/_variant.txt", "another build\n")
    return other


def snapshot(rdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(rdir.iterdir()) if p.is_file()}


def test_controller_jobs_run_the_frozen_runtime_and_other_code_refuses(tmp_path, sweep_wheel):
    cands = [candidate(f"pr-{i}", make_pr_repo(tmp_path / "repos", "verified", name=f"mathx{i}")) for i in range(2)]
    plan = local_plan(cands, max_parallel=1, target_verified=1)
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    froze = sweep("runtime", "freeze", "--wheel", str(sweep_wheel), "--campaign", str(d))
    out = froze.stdout
    assert f"copying {sweep_wheel}" in froze.stderr          # progress before the seconds of work
    rt = current_runtime(d)
    assert f"frozen runtime {rt.short}" in out and "next:" in out
    site = d / "runtime" / rt.short / "site"
    assert (site / "sweep" / "controller" / "pipeline.py").is_file()

    sweep("tick", "--campaign", str(d))
    rec = record(d, "pr-0")
    job = local_job(d, rec.job_id)
    assert job["argv"][:4] == [rt.python, "-I", str(d / "runtime" / rt.short / "launch.py"), "controller"]
    deadline = time.monotonic() + 120
    while record(d, "pr-0").state is not RunState.ended:
        assert time.monotonic() < deadline
        time.sleep(0.3)
        sweep("tick", "--campaign", str(d))
    rec = record(d, "pr-0")
    assert rec.outcome is Outcome.verified and rec.runtime_sha == rt.sha256
    log = (run_dir(d, "pr-0") / "logs" / "controller.out").read_text()
    assert f"runtime {rt.short}, sweep from {site / 'sweep'}" in log, log
    # the oracle sessions imported the frozen copy too
    sessions = run_dir(d, "pr-0") / "sessions"
    assert all(str(site) in (s / "argv.json").read_text() for s in sessions.iterdir())

    # pr-1 (held back by target_verified) gets a lease and a record naming a job, by hand
    rdir = run_dir(d, "pr-1")
    token, job_id = "feedface0001", "local-424242"
    assert acquire_lease(rdir, run_id="pr-1", token=token, holder="tick")
    hand_over_lease(rdir, token=token, job_id=job_id)
    queued = load_record(rdir).value
    save_record(rdir, queued.model_copy(update={"state": RunState.active, "job_id": job_id,
                                                "submit_token": token, "lane": "cpu"}))
    before, names = snapshot(rdir), sorted(os.listdir(rdir))
    env = {**os.environ, "SWEEP_JOB_ID": job_id}

    def refused(argv: list[str]) -> subprocess.CompletedProcess:
        r = subprocess.run([*argv, "--campaign", str(d), "--token", token, "pr-1"], capture_output=True,
                           text=True, timeout=60, env=env, cwd=rdir, stdin=subprocess.DEVNULL)
        assert r.returncode != 0, r
        assert "refusing to run a different runtime" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert snapshot(rdir) == before                  # no record change, lease untouched
        assert sorted(os.listdir(rdir)) == names         # nothing created (no spend.json, no source)
        return r

    # this installation, not the frozen copy (a hand-started or pre-freeze controller)
    refused([sys.executable, "-m", "sweep", "controller"])
    # the previous frozen runtime after a new one was frozen
    old = rt
    sweep("runtime", "freeze", "--force", "--wheel", str(other_wheel(sweep_wheel, tmp_path / "other")),
          "--campaign", str(d))
    assert current_runtime(d).sha256 != old.sha256
    refused([old.python, "-I", str(d / "runtime" / old.short / "launch.py"), "controller"])
    assert load_record(rdir).value.state is RunState.active and load_record(rdir).value.job_id == job_id
