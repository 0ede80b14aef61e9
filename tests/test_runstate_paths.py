"""RunPaths: every file of a run directory named once; the id can never escape runs/."""
from __future__ import annotations

import pytest

from runstate import create_run_dir, load_record, save_record
from runstate.models import RunRecord
from runstate.paths import RunPaths
from runstate.runs import run_dir


def test_paths_match_what_the_writers_use(tmp_path):
    rdir = create_run_dir(tmp_path, "pr-1")
    paths = RunPaths(tmp_path, "pr-1")
    assert paths.dir == rdir == run_dir(tmp_path, "pr-1") and paths.run_id == "pr-1"
    save_record(rdir, RunRecord(run_id="pr-1"))
    assert paths.state.is_file() and load_record(paths.dir).value.run_id == "pr-1"
    assert paths.logs.is_dir() and paths.controller_out.parent == paths.logs
    assert paths.evidence_file("gates", 3).name == "gates-r0003.json"
    assert paths.evidence_file("gates", 3).parent == paths.evidence
    assert RunPaths.at(rdir) == paths and len({paths, RunPaths.at(rdir)}) == 1
    names = {p.name for p in (paths.state, paths.lease, paths.events, paths.spend, paths.candidate,
                              paths.source, paths.report, paths.task, paths.staged_task, paths.revisions,
                              paths.evidence, paths.sessions, paths.work, paths.logs)}
    assert len(names) == 14          # no two properties name the same file


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", "", ".hidden", "UPPER", "x" * 129])
def test_a_run_id_cannot_escape_runs(tmp_path, bad):
    with pytest.raises(ValueError):
        RunPaths(tmp_path, bad)


def test_campaign_paths_name_each_campaign_file_once_and_are_what_the_writers_use(tmp_path):
    """CampaignPaths: the one home of every campaign-level file name (tick.lock was spelled twice)."""
    from runstate.markers import outage_path, provider_outage_path, request_drain
    from runstate.paths import CampaignPaths
    from sweep.frozen import runtime_root
    from sweep.sandbox_marker import mark_uncertain
    paths = CampaignPaths(tmp_path)
    names = [p.name for p in (paths.campaign_file, paths.roles, paths.runtime, paths.runs, paths.tick_report,
                              paths.tick_lock, paths.queue, paths.ghosts, paths.lane_backoff, paths.drain, paths.outage("author"),
                              paths.provider_outage("modal"), paths.ended_index, paths.sandboxes_uncertain,
                              paths.local_jobs, paths.tick_log, paths.html_report)]
    assert len(set(names)) == len(names) == 17
    request_drain(tmp_path, who="test")
    mark_uncertain(tmp_path, "test")
    assert paths.drain.is_file() and paths.sandboxes_uncertain.is_file()
    assert outage_path(tmp_path, "author") == paths.outage("author")
    assert provider_outage_path(tmp_path, "modal") == paths.provider_outage("modal")
    assert runtime_root(tmp_path) == paths.runtime and paths.run("pr-1") == RunPaths(tmp_path, "pr-1")
    assert paths.role_manifest("solver") == paths.roles / "solver.toml"


def test_the_operator_verbs_and_the_tick_take_the_same_lock(tmp_path):
    """`sweep retry`/`abort` and `sweep tick` exclude each other through one file, named once."""
    from filelock import FileLock, Timeout
    from runstate.paths import CampaignPaths
    from sweep.operate import _TickLock
    held = FileLock(str(CampaignPaths(tmp_path).tick_lock), timeout=0)
    held.acquire()
    try:
        from runstate.errors import SweepError
        with pytest.raises(SweepError, match="tick.lock"):
            with _TickLock(tmp_path, 0.2):
                pass
    finally:
        held.release()
    with _TickLock(tmp_path, 0.2):
        with pytest.raises(Timeout):
            FileLock(str(CampaignPaths(tmp_path).tick_lock), timeout=0).acquire()


def test_the_schedulers_copy_of_the_local_jobs_name_is_the_paths_one():
    """sweep/scheduler keeps its own constant (its local launcher imports only the stdlib)."""
    from runstate.paths import LOCAL_JOBS_DIR
    from sweep.scheduler import LOCAL_JOBS_DIR as SCHEDULER_COPY
    assert SCHEDULER_COPY == LOCAL_JOBS_DIR
