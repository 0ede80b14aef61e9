"""Evidence read back through its models: old dict-shaped files still read; malformed ones are
refused naming the file and the field (sweep/models/evidence.py)."""
from __future__ import annotations

import orjson
import pytest

from runstate.errors import StateError
from sweep.controller.intake import evidence_sha256, load_source
from sweep.models.evidence import Checkpoints, GatesEvidence, ReviewEvidence, SolveEvidence, read_evidence

# gates evidence as the controller wrote it before per-test evidence and hash seeds existed
OLD_GATES = {"bundle_sha256": "ab" * 32, "revision": 1, "repeats": 2, "passed": False,
             "gates": {"valid": {"ok": True, "detail": ""},
                       "reference": {"ok": False, "rewards": [1.0, 0.0], "detail": "flaky"},
                       "empty": {"ok": True, "rewards": [0.0, 0.0], "detail": ""},
                       "repeat": {"ok": False, "detail": "results differ between repeats: flaky"}},
             "environment_fidelity": "host", "at": 1.0}


def write(path, data):
    path.write_bytes(orjson.dumps(data))
    return path


def test_old_gates_evidence_reads_and_rewrites_in_the_same_shape(tmp_path):
    ev = read_evidence(write(tmp_path / "gates-r0001.json", OLD_GATES), GatesEvidence)
    assert ev.passed is False and ev.failed() == ["reference", "repeat"]
    assert ev.gates["reference"].rewards == [1.0, 0.0] and ev.hash_seeds == []
    assert ev.to_json() == OLD_GATES                       # nothing added, nothing dropped


def test_per_test_evidence_keeps_its_extra_keys(tmp_path):
    data = {**OLD_GATES, "gates": {"fail_to_pass": {"ok": True, "detail": "1 test", "fail_to_pass": ["t.a"],
                                                    "fail_to_pass_count": 1}}}
    ev = read_evidence(write(tmp_path / "g.json", data), GatesEvidence)
    assert ev.to_json()["gates"]["fail_to_pass"]["fail_to_pass"] == ["t.a"]


@pytest.mark.parametrize("model, data, field", [
    (GatesEvidence, {**OLD_GATES, "passed": "maybe"}, "passed"),
    (GatesEvidence, {**OLD_GATES, "gates": {"valid": {"detail": "no ok"}}}, "gates.valid.ok"),
    (ReviewEvidence, {"verdict": {"verdict": "accept"}}, "bundle_sha256"),
    (SolveEvidence, {"bundle_sha256": "x", "rollouts": [{"rollout": "first"}]}, "rollouts.0.rollout"),
])
def test_malformed_evidence_is_refused_naming_file_and_field(tmp_path, model, data, field):
    path = write(tmp_path / "bad.json", data)
    with pytest.raises(StateError) as info:
        read_evidence(path, model)
    assert str(path) in str(info.value) and field in str(info.value)


def test_missing_evidence_is_none(tmp_path):
    assert read_evidence(tmp_path / "none.json", GatesEvidence) is None


def test_checkpoints_of_existing_records_read_and_wrong_types_are_refused():
    old = {"intake": {"base": "a", "head": "b", "at": 1.0}, "author": {"revision": 2, "bundle_sha256": "s"},
           "gates": {"passed": True, "bundle_sha256": "s", "revision": 2},
           "review": {"verdict": "accept", "bundle_sha256": "s"}, "retry": {"count": 1, "after_revision": 1},
           "parks": {"author": 1}}
    cps = Checkpoints.of(old)
    assert cps.author_revision == 2 and cps.retry_after_revision == 1 and cps.gates.passed is True
    assert cps.review.verdict == "accept" and cps.solve is None
    assert Checkpoints.of({}).author_revision == 0
    with pytest.raises(StateError) as info:
        Checkpoints.of({"author": {"revision": "second"}}, where="runs/x/state.json")
    assert "author.revision" in str(info.value) and "runs/x/state.json" in str(info.value)


def _source(**kw):
    data = {"kind": "git", "url": None, "repo": "/r", "base": "a" * 40, "head": "b" * 40, "title": "t",
            "body": "", "changed_files": ["x.py"], **kw}
    data["evidence_sha256"] = evidence_sha256(data)
    return data


def test_source_json_of_an_older_sweep_reads_and_a_malformed_one_is_redone(tmp_path):
    write(tmp_path / "source.json", _source())            # no test_command / pr_key / frozen_at yet
    assert load_source(tmp_path).repo == "/r"
    bad = _source()
    del bad["repo"]
    bad["evidence_sha256"] = evidence_sha256(bad)          # checksum holds, shape does not
    write(tmp_path / "source.json", bad)
    assert load_source(tmp_path) is None


