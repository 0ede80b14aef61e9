"""Readers never raise for bad content; writers are atomic and refuse impossible records."""
import os
import stat

import orjson
import pytest

from runstate import (RunRecord, RunState, Outcome, StateError, create_run_dir, list_runs,
                      load_record, save_record)
from runstate.files import read_model, write_atomic
from runstate.models import DrainMarker, Lease, OutageStamp, TickReport, SpendLedger, Event
from runstate.runs import append_event, read_events

BAD_CONTENTS = {
    "empty": b"",
    "blank": b"   \n",
    "truncated": b'{"run_id": "a", "state": "que',
    "garbage": b"\x00\xff not json at all",
    "array": b"[1, 2, 3]",
    "string": b'"hello"',
    "number": b"42",
    "wrong-type": orjson.dumps({k: [1] for k in ("run_id", "requested_by", "role", "started_at",
                                                 "token", "kind", "attempts")}),
    "missing-field": b'{"state": "queued"}',
}


@pytest.mark.parametrize("model", [RunRecord, Lease, OutageStamp, DrainMarker, TickReport, SpendLedger])
@pytest.mark.parametrize("kind", sorted(BAD_CONTENTS))
def test_every_reader_reports_bad_files_without_raising(tmp_path, model, kind):
    path = tmp_path / "f.json"
    path.write_bytes(BAD_CONTENTS[kind])
    loaded = read_model(path, model)
    assert loaded.value is None
    assert loaded.problem and loaded.problem != "missing"
    assert not loaded.missing


@pytest.mark.parametrize("model", [RunRecord, Lease, OutageStamp, DrainMarker, TickReport, SpendLedger])
def test_missing_file_is_reported_as_missing(tmp_path, model):
    loaded = read_model(tmp_path / "absent.json", model)
    assert loaded.missing and loaded.value is None and loaded.problem == "missing"


def test_unreadable_path_is_a_problem_not_an_exception(tmp_path):
    (tmp_path / "dir.json").mkdir()
    loaded = read_model(tmp_path / "dir.json", RunRecord)
    assert loaded.value is None and "unreadable" in loaded.problem


def test_unknown_keys_are_ignored(tmp_path):
    d = create_run_dir(tmp_path, "r1")
    (d / "state.json").write_bytes(orjson.dumps({"run_id": "r1", "state": "queued",
                                                 "from_the_future": {"x": 1}, "schema_version": 9}))
    loaded = load_record(d)
    assert loaded.ok and loaded.value.state is RunState.queued


def test_save_refuses_impossible_records_and_leaves_disk_unchanged(tmp_path):
    d = create_run_dir(tmp_path, "r1")
    save_record(d, RunRecord(run_id="r1"))
    before = (d / "state.json").read_bytes()
    impossible = [
        RunRecord(run_id="r1", state="ended"),                                  # no outcome
        RunRecord(run_id="r1", state="ended", outcome="blocked"),               # no reason
        RunRecord(run_id="r1", state="queued", outcome="verified"),             # outcome while queued
        RunRecord(run_id="r1", state="active", submit_token="t"),               # no job id
        RunRecord(run_id="r1", state="active", job_id="7"),                     # no token
        RunRecord(run_id="r1", parked_until=5.0),                               # park without role
        RunRecord(run_id="r1", attempts=-1),
        RunRecord(run_id="r1", gpus=-2),
    ]
    for rec in impossible:
        with pytest.raises(StateError):
            save_record(d, rec)
        assert (d / "state.json").read_bytes() == before
    with pytest.raises(StateError):
        save_record(d, RunRecord(run_id="other"))
    ok = save_record(d, RunRecord(run_id="r1", state="ended", outcome="blocked", reason="max_attempted"))
    assert load_record(d).value.outcome is Outcome.blocked and ok.reason == "max_attempted"


@pytest.mark.parametrize("update", [{"state": "bogus"}, {"attempts": "many"}, {"max_attempts": "x"},
                                    {"outcome": "maybe", "state": "ended"}, {"gpus": None}])
