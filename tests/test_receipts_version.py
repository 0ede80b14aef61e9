"""A sandbox receipt is written and read through one model, stamped with its schema version: an
older one (no version) reads, one a newer sweep wrote is refused naming the file and the version,
and reconcile counts it unreadable (so it never terminates that receipt's sandbox). No SDK, no
provider call: the refusal happens before any."""
from __future__ import annotations

import json

import pytest

from runstate.atomic import make_private_dir
from runstate.errors import StateError
from sweep.providers.receipts import (RECEIPT_SCHEMA_VERSION, Receipt, new_tags, read_receipt, receipt_path,
                                      reconcile, settle)


@pytest.fixture
def receipt(tmp_path):
    run_dir = make_private_dir(make_private_dir(tmp_path / "c" / "runs") / "r1")
    tags = new_tags(campaign_id="ab12cd34", run_id="r1", job_id="77", role="solver", attempt=1)
    r = Receipt(instance=tags["sweep.instance"], name="sweep-x", provider="daytona", tags=tags, state="requested")
    settle(run_dir, r, "created", "made")
    return run_dir, r, receipt_path(run_dir, r.instance)


def test_a_written_receipt_carries_its_version_and_reads_back_the_same(receipt):
    _, r, path = receipt
    assert json.loads(path.read_text())["schema_version"] == RECEIPT_SCHEMA_VERSION == 1
    assert read_receipt(path) == r


def test_a_receipt_without_a_version_reads_as_before_and_is_stamped_when_settled(receipt):
    run_dir, _, path = receipt
    data = json.loads(path.read_text())
    del data["schema_version"]
    path.write_text(json.dumps(data))
    old = read_receipt(path)
    assert old.schema_version == 0 and old.state == "created"
    settle(run_dir, old, "terminated", "gone now")
    assert json.loads(path.read_text())["schema_version"] == RECEIPT_SCHEMA_VERSION


def test_a_newer_receipt_is_refused_by_name_and_reconcile_leaves_it_alone(receipt, tmp_path):
    _, _, path = receipt
    data = json.loads(path.read_text())
    data["schema_version"] = RECEIPT_SCHEMA_VERSION + 1
    path.write_text(json.dumps(data))
    with pytest.raises(StateError) as exc:
        read_receipt(path)
    assert exc.value.path == str(path) and exc.value.field == "schema_version"
    assert f"schema_version {RECEIPT_SCHEMA_VERSION + 1}" in exc.value.message and "newer sweep" in exc.value.message

    def no_provider(name, options):
        raise AssertionError("reconcile must not reach a provider for a receipt it cannot read")

    rep = reconcile(tmp_path / "c", "ab12cd34", queue_known=True, live_jobs=set(), provider_for=no_provider,
                    dry_run=True)
    assert rep.unreadable == [str(path)] and rep.terminated == [] and rep.uncertain