def test_tick_json_actions_read_through_their_type(tmp_path):
    from runstate.files import read_model
    from runstate.models import TickReport
    base = {"started_at": 1.0, "finished_at": 2.0, "duration_s": 1.0, "squeue_known": True}
    good = write(tmp_path / "tick.json", {**base, "actions": [{"kind": "admit", "run_id": "r1", "detail": "job 7"}]})
    assert read_model(good, TickReport).value.actions[0]["kind"] == "admit"
    bad = write(tmp_path / "bad.json", {**base, "actions": [{"kind": "admit", "detail": "job 7"}]})
    loaded = read_model(bad, TickReport)
    assert loaded.value is None and "actions.0.run_id" in loaded.problem


def test_review_and_session_evidence_read_through_their_models(tmp_path):
    from sweep.models.evidence import SessionRecord
    old_review = {"bundle_sha256": "s", "gates_bundle_sha256": "s",
                  "verdict": {"verdict": "revise", "findings": ["no FAIL_TO_PASS"], "rationale": "r", "extra": 1},
                  "at": 1.0}
    ev = read_evidence(write(tmp_path / "review-r0001.json", old_review), ReviewEvidence)
    assert ev.verdict.verdict == "revise" and ev.verdict.findings == ["no FAIL_TO_PASS"]
    assert ev.to_json() == old_review                      # a campaign schema's extra keys are kept
    assert read_evidence(write(tmp_path / "r.json", {"bundle_sha256": "s"}), ReviewEvidence).verdict.verdict is None
    # result.json of a session, as far as export reads it; older ones lack status and cost
    rec = read_evidence(write(tmp_path / "result.json", {"role": "author", "runtime": "oracle",
                                                         "manifest_sha256": "m" * 64, "turns": None}), SessionRecord)
    assert (rec.role, rec.runtime, rec.status) == ("author", "oracle", None)
    with pytest.raises(StateError) as info:
        read_evidence(write(tmp_path / "bad.json", {"role": ["author"]}), SessionRecord)
    assert "role" in str(info.value) and "bad.json" in str(info.value)


def test_evidence_is_written_with_its_schema_version_and_a_newer_one_is_refused_by_name(tmp_path):
    from sweep.models.evidence import EVIDENCE_SCHEMA_VERSION, SessionRecord
    ev = read_evidence(write(tmp_path / "gates-r0001.json", OLD_GATES), GatesEvidence)
    assert ev.schema_version == 0                          # written before versions: read as it was
    assert ev.for_disk() == {**OLD_GATES, "schema_version": EVIDENCE_SCHEMA_VERSION}
    newer = write(tmp_path / "gates-r0002.json", {**OLD_GATES, "schema_version": EVIDENCE_SCHEMA_VERSION + 1})
    with pytest.raises(StateError) as exc:
        read_evidence(newer, GatesEvidence)
    assert "gates-r0002.json" in str(exc.value) and "schema_version" in str(exc.value)
    assert "written by a newer sweep" in str(exc.value)
    # a session record keeps what it did not type, and carries the version too
    rec = SessionRecord.model_validate({"role": "author", "runtime": "oracle", "status": "ok", "rc": 0,
                                        "executed_argv": ["x"]}).for_disk()
    assert rec["schema_version"] == EVIDENCE_SCHEMA_VERSION and rec["rc"] == 0 and rec["executed_argv"] == ["x"]


def test_a_source_json_of_a_newer_sweep_is_refused_not_redone(tmp_path):
    from runstate.paths import SOURCE_FILE
    from sweep.models.evidence import EVIDENCE_SCHEMA_VERSION
    data = {"repo": "/r", "base": "a" * 40, "head": "b" * 40, "schema_version": EVIDENCE_SCHEMA_VERSION + 1}
    data["evidence_sha256"] = evidence_sha256(data)
    write(tmp_path / SOURCE_FILE, data)
    with pytest.raises(StateError, match="newer sweep"):
        load_source(tmp_path)
    data["schema_version"] = EVIDENCE_SCHEMA_VERSION
    data["evidence_sha256"] = evidence_sha256(data)
    write(tmp_path / SOURCE_FILE, data)
    assert load_source(tmp_path).head == "b" * 40


def test_the_readiness_evidence_is_written_through_its_model_with_the_check_s_fields(tmp_path):
    from sweep.models.evidence import EVIDENCE_SCHEMA_VERSION, ReadinessEvidence
    from sweep.readiness import Readiness
    ready = Readiness(ok=True, program="/usr/bin/python3", tests=4, duration_s=1.5)
    on_disk = ReadinessEvidence.model_validate({**ready.as_json(), "at": 2.0}).for_disk()
    # every field the check has, and nothing of its own the model drops
    assert on_disk == {**ready.as_json(), "at": 2.0, "schema_version": EVIDENCE_SCHEMA_VERSION}
    back = read_evidence(write(tmp_path / "readiness-r0000.json", on_disk), ReadinessEvidence)
    assert (back.ok, back.program, back.tests) == (True, "/usr/bin/python3", 4)
    newer = write(tmp_path / "readiness-r0001.json", {**on_disk, "schema_version": EVIDENCE_SCHEMA_VERSION + 1})
    with pytest.raises(StateError, match="newer sweep"):
        read_evidence(newer, ReadinessEvidence)
