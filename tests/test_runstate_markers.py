"""Outage stamps (with clock skew), the drain latch, and model round-trips."""
import time

import orjson
from hypothesis import given, settings, strategies as st

from runstate import (DrainMarker, Event, Lease, OutageStamp, RunRecord, SpendLedger, TickReport,
                      active_cooldowns, clear_drain, is_draining, read_drain, read_outage,
                      request_drain, stamp_outage)
from runstate.files import dump_model, parse_model
from runstate.models import SpendEntry


def test_outage_and_throttle_cooldowns_are_decided_at_stamp_time(tmp_path):
    now = 1_000_000.0
    s = stamp_outage(tmp_path, "author", "outage", "HTTP 503 " * 200, now=now)
    assert s.cooldown_s == 45 * 60 and len(s.detail) <= 500
    t = stamp_outage(tmp_path, "solver", "throttle", "429", now=now)
    assert t.cooldown_s == 5 * 60
    assert set(active_cooldowns(tmp_path, ["author", "reviewer", "solver"], now + 60)) == {"author", "solver"}
    assert set(active_cooldowns(tmp_path, ["author", "solver"], now + 301)) == {"author"}
    assert active_cooldowns(tmp_path, ["author", "solver"], now + 45 * 60 + 1) == {}


def test_clock_skew_four_minutes_ahead_counts_ten_hours_does_not(tmp_path):
    now = time.time()
    stamp_outage(tmp_path, "author", "throttle", now=now + 4 * 60)
    stamp_outage(tmp_path, "reviewer", "outage", now=now + 10 * 3600)
    active = active_cooldowns(tmp_path, ["author", "reviewer"], now)
    assert "author" in active and "reviewer" not in active


def test_unreadable_stamp_counts_as_inactive(tmp_path):
    (tmp_path / "outage-author.json").write_bytes(b"{garbage")
    assert read_outage(tmp_path, "author").problem
    assert active_cooldowns(tmp_path, ["author"], time.time()) == {}


def test_drain_is_latched_until_cleared(tmp_path):
    assert not is_draining(tmp_path)
    m = request_drain(tmp_path, "upgrade to 0.2", who="alice@login1")
    assert is_draining(tmp_path)
    assert read_drain(tmp_path).value == m and m.reason == "upgrade to 0.2"
    assert is_draining(tmp_path)          # still, on any later read
    assert clear_drain(tmp_path) is True
    assert not is_draining(tmp_path) and clear_drain(tmp_path) is False


def test_corrupt_drain_marker_still_drains(tmp_path):
    (tmp_path / "drain-request.json").write_bytes(b"")
    assert is_draining(tmp_path)


finite = st.floats(min_value=0, max_value=4e9, allow_nan=False)
text = st.text(max_size=40)
run_ids = st.from_regex(r"[a-z0-9_-][a-z0-9._-]{0,20}", fullmatch=True)
roles = st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True)


def _roundtrip(model):
    raw = dump_model(model)
    loaded = parse_model(None, raw, type(model))
    assert loaded.ok, loaded.problem
    assert loaded.value == model
    # an older reader ignores keys it does not know
    data = orjson.loads(raw)
    data["added_by_a_newer_version"] = {"x": [1, 2]}
    assert parse_model(None, orjson.dumps(data), type(model)).value == model


@settings(max_examples=200, deadline=None)
@given(st.builds(RunRecord, run_id=run_ids, attempts=st.integers(0, 9), max_attempts=st.integers(1, 9),
                 job_id=st.none() | st.from_regex(r"[0-9]{1,8}", fullmatch=True), reason=st.none() | text,
                 gpus=st.integers(0, 8), created=finite, updated=finite, last_error=st.none() | text,
                 allocation_usd=st.none() | finite,
                 checkpoints=st.dictionaries(st.sampled_from(["intake", "author"]),
                                             st.dictionaries(st.text(max_size=5), st.integers(-2**63, 2**63 - 1)),
                                             max_size=2)))
def test_run_record_roundtrip(rec):
    _roundtrip(rec)


@settings(max_examples=100, deadline=None)
@given(st.builds(Lease, run_id=run_ids, token=text, holder=st.sampled_from(["tick", "job"]),
                 acquired_at=finite, heartbeat_at=finite, pid=st.none() | st.integers(1, 2**22)))
def test_lease_roundtrip(lease):
    _roundtrip(lease)


@settings(max_examples=100, deadline=None)
@given(st.builds(OutageStamp, role=roles, kind=st.sampled_from(["outage", "throttle"]),
                 detail=st.none() | st.text(max_size=400), stamped_at=finite, cooldown_s=finite))
def test_outage_roundtrip(stamp):
    _roundtrip(stamp)


@settings(max_examples=50, deadline=None)
@given(st.builds(DrainMarker, requested_by=text, requested_at=finite, reason=st.none() | text))
def test_drain_roundtrip(m):
    _roundtrip(m)


@settings(max_examples=50, deadline=None)
@given(st.builds(Event, run_id=run_ids, kind=text, ts=finite, detail=st.none() | st.text(max_size=100)))
def test_event_roundtrip(e):
    _roundtrip(e)


@settings(max_examples=50, deadline=None)
@given(st.builds(TickReport, started_at=finite, finished_at=finite, duration_s=finite,
                 squeue_known=st.booleans(), squeue_error=st.none() | text,
                 actions=st.lists(st.fixed_dictionaries({"kind": st.text(max_size=5), "run_id": st.text(max_size=5),
                                                          "detail": st.text(max_size=5)}), max_size=3)))
def test_tick_report_roundtrip(t):
    _roundtrip(t)


@settings(max_examples=50, deadline=None)
@given(st.builds(SpendLedger, run_id=run_ids,
                 entries=st.lists(st.builds(SpendEntry, op_id=text, what=text, reserved_usd=finite,
                                            actual_usd=st.none() | finite, at=finite), max_size=4)))
def test_spend_roundtrip(s):
    _roundtrip(s)
