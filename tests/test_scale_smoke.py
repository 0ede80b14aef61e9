"""CI smoke check at N = 1,000 runs (correctness, not timing; the timings are in benchmarks/).

One real campaign of 1,000 runs made by `sweep init`, 900 of them ended (written as controllers
write them), ticked on the real local backend through a proxy that counts scheduler calls:
- exactly 1 queue call per tick, and 0 scheduler calls from `sweep status`;
- the second tick reads only the live runs' files (the index vouches for the 900 ended ones) and
  reports the same counts as a tick that reads everything;
- a corrupt index (garbage, then a torn tail) changes nothing a tick or status reports, and the
  next tick repairs it;
- `sweep status` stays import-light (no scheduler backend, no SDK) on this campaign.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from runstate.files import write_atomic
from runstate.index import INDEX_FILE, RACY_NS, load_index
from runstate.models import Outcome, RunRecord, RunState
from runstate.runs import list_runs, run_dir
from sweep.campaign import load_campaign
from sweep.status import collect_status
from sweep.tick import run_tick
from tests.campaigns import payload_plan, sweep, write_plan

REPO = Path(__file__).resolve().parents[1]
N, ENDED = 1000, 900
OUTCOMES = (Outcome.verified, Outcome.generated_unverified, Outcome.blocked)


class CountingScheduler:
    """The real scheduler, with every call counted (answers unchanged)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, Counter()

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*a, **kw):
            self.calls[name] += 1
            return attr(*a, **kw)
        return counted


@pytest.fixture(scope="module")
def campaign():
    root = Path(tempfile.mkdtemp(prefix="sweep-smoke-", dir="/var/tmp"))
    plan = write_plan(root / "plan.json", payload_plan(N))
    d = root / "campaign"
    sweep("init", str(plan), "--campaign", str(d), timeout=600)
    sweep("drain", "--campaign", str(d))            # read, plan, write; start no job
    old = time.time() - 3 * 3600                    # ended before the tick's stray window
    for i in range(ENDED):
        rid = f"pr-{i:03d}"
        outcome = OUTCOMES[i % 3]
        rec = RunRecord.model_validate_json((run_dir(d, rid) / "state.json").read_bytes())
        rec = rec.model_copy(update={"state": RunState.ended, "outcome": outcome, "spent_usd": 0.5,
                                     "reason": None if outcome is Outcome.verified else "no_tests",
                                     "updated": old})
        write_atomic(run_dir(d, rid) / "state.json", rec.model_dump_json().encode())
    time.sleep(RACY_NS / 1e9 + 0.1)
    yield d
    shutil.rmtree(root, ignore_errors=True)


def truth(d: Path) -> dict:
    return dict(Counter(r.state.value if r.outcome is None else f"ended:{r.outcome.value}"
                        for r in list_runs(d).records.values()))


def counted_tick(d: Path, **kw) -> tuple[dict, Counter]:
    c = load_campaign(d)
    from sweep.scheduler import make_scheduler
    proxy = CountingScheduler(make_scheduler(c.settings.scheduler, d, c.job_prefix))
    assert run_tick(d, scheduler=proxy, **kw).ran
    return json.loads((d / "tick.json").read_text()), proxy.calls


def test_one_queue_call_per_tick_and_only_live_runs_read(campaign):
    first, calls1 = counted_tick(campaign, full=True)
    second, calls2 = counted_tick(campaign)
    assert calls1["queue"] == 1 and calls2["queue"] == 1
    assert calls1["submit"] == calls2["submit"] == 0               # draining
    assert (first["runs_read"], first["runs_indexed"]) == (N, 0)
    assert (second["runs_read"], second["runs_indexed"]) == (N - ENDED, ENDED)
    assert second["counts"] == first["counts"] == truth(campaign)


def test_status_makes_no_scheduler_call_and_imports_no_backend(campaign, tmp_path):
    # sweep status in a fresh interpreter: any scheduler backend module imported would mean a call
    out = tmp_path / "modules.json"
    code = ("import json, sys\nfrom sweep.cli import main\nrc = main(['status', '--json', '--campaign', "
            f"{str(campaign)!r}])\njson.dump(sorted(sys.modules), open({str(out)!r}, 'w'))\nsys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    modules = json.loads(out.read_text())
    heavy = [m for m in modules if m.startswith(("sweep.scheduler.", "sweep.controller", "sweep.providers",
                                                 "modal", "daytona", "pyslurm"))]
    assert not heavy, heavy
    st = json.loads(r.stdout)
    assert st["runs"] == N and st["counts"]["ended"] == ENDED
    assert st["outcomes"] == {"verified": 300, "generated_unverified": 300, "blocked": 300}


def test_a_corrupt_or_torn_index_is_recovered(campaign):
    counted_tick(campaign)
    path = campaign / INDEX_FILE
    good = path.read_bytes()
    path.write_bytes(good[:-7])                                    # torn tail
    assert load_index(campaign).problem == "torn last line"
    st = collect_status(campaign)
    assert st.counts["ended"] == ENDED and st.runs == N
    report, calls = counted_tick(campaign)
    assert calls["queue"] == 1 and report["counts"] == truth(campaign)
    assert load_index(campaign).problem is None and len(load_index(campaign).entries) == ENDED
    path.write_bytes(b"garbage\x00" * 50)                          # garbage
    report, _ = counted_tick(campaign)
    assert report["runs_read"] == N and report["counts"] == truth(campaign)
    report, _ = counted_tick(campaign)
    assert report["runs_read"] == N - ENDED
