"""The read path refuses what would stall or exhaust a tick: a state.json or lease.json that is a
symlink (to /dev/zero: read forever), a FIFO (no writer: the open or read blocks forever), a device,
a directory, or a file over the size cap. That one run is reported corrupt; every other run proceeds.

The campaigns live under /var/tmp (not /tmp), and `sweep tick` / `sweep status` run as real
subprocesses with a timeout, so a hang or a MemoryError fails the test instead of passing by luck.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from runstate.files import MAX_RECORD_BYTES, RefusedFile, read_bytes, read_model, read_raw
from runstate.lease import read_lease_at
from runstate.models import RunRecord
from runstate.runs import list_runs
from tests.campaigns import payload_plan, sweep, write_plan

OUTSIDE_TMP = Path("/var/tmp")


@pytest.fixture
def scratch():
    d = Path(tempfile.mkdtemp(prefix="sweep-readpath-", dir=OUTSIDE_TMP))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _big(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(MAX_RECORD_BYTES + 1)     # sparse: over the cap without writing 4 MB


def _dir(path: Path) -> None:
    path.mkdir()


def _mknod_null(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3))     # a character device: /dev/null's numbers


HOSTILE = {
    "symlink-to-dev-zero": lambda p: os.symlink("/dev/zero", p),
    "symlink-to-a-good-file": lambda p: os.symlink(p.with_name("candidate.json"), p),
    "fifo": lambda p: os.mkfifo(p, 0o600),
    "device": _mknod_null,
    "directory": _dir,
    "over-the-cap": _big,
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_read_bytes_refuses_without_blocking(scratch, kind):
    path = scratch / "state.json"
    (scratch / "candidate.json").write_text("{}")
    HOSTILE[kind](path)
    with pytest.raises(RefusedFile) as exc:
        read_raw(str(path))
    assert "refused" in str(exc.value)
    loaded = read_model(path, RunRecord)
    assert loaded.value is None and "refused" in loaded.problem


def test_a_regular_file_under_the_cap_still_reads(scratch):
    path = scratch / "f.json"
    path.write_bytes(b"x" * 100_000)
    assert read_bytes(path) == b"x" * 100_000
    assert read_bytes(scratch / "absent") is None


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_lease_is_corrupt_not_fatal(scratch, kind):
    (scratch / "candidate.json").write_text("{}")
    path = scratch / "lease.json"
    HOSTILE[kind](path)
    view = read_lease_at(str(path))
    assert view is not None and view.corrupt and "refused" in view.problem
    assert view.mtime > 0


@pytest.fixture
def small_campaign(scratch):
    plan = write_plan(scratch / "plan.json", payload_plan(4, max_parallel=1))
    campaign = scratch / "campaign"
    sweep("init", str(plan), "--campaign", str(campaign))
    sweep("drain", "--campaign", str(campaign))     # the tick reads everything and starts no job
    return campaign


@pytest.mark.parametrize("file", ["state.json", "lease.json"])
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_tick_and_status_report_the_one_run_and_carry_on(small_campaign, file, kind):
    victim = small_campaign / "runs" / "pr-001" / file
    victim.unlink(missing_ok=True)
    HOSTILE[kind](victim)
    t = time.monotonic()
    tick = sweep("tick", "--campaign", str(small_campaign), timeout=60)
    st = json.loads(sweep("status", "--json", "--campaign", str(small_campaign), timeout=60).stdout)
    assert time.monotonic() - t < 60
    report = json.loads((small_campaign / "tick.json").read_text())
    if file == "state.json":
        assert "pr-001" in st["corrupt"] and "refused" in st["corrupt"]["pr-001"], st["corrupt"]
        assert any(c.startswith("pr-001: ") and "refused" in c for c in report["corrupt"]), report
        assert st["runs"] == 3 and st["counts"]["queued"] == 3        # the other three proceed
        assert report["runs_read"] == 4
    else:
        assert st["corrupt"] == {} and st["runs"] == 4
        assert st["held_leases"] == 1          # a refused lease still counts as held until reaped
    assert tick.returncode == 0 and "tick " in tick.stdout, tick.stdout


def test_list_runs_reports_a_fifo_state_and_reads_the_rest(scratch):
    from runstate import RunRecord, create_run_dir, save_record
    for rid in ("a", "b", "c"):
        save_record(create_run_dir(scratch, rid), RunRecord(run_id=rid))
    (scratch / "runs" / "b" / "state.json").unlink()
    os.mkfifo(scratch / "runs" / "b" / "state.json")
    listing = list_runs(scratch)
    assert sorted(listing.records) == ["a", "c"]
    assert "refused: a FIFO" in listing.corrupt["b"]


@pytest.mark.parametrize("kind", ["fifo", "symlink-to-dev-zero"])
def test_a_hostile_events_file_is_skipped_by_the_history_reader(scratch, kind):
    from runstate.runs import read_events
    (scratch / "candidate.json").write_text("{}")
    HOSTILE[kind](scratch / "events.jsonl")
    assert read_events(scratch) == ([], 1)
