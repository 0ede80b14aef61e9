"""Budget with several controllers spending at once (real jobs, real sessions, real spend.json files).

The tick grants each admitted run an allocation (its candidate cap, never more than the campaign
has left); each controller reserves `worker_reservation_usd` in its own spend.json before every
session and settles after. So the campaign's spend, summed over the runs' spend.json, stays within
`max_spend_usd` (plus only the recorded overruns of single sessions) without any shared lock.

Cost: a `command` agent that prints no usage line is charged its whole reservation (its cost is
unknown). To show an actual cost above the reservation (an overrun), the fake agent reports its
cost the way the `command` runtime reads it, a `{"sweep_usage": {"cost_usd": X}}` line on stdout.
"""
import json
import tempfile
from pathlib import Path

import pytest

from runstate import run_dir
from runstate.models import SpendLedger
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, count, events, local_plan, record, wait_until

EPS = 1e-9


@pytest.fixture
def hold():
    d = Path(tempfile.mkdtemp(prefix="sweep-test-hold-", dir="/var/tmp"))
    flag = d / "hold"
    flag.write_text("hold\n")
    yield flag
    flag.unlink(missing_ok=True)
    d.rmdir()


def ledger(d: Path, run_id: str) -> SpendLedger:
    path = run_dir(d, run_id) / "spend.json"
    return SpendLedger.model_validate_json(path.read_bytes()) if path.exists() else SpendLedger(run_id=run_id)


def campaign_spend(d: Path, run_ids: list[str]) -> float:
    return sum(ledger(d, r).committed_usd for r in run_ids)


def test_parallel_controllers_never_spend_past_the_campaign_cap(tmp_path, hold):
    cands = []
    for i in range(6):
        src = make_pr_repo(tmp_path / "repos", "verified", name=f"mathx{i}")
        options = {"author": agent_options("author", "--repo", src["repo"], f"--hold-while={hold}"),
                   "reviewer": agent_options("reviewer"), "solver": agent_options("solver")}
        cands.append(candidate(f"pr-{i}", src, runtime_options=options, max_spend_usd=0.8))
    runtimes = {"author": "command", "reviewer": "command", "solver": "command"}
    plan = local_plan(cands, defaults={"runtimes": runtimes, "worker_reservation_usd": 0.2},
                      max_spend_usd=2.0, max_parallel=3, cpu_slots=3)
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    runs = [c["id"] for c in cands]

    sweep("tick", "--campaign", str(d))
    active = runs[:3]
    assert [round(record(d, r).allocation_usd, 6) for r in active] == [0.8, 0.8, 0.4]
    assert all(record(d, r).allocation_usd is None for r in runs[3:])
    # three controllers hold a reservation at the same moment
    wait_until("three open author reservations at once",
               lambda: all(any(e.status == "reserved" for e in ledger(d, r).entries) for r in active), 60)
    assert campaign_spend(d, runs) <= 2.0 + EPS
    hold.unlink()

    peak = [0.0]

    def watch(_st):
        peak[0] = max(peak[0], campaign_spend(d, runs))

    st = tick_until_done(d, timeout=180, on_tick=watch)
    total = campaign_spend(d, runs)
    assert total <= 2.0 + EPS and peak[0] <= 2.0 + EPS, (total, peak)
    ended = {e["run_id"]: (e["outcome"], e["reason"]) for e in st["ended"]}
    assert ended["pr-0"] == ended["pr-1"] == ("verified", None), ended
    # 0.4 pays the author and the reviewer (0.2 each) but not the solver: a bundle, no rollout
    assert ended["pr-2"] == ("generated_unverified", "budget_exhausted")
    # nothing is left for them: nothing was spent on them
    for run_id in runs[3:]:
        assert ended[run_id] == ("blocked", "budget_exhausted"), ended
        assert ledger(d, run_id).committed_usd == 0.0 and count(events(d, run_id), "session_started") == 0
    for run_id in ("pr-0", "pr-1"):
        lg = ledger(d, run_id)
        # the command runtime cannot measure cost: each session is charged its reservation
        # (author, review, solver, rollout review)
        assert [(e.status, e.actual_usd) for e in lg.entries] == [("settled", 0.2)] * 4
        assert abs(record(d, run_id).spent_usd - 0.8) < EPS and not lg.overrun
    assert abs(ledger(d, "pr-2").committed_usd - 0.4) < EPS
    assert all(ledger(d, r).committed_usd <= (record(d, r).allocation_usd or 0) + EPS for r in runs)


def test_a_session_costing_more_than_its_reservation_stops_paid_work_on_that_run(tmp_path):
    cands = []
    for i, cost in enumerate(("0.5", "0.1")):
        src = make_pr_repo(tmp_path / "repos", "verified", name=f"mathx{i}")
        options = {"author": agent_options("author", "--repo", src["repo"], "--cost", cost),
                   "reviewer": agent_options("reviewer", "--cost", cost),
                   "solver": agent_options("solver", "--cost", cost)}
        cands.append(candidate(f"pr-{i}", src, runtime_options=options, max_spend_usd=1.0))
    runtimes = {"author": "command", "reviewer": "command", "solver": "command"}
    plan = local_plan(cands, defaults={"runtimes": runtimes, "worker_reservation_usd": 0.2},
                      max_spend_usd=2.0, max_parallel=2, cpu_slots=2)
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    st = tick_until_done(d, timeout=120)
    ended = {e["run_id"]: (e["outcome"], e["reason"]) for e in st["ended"]}

    over = ledger(d, "pr-0")
    assert over.overrun is True
    assert [(e.what.split()[0], e.status, e.actual_usd) for e in over.entries] == [("author", "settled", 0.5)]
    assert ended["pr-0"] == ("generated_unverified", "budget_exhausted")
    evs = events(d, "pr-0")
    assert count(evs, "session_started") == 1 and count(evs, "session_started", "review") == 0
    assert "cost more than its reservation" in next(e["detail"] for e in evs if e["kind"] == "ended")

    fine = ledger(d, "pr-1")
    assert ended["pr-1"] == ("verified", None) and not fine.overrun
    assert [e.actual_usd for e in fine.entries] == [0.1] * 4      # the last: the rollout review
    overruns = sum(max(0.0, (e.actual_usd or 0) - e.reserved_usd) for r in ("pr-0", "pr-1")
                   for e in ledger(d, r).entries)
    assert abs(overruns - 0.3) < EPS
    assert campaign_spend(d, ["pr-0", "pr-1"]) <= 2.0 + overruns + EPS
    assert json.loads((run_dir(d, "pr-0") / "spend.json").read_text())["overrun"] is True
