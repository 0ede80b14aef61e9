"""The typed status report (sweep/status.py StatusReport): the JSON shape `sweep status --json` prints,
and the human view's cap on ended rows (it must not build one row per ended run, yet say how many).

Real `sweep init`, real ticks building the ended-runs index, real `sweep status` processes; the
campaign lives under /var/tmp.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from runstate.models import Outcome
from sweep.status import collect_status, render_status
from sweep.tick import run_tick
from tests.campaigns import payload_plan, sweep, write_plan
from tests.test_index import RACY_S, end

N = 12
# pr-000..pr-006 blocked (7), pr-007..pr-009 verified (3); pr-010, pr-011 stay queued
ENDED = {f"pr-{i:03d}": (Outcome.blocked if i < 7 else Outcome.verified) for i in range(10)}

# the keys of `sweep status --json`, in order (docs/cli.md): a change here is a change of the shape
JSON_KEYS = ["campaign", "lanes_backing_off", "name", "campaign_id", "isolation", "backend",
             "target_verified", "runs", "counts", "outcomes", "corrupt", "tick", "interval_s", "draining",
             "drain", "cooldowns", "provider_cooldowns", "sandboxes_uncertain", "active", "held", "errors", "ended", "held_leases",
             "attempts_spent", "interruptions", "interrupted_by", "spend", "causes", "breaker", "prior_verified",
             "queue"]


@pytest.fixture(scope="module")
def campaign():
    root = Path(tempfile.mkdtemp(prefix="sweep-status-report-", dir="/var/tmp"))
    plan = write_plan(root / "plan.json", payload_plan(N))
    d = root / "campaign"
    sweep("init", str(plan), "--campaign", str(d))
    sweep("drain", "--campaign", str(d))
    for rid, outcome in ENDED.items():
        end(d, rid, outcome, "no_tests" if outcome is Outcome.blocked else None, 0.5)
    time.sleep(RACY_S)
    assert run_tick(d).ran
    run_tick(d)                       # the index now vouches for the ended runs
    yield d
    shutil.rmtree(root, ignore_errors=True)


def test_json_keeps_its_shape_and_lists_every_ended_run(campaign):
    st = json.loads(sweep("status", "--json", "--campaign", str(campaign)).stdout)
    assert list(st) == JSON_KEYS
    assert [e["run_id"] for e in st["ended"]] == sorted(ENDED)
    assert st["outcomes"] == {"blocked": 7, "verified": 3} and st["counts"]["ended"] == 10
    assert st["spend"]["spent_usd"] == pytest.approx(5.0)
    assert set(st["ended"][0]) == {"run_id", "outcome", "reason", "lane", "cause", "quality"}
    every = json.loads(sweep("status", "--json", "--all", "--campaign", str(campaign)).stdout)
    assert list(every) == [*JSON_KEYS, "queued", "show_verified"]
    cut = json.loads(sweep("status", "--json", "--outcome", "verified", "--campaign", str(campaign)).stdout)
    assert [e["run_id"] for e in cut["ended"]] == ["pr-007", "pr-008", "pr-009"]
    assert cut["filters"] == "outcome=verified" and cut["outcomes"]["blocked"] == 7


def test_capped_human_view_keeps_the_first_rows_and_the_whole_counts(campaign):
    whole = collect_status(campaign)
    capped = collect_status(campaign, ended_limit=2)
    assert capped.ended_capped and not whole.ended_capped
    assert [e["run_id"] for e in capped.ended] == ["pr-000", "pr-001", "pr-007", "pr-008"]
    assert capped.outcomes == whole.outcomes and capped.counts == whole.counts
    assert "ended_capped" not in capped.as_json()
    # the text says how many more there are from the counts, as the uncapped view does
    assert render_status(capped, limit=2) == render_status(whole, limit=2)
    assert "... and 5 more" in render_status(capped, limit=2)


def test_plain_status_lists_what_the_capped_view_holds(campaign):
    out = sweep("status", "--campaign", str(campaign)).stdout
    assert "blocked:" in out and "pr-006" in out and "... and" not in out      # 7 < 20: all shown
    assert "runs: 12 runs" in out and "blocked 7" in out
