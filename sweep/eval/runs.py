"""An evaluation directory is also a campaign the tick and the controller run (docs/eval.md).

`sweep eval init` writes, beside eval.json and the manifest, what a generation campaign's init
writes for the tick: campaign.toml (the evaluation plan's scheduler and lanes, max_parallel,
limits, isolation and secrets as `PlanSettings`, the rest at a generation plan's defaults) and one run
per cell, `runs/<cell>/state.json`, queued at the first phase of the evaluation phase table
(runstate/phases.py `EVAL_PHASE_TABLE`: `cell_solve`, then `cell_verify`), in manifest order
(`panel_index` = the cell's position, so the tick admits cells in the assignment's order). From
there each cell is a run like any other: an O_EXCL lease, admitted by `sweep tick` (files + one
queue call), its controller job submitted into the plan's lanes, checkpointed after its phases.
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

import orjson

from runstate.atomic import write_atomic
from runstate.models import RunRecord
from runstate.paths import CAMPAIGN_FILE
from runstate.phases import EVAL_PHASE_TABLE
from runstate.runs import create_run_dir, save_record
from sweep.eval.manifest import Manifest
from sweep.eval.plan import EvalPlan
from sweep.models.plan import CampaignFile, PlanSettings


def settings_of(plan: EvalPlan, n_cells: int) -> PlanSettings:
    """The settings the tick and the controllers read: the evaluation's, in a generation plan's
    fields. Every cell that ends has its result (target_verified: all of them)."""
    return PlanSettings(name=plan.name, target_verified=n_cells, max_parallel=plan.max_parallel,
                        max_attempts=plan.max_attempts, max_interruptions=plan.max_interruptions,
                        environment=plan.environment,
                        scheduler=plan.scheduler, isolation=plan.isolation, limits=plan.limits, secrets=plan.secrets,
                        providers=plan.providers)


def write_campaign(staging: Path, final: Path, plan: EvalPlan, manifest: Manifest,
                   families: dict[str, str | None]) -> None:
    """campaign.toml and one queued run per cell, into the staging directory init renames into place
    (`final` is the directory's name once renamed: the campaign id is derived from it). `families`:
    arm -> the key family its sessions use (None: none), carried by each of its cells' runs
    (RunRecord.key_family), so an endpoint failure parks a cell under its family's cooldown."""
    from sweep import __version__
    from sweep.tomlw import dumps_checked
    sha = hashlib.sha256(orjson.dumps(plan.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)).hexdigest()
    settings = settings_of(plan, len(manifest.cells))
    for cell in manifest.cells:
        rdir = create_run_dir(staging, cell.cell_id)
        record = RunRecord(run_id=cell.cell_id, panel_index=cell.position, phase=EVAL_PHASE_TABLE.first,
                           max_attempts=settings.max_attempts, max_interruptions=settings.max_interruptions,
                           key_family=families[cell.arm])
        save_record(rdir, record)
    campaign = CampaignFile(campaign_id=hashlib.sha256(f"{final}\0{sha}\0{time.time()}".encode()).hexdigest()[:8],
                            plan_sha256=sha, plan_file="plan.toml", created_at=time.time(), sweep_version=__version__,
                            candidate_count=len(manifest.cells), settings=settings)
    header = "# Frozen by `sweep eval init`: the settings the tick runs this evaluation's cells with.\n"
    write_atomic(staging / CAMPAIGN_FILE, (header + dumps_checked(campaign.model_dump(mode="json"))).encode())
