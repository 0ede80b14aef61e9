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