def test_save_refuses_an_invalid_copy(tmp_path, update):
    """model_copy(update=...) skips validation; save_record re-validates before writing."""
    d = create_run_dir(tmp_path, "r1")
    save_record(d, RunRecord(run_id="r1"))
    before = (d / "state.json").read_bytes()
    bad = load_record(d).value.model_copy(update=update)
    with pytest.raises(StateError) as info:
        save_record(d, bad, touch=False)
    assert next(iter(update)) in str(info.value)
    assert (d / "state.json").read_bytes() == before


@pytest.mark.parametrize("bad", [".hidden", "UPPER", "a/b", "a b", "x" * 129, "", "..", "a;rm -rf /",
                                 "$(id)", "é"])
def test_run_ids_are_validated(tmp_path, bad):
    with pytest.raises(ValueError):
        RunRecord(run_id=bad)
    with pytest.raises(ValueError):
        create_run_dir(tmp_path, bad)


def test_permissions_private(tmp_path):
    d = create_run_dir(tmp_path, "r1")
    save_record(d, RunRecord(run_id="r1"))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "logs").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "state.json").st_mode) == 0o600
    append_event(d, Event(run_id="r1", kind="x"))
    assert stat.S_IMODE(os.stat(d / "events.jsonl").st_mode) == 0o600


def test_list_runs_reports_corrupt_and_skips_non_runs(tmp_path):
    for rid in ("a", "b", "c"):
        save_record(create_run_dir(tmp_path, rid), RunRecord(run_id=rid))
    (tmp_path / "runs" / "b" / "state.json").write_bytes(b'{"run_id": "b", "sta')
    (tmp_path / "runs" / "README").write_text("not a run")
    (tmp_path / "runs" / ".hidden").mkdir()
    (tmp_path / "runs" / "Not-A-Run").mkdir()
    (tmp_path / "runs" / "empty-folder").mkdir()
    (tmp_path / "runs" / "a" / ".state.json.tmp.host.1.abcd").write_bytes(b"half")
    (tmp_path / "runs" / "c" / "state.json").write_bytes(orjson.dumps({"run_id": "zzz"}))
    listing = list_runs(tmp_path)
    assert sorted(listing.records) == ["a"]
    assert sorted(listing.corrupt) == ["b", "c"]
    assert "JSON" in listing.corrupt["b"] and "does not match" in listing.corrupt["c"]


def test_list_runs_on_a_campaign_without_runs(tmp_path):
    listing = list_runs(tmp_path / "nothing-here")
    assert listing.records == {} and listing.corrupt == {}


def test_events_append_and_skip_a_torn_last_line(tmp_path):
    d = create_run_dir(tmp_path, "r1")
    for i in range(3):
        append_event(d, Event(run_id="r1", kind=f"k{i}"))
    with open(d / "events.jsonl", "ab") as f:
        f.write(b'{"run_id": "r1", "ki')           # a crash mid-line
    events, skipped = read_events(d)
    assert [e.kind for e in events] == ["k0", "k1", "k2"] and skipped == 1


def test_write_atomic_leaves_no_temp_file(tmp_path):
    p = tmp_path / "x.json"
    write_atomic(p, b"{}")
    write_atomic(p, b'{"a": 1}')
    assert sorted(os.listdir(tmp_path)) == ["x.json"]
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600


def test_remove_dead_temps_takes_only_a_dead_writers_temp_on_this_host(tmp_path):
    """A killed writer's temp goes; a live writer's (an atomic write in flight) and another host's stay."""
    import subprocess
    import sys

    from runstate.atomic import _HOST, remove_dead_temps
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    p = tmp_path / "tasks.jsonl"
    names = {"dead": f".tasks.jsonl.tmp.{_HOST}.{dead}.0badc0de",
             "live": f".tasks.jsonl.tmp.{_HOST}.{os.getpid()}.0badc0de",
             "other host": f".tasks.jsonl.tmp.{_HOST}x.{dead}.0badc0de",
             "another file": f".README.md.tmp.{_HOST}.{dead}.0badc0de"}
    for name in names.values():
        (tmp_path / name).write_text("half")
    assert remove_dead_temps(p) == [names["dead"]]
    assert sorted(os.listdir(tmp_path)) == sorted(n for k, n in names.items() if k != "dead")
