"""The controller's context carries the campaign as one handle (directory + campaign.toml) and the
run's files as RunPaths: what it writes lands in that campaign's run directory."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from runstate.markers import outage_path, stamp_outage
from runstate.models import RunState
from runstate.runs import load_record, read_events, save_record
from sweep.campaign import Campaign, init_campaign, load_candidate
from sweep.controller.budget import Budget
from sweep.controller.context import Ctx, clear_cooldown_after_success
from tests.campaigns import payload_plan, write_plan


def _ctx(tmp_path: Path) -> Ctx:
    camp = tmp_path / "camp"
    init_campaign(write_plan(tmp_path / "plan.json", payload_plan(1)), camp)
    campaign = Campaign.load(camp)
    paths = campaign.run("pr-000")
    record = load_record(paths.dir).value
    assert record is not None
    record = save_record(paths.dir, record.model_copy(update={"state": RunState.active, "job_id": "77", "submit_token": "tok"}))
    return Ctx(campaign, paths, "tok", "77", record, Budget(paths.dir, "pr-000", None), load_candidate(paths.dir))


def test_ctx_has_one_campaign_handle_not_a_directory_and_settings_apart(tmp_path):
    ctx = _ctx(tmp_path)
    names = {f.name for f in dataclasses.fields(Ctx)}
    assert {"campaign", "paths"} <= names and not names & {"campaign_dir", "rdir", "run_id"}
    assert isinstance(ctx.campaign, Campaign)
    assert ctx.campaign.dir == (tmp_path / "camp").resolve()
    assert ctx.campaign.settings is ctx.campaign.file.settings
    assert ctx.run_id == "pr-000" and ctx.paths.dir == ctx.campaign.dir / "runs" / "pr-000"


def test_ctx_writes_into_its_campaigns_run_directory(tmp_path):
    ctx = _ctx(tmp_path)
    ctx.save(last_error="seen")
    assert load_record(ctx.paths.dir).value.last_error == "seen"
    ctx.event("probe", detail="from the context")
    assert any(e.kind == "probe" for e in read_events(ctx.paths.dir)[0])
    # a cooldown that has passed is cleared from the campaign directory after a success
    stamp_outage(ctx.campaign.dir, "author", "outage", "x", now=time.time() - 10_000, cooldown_s=1)
    clear_cooldown_after_success(ctx, "author")
    assert not outage_path(ctx.campaign.dir, "author").exists()


def test_report_reads_the_checkpoints_through_their_model(tmp_path):
    from runstate.models import Outcome
    from sweep.controller.report import write_report
    ctx = _ctx(tmp_path)
    old = {"intake": {"base": "a" * 40, "head": "b" * 40, "evidence_sha256": "c" * 64, "changed_files": 2, "at": 1.0},
           "author": {"revision": 2, "bundle_sha256": "s"}, "gates": {"passed": True, "bundle_sha256": "s"},
           "repair": {"count": 1, "findings": ["x"], "after": "review", "at": 2.0}, "parks": {"author": 1}}
    rec = ctx.record.model_copy(update={"checkpoints": old, "outcome": Outcome.verified})
    write_report(ctx, rec, "done")
    text = ctx.paths.report.read_text()
    assert f"- base `{'a' * 40}`, head `{'b' * 40}`" in text and f"evidence sha256 `{'c' * 64}`" in text
    assert "- **author**: {'revision': 2, 'bundle_sha256': 's'}" in text
    assert "- **gates**: {'bundle_sha256': 's', 'passed': True}" in text
    assert "- repairs: 1 (last after review)" in text and "**solve**" not in text
    # checkpoints a reader cannot take for what they claim: the report is still written, naming the field
    bad = ctx.record.model_copy(update={"checkpoints": {"author": {"revision": "second"}}, "outcome": Outcome.blocked})
    write_report(ctx, bad, "ended")
    text = ctx.paths.report.read_text()
    assert "ended" in text and "author.revision" in text and str(ctx.paths.state) in text


def test_a_provider_park_stamps_the_providers_cooldown_not_the_roles(tmp_path):
    from runstate.markers import read_provider_stamps
    from sweep.controller.context import provider_park
    from sweep.controller.pipeline import _park
    ctx = _ctx(tmp_path)
    assert provider_park("solver", "daytona", error_class="failure", detail="400") is None
    assert provider_park("solver", "daytona", error_class="config", detail="401") is None
    park = provider_park("solver", "daytona", error_class="outage", detail="HTTP 503")
    assert park is not None and park.provider == "daytona"
    assert _park(ctx, park) == 0
    stamps = read_provider_stamps(ctx.campaign.dir)
    assert stamps["daytona"].kind == "outage" and stamps["daytona"].stamped_by == "job:77"
    assert not outage_path(ctx.campaign.dir, "solver").exists()          # no run on local waits
    rec = load_record(ctx.paths.dir).value
    assert rec.state is RunState.queued and rec.parked_until == stamps["daytona"].until
    assert "outage in provider daytona" in (rec.last_error or "")
    stalled = provider_park("reviewer", "modal", stalled_s=600)
    assert stalled is not None and stalled.kind == "outage" and "stalled" in stalled.detail
