"""The ended-runs index is a cache the files always overrule (runstate/index.py, docs/state.md).

Each crash point of docs/state.md "The ended-runs index" has a test here: a tick killed with
SIGKILL (a real subprocess) after a state.json write and before/inside the index update, a torn
index line, garbage or hostile index files, an index ahead of the files, an entry of a deleted run,
and a run re-opened behind the index's back. Campaigns live under /var/tmp (outside /tmp).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runstate import load_record, run_dir, save_record
from runstate.index import INDEX_FILE, RACY_NS, Ending, load_index
from runstate.models import Outcome, RunState
from runstate.runs import list_runs, scan_runs
from sweep.status import collect_status
from sweep.tick import run_tick
from tests.campaigns import payload_plan, sweep, write_plan

REPO = Path(__file__).resolve().parents[1]
RACY_S = RACY_NS / 1e9 + 0.1
ENDINGS = {"pr-000": (Outcome.verified, None, 1.5), "pr-001": (Outcome.blocked, "no_tests", 0.25),
           "pr-002": (Outcome.generated_unverified, "gates_failed", 2.0),
           "pr-003": (Outcome.verified, None, 0.0)}


@pytest.fixture
def campaign():
    root = Path(tempfile.mkdtemp(prefix="sweep-index-", dir="/var/tmp"))
    plan = write_plan(root / "plan.json", payload_plan(6))
    d = root / "campaign"
    sweep("init", str(plan), "--campaign", str(d))
    sweep("drain", "--campaign", str(d))       # the ticks read and plan but start no job
    for rid, (outcome, reason, spent) in ENDINGS.items():
        end(d, rid, outcome, reason, spent)
    time.sleep(RACY_S)
    yield d
    shutil.rmtree(root, ignore_errors=True)


def end(d: Path, rid: str, outcome: Outcome, reason: str | None, spent: float = 0.0,
        ago_s: float = 3 * 3600) -> None:
    """Write an ending as a controller would have, `ago_s` ago (past the tick's stray window)."""
    rdir = run_dir(d, rid)
    rec = load_record(rdir).value
    save_record(rdir, rec.model_copy(update={"state": RunState.ended, "outcome": outcome, "reason": reason,
                                             "spent_usd": spent, "updated": time.time() - ago_s}),
                touch=False)


def truth(d: Path) -> dict:
    """Counts straight from every state.json, no index."""
    listing = list_runs(d)
    counts: dict[str, int] = {}
    for rec in listing.records.values():
        key = rec.state.value if rec.outcome is None else f"ended:{rec.outcome.value}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def status_counts(d: Path) -> dict:
    st = collect_status(d)
    counts = {k: v for k, v in st.counts.items() if v and k != "ended"}
    counts.update({f"ended:{k}": v for k, v in st.outcomes.items() if v})
    return counts


def tick(d: Path, **kw) -> dict:
    out = run_tick(d, **kw)
    assert out.ran
    return json.loads((d / "tick.json").read_text())


def test_the_second_tick_reads_only_the_live_runs(campaign):
    first = tick(campaign)
    assert (first["runs_read"], first["runs_indexed"]) == (6, 0)
    assert sorted(load_index(campaign).entries) == sorted(ENDINGS)
    second = tick(campaign)
    assert (second["runs_read"], second["runs_indexed"]) == (2, 4)
    assert second["counts"] == first["counts"] == truth(campaign)
    assert status_counts(campaign) == truth(campaign)
    st = collect_status(campaign)
    assert st.runs == 6
    assert {e["run_id"]: e["reason"] for e in st.ended} == {r: v[1] for r, v in ENDINGS.items()}
    assert {e["lane"] for e in st.ended} == {"cpu"}


def test_the_budget_and_target_see_indexed_runs(campaign):
    tick(campaign)
    scan = scan_runs(campaign)
    assert sum(e.spent_usd for e in scan.settled.values()) == pytest.approx(3.75)
    assert sum(e.outcome == "verified" for e in scan.settled.values()) == 2


def test_a_run_reopened_behind_the_index_is_read_again(campaign):
    tick(campaign)
    rdir = run_dir(campaign, "pr-001")
    rec = load_record(rdir).value      # what a `retry` does: write state.json, tell nobody
    save_record(rdir, rec.model_copy(update={"state": RunState.queued, "outcome": None, "reason": None,
                                             "attempts": 0}))
    assert status_counts(campaign) == truth(campaign)
    assert status_counts(campaign)["queued"] == 3
    report = tick(campaign)
    assert report["runs_read"] == 3 and report["runs_indexed"] == 3
    assert "pr-001" not in load_index(campaign).entries
    assert report["counts"] == truth(campaign)


def test_sweep_retry_reopens_an_indexed_run_and_the_tick_sees_it(campaign):
    tick(campaign)
    assert "pr-002" in load_index(campaign).entries
    sweep("retry", "pr-002", "--reason", "index test", "--campaign", str(campaign))
    st = collect_status(campaign)
    assert st.counts["queued"] == 3 and "generated_unverified" not in st.outcomes
    report = tick(campaign)
    assert report["counts"] == truth(campaign) and report["counts"]["queued"] == 3
    assert "pr-002" not in load_index(campaign).entries


def test_an_ending_rewritten_with_another_outcome_is_seen(campaign):
    tick(campaign)
    end(campaign, "pr-000", Outcome.blocked, "review_rejected")
    st = collect_status(campaign)
    assert st.outcomes["verified"] == 1 and st.outcomes["blocked"] == 2
    time.sleep(RACY_S)
    tick(campaign)
    assert load_index(campaign).entries["pr-000"].reason == "review_rejected"


def test_a_racy_ending_waits_for_the_next_tick(campaign):
    end(campaign, "pr-004", Outcome.blocked, "no_tests")        # just written: same clock tick risk
    tick(campaign)
    assert "pr-004" not in load_index(campaign).entries
    assert sorted(load_index(campaign).entries) == sorted(ENDINGS)
    time.sleep(RACY_S)
    tick(campaign)
    assert "pr-004" in load_index(campaign).entries


def test_a_recent_ending_is_read_until_the_stray_window_has_passed(campaign):
    end(campaign, "pr-004", Outcome.blocked, "no_tests", ago_s=60)
    time.sleep(RACY_S)
    tick(campaign)
    assert "pr-004" not in load_index(campaign).entries and "pr-000" in load_index(campaign).entries


def test_an_ended_run_still_holding_a_lease_is_not_indexed(campaign):
    from runstate import acquire_lease
    acquire_lease(run_dir(campaign, "pr-002"), run_id="pr-002", token="t0k3n", holder="tick",
                  now=time.time() - 10)
    tick(campaign)
    assert "pr-002" not in load_index(campaign).entries
    assert collect_status(campaign).held_leases == 1


def test_an_ending_whose_job_is_still_queued_is_not_indexed(campaign):
    from sweep.tick.observe import new_endings
    from sweep.tick.plan import QueueJob, RunView, Snapshot
    scan = scan_runs(campaign, use_index=False)
    runs = {rid: RunView(rec) for rid, rec in scan.records.items()}
    job = QueueJob("42", "sw.x.tok.pr-000")
    pr0 = scan.records["pr-000"].model_copy(update={"job_id": "42"})
    scan.records["pr-000"] = pr0
    snap = Snapshot(now=time.time(), queue_known=True, queue={"42": job}, runs=runs)
    assert sorted(e.run_id for e in new_endings(scan, snap)) == ["pr-001", "pr-002", "pr-003"]
    unknown = Snapshot(now=time.time(), queue_known=False, queue={}, runs=runs)
    assert new_endings(scan, unknown) == []


def test_a_torn_index_line_is_ignored_and_the_index_rebuilt(campaign):
    tick(campaign)
    path = campaign / INDEX_FILE
    raw = path.read_bytes()
    path.write_bytes(raw[:-20])                      # the tail of the last entry is gone
    index = load_index(campaign)
    assert index.problem == "torn last line" and len(index.entries) == 3
    assert status_counts(campaign) == truth(campaign)
    report = tick(campaign)
    assert report["runs_read"] == 3 and report["counts"] == truth(campaign)
    again = load_index(campaign)
    assert again.problem is None and sorted(again.entries) == sorted(ENDINGS)
    assert path.read_bytes().endswith(b"\n")


@pytest.mark.parametrize("hostile", ["garbage", "no-header", "bad-line", "fifo", "symlink", "directory"])
def test_a_corrupt_index_is_rebuilt_from_the_files(campaign, hostile):
    tick(campaign)
    path = campaign / INDEX_FILE
    good = path.read_bytes()
    path.unlink()
    if hostile == "garbage":
        path.write_bytes(b"\x00\xff" * 100)
    elif hostile == "no-header":
        path.write_bytes(good.split(b"\n", 1)[1])
    elif hostile == "bad-line":
        lines = good.split(b"\n")
        lines.insert(2, b'["pr-005", "not", "an", "entry"]')
        path.write_bytes(b"\n".join(lines))
    elif hostile == "fifo":
        os.mkfifo(path)
    elif hostile == "symlink":
        os.symlink("/dev/zero", path)
    else:
        path.mkdir()
    assert load_index(campaign).problem
    assert status_counts(campaign) == truth(campaign)
    if hostile == "directory":
        report = tick(campaign)         # cannot be replaced by a rename: reported, tick still done
        assert any("index not updated" in e for e in report["errors"]) and report["counts"] == truth(campaign)
        return
    report = tick(campaign)
    assert report["counts"] == truth(campaign)
    assert load_index(campaign).problem is None and sorted(load_index(campaign).entries) == sorted(ENDINGS)
    assert tick(campaign)["runs_read"] == 2


def test_an_index_ahead_of_the_files_is_overruled(campaign):
    """The index claims an ending the files do not hold: a lost state.json write (power cut after
    the index line reached the disk) leaves the older state.json, whose identity differs."""
    tick(campaign)
    rid = "pr-005"
    old = os.stat(run_dir(campaign, rid) / "state.json")
    rec = load_record(run_dir(campaign, rid)).value
    save_record(run_dir(campaign, rid), rec)      # a later version; the index will name the older one
    claim = Ending(rid, (old.st_ino, old.st_size, old.st_mtime_ns, old.st_ctime_ns), "verified", None, 9.0, "cpu")
    made_up = Ending("pr-004", (1, 2, 3, 4), "verified", None, 9.0, "cpu")
    with open(campaign / INDEX_FILE, "ab") as f:
        f.write(json.dumps(claim.line()).encode() + b"\n" + json.dumps(made_up.line()).encode() + b"\n")
    assert status_counts(campaign) == truth(campaign)
    assert collect_status(campaign).outcomes["verified"] == 2
    report = tick(campaign)
    assert report["counts"] == truth(campaign)
    assert {"pr-004", "pr-005"}.isdisjoint(load_index(campaign).entries)


def test_an_entry_of_a_deleted_run_is_dropped(campaign):
    tick(campaign)
    shutil.rmtree(run_dir(campaign, "pr-003"))
    st = collect_status(campaign)
    assert st.runs == 5 and st.outcomes["verified"] == 1
    report = tick(campaign)
    assert report["runs_read"] == 2 and report["runs_indexed"] == 3
    assert "pr-003" not in load_index(campaign).entries


def test_full_tick_reads_everything_and_rewrites_the_index(campaign):
    tick(campaign)
    with open(campaign / INDEX_FILE, "ab") as f:
        f.write(b'["pr-000"]\n["pr-000"]\n')
    report = tick(campaign, full=True)
    assert (report["runs_read"], report["runs_indexed"]) == (6, 0)
    assert (campaign / INDEX_FILE).read_bytes().count(b"\n") == 5       # header + 4 entries
    r = sweep("tick", "--full", "--campaign", str(campaign))
    assert r.returncode == 0


# ---- SIGKILL with a real subprocess ------------------------------------------------------------

KILLER = """
import os, signal, sys, time
campaign, where = sys.argv[1], sys.argv[2]
from pathlib import Path
from runstate import load_record, run_dir, save_record
from runstate.models import Outcome, RunState
import runstate.index as index
# the state.json write: pr-004 ends (as its controller would write it)
rdir = run_dir(Path(campaign), "pr-004")
rec = load_record(rdir).value
save_record(rdir, rec.model_copy(update={"state": RunState.ended, "outcome": Outcome.blocked,
                                         "reason": "no_tests", "updated": time.time() - 3 * 3600}),
            touch=False)
time.sleep(%(racy)r)
real_append = index.append_index

def killed_append(campaign, new, forget):
    assert new, "the tick should have had a new ending to index"
    if where == "inside":
        data = b"".join(index.orjson.dumps(e.line()) + b"\\n" for e in new)
        fd = os.open(index.index_path(campaign), os.O_WRONLY | os.O_APPEND)
        os.write(fd, data[: len(data) // 2])          # half of the lines reach the file
    os.kill(os.getpid(), signal.SIGKILL)
index.append_index = killed_append
from sweep.cli import main
main(["tick", "--campaign", campaign])
"""


@pytest.mark.parametrize("where", ["before", "inside"])
def test_a_tick_killed_at_the_index_update_leaves_a_recoverable_campaign(campaign, where):
    tick(campaign)                                           # the index exists with 4 entries
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", KILLER % {"racy": RACY_S}, str(campaign), where],
                       env=env, cwd=REPO, capture_output=True, timeout=120)
    assert r.returncode == -9, r.stderr.decode()
    assert load_record(run_dir(campaign, "pr-004")).value.state is RunState.ended
    index = load_index(campaign)
    assert "pr-004" not in index.entries
    assert (index.problem == "torn last line") == (where == "inside")
    # a fresh status and a fresh tick (real processes) see the truth and repair the index
    st = json.loads(sweep("status", "--json", "--campaign", str(campaign)).stdout)
    assert st["outcomes"] == {"verified": 2, "blocked": 2, "generated_unverified": 1}
    sweep("tick", "--campaign", str(campaign))
    report = json.loads((campaign / "tick.json").read_text())
    assert report["counts"] == truth(campaign)
    after = load_index(campaign)
    assert after.problem is None and "pr-004" in after.entries
    sweep("tick", "--campaign", str(campaign))
    assert json.loads((campaign / "tick.json").read_text())["runs_read"] == 1


def test_the_index_keeps_the_quality_summary_status_shows(campaign):
    rdir = run_dir(campaign, "pr-005")
    rec = load_record(rdir).value
    save_record(rdir, rec.model_copy(update={
        "state": RunState.ended, "outcome": Outcome.generated_unverified, "reason": "weak_tests",
        "checkpoints": {"probes": {"killed": 3, "run": 4, "passed": False}}, "updated": time.time() - 3 * 3600}),
        touch=False)
    time.sleep(RACY_S)
    tick(campaign)
    entry = load_index(campaign).entries["pr-005"]
    assert entry.quality == "mutants 3/4" and load_index(campaign).entries["pr-000"].quality is None
    rows = {r["run_id"]: r for r in collect_status(campaign).ended}
    assert rows["pr-005"]["quality"] == "mutants 3/4" and rows["pr-000"]["quality"] is None
    assert "[mutants 3/4]" in sweep("status", "--campaign", str(campaign)).stdout
    # the summary is an eleventh field only when there is one (lines without it read as before)
    assert len(entry.line()) == 11 and len(load_index(campaign).entries["pr-000"].line()) == 10
