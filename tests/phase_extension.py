"""sweep with one more phase, added the way docs/architecture.md says: one row and one function.

Run as `python tests/phase_extension.py <sweep arguments>`: it inserts the `dummy` row after the
review phase into the phase table and then runs sweep's own command line, so the tick, status and
the controller (the plan's `tick.controller_command` runs this file too) all know the phase.
Nothing else of sweep is edited or patched (tests/test_phase_table.py).

What the dummy phase does is set by <campaign>/dummy.json: {"findings": [...]} makes it ask for
a repair (or end the run with its row's failure once the repairs are spent); otherwise it passes.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from runstate.checkpoints import Checkpoint  # noqa: E402
from runstate.phases import PHASE_TABLE, PhaseRow  # noqa: E402


class DummyCheckpoint(Checkpoint):
    looked_at: int | None = None       # how many files of the bundle the phase looked at


# the one row (the function below is its runner)
ROW = PhaseRow("dummy", None, DummyCheckpoint, cleared_by_repair=True, failure="dummy_failed",
               runner="tests.phase_extension:dummy")


def dummy(ctx):
    """Look at the current bundle, write evidence, pass or ask for a repair (see dummy.json)."""
    from sweep.controller import phases
    from sweep.controller.context import write_json
    from sweep.harbor.bundle import bundle_sha256
    revision = phases._checkpoints(ctx).author_revision
    try:
        findings = orjson.loads((ctx.campaign.dir / "dummy.json").read_bytes()).get("findings", [])
    except FileNotFoundError:
        findings = []
    files = sorted(str(p.relative_to(ctx.paths.task)) for p in ctx.paths.task.rglob("*") if p.is_file())
    write_json(ctx.evidence_path("dummy", revision), {"files": files, "findings": findings, "at": time.time()})
    if findings:
        return phases._repair_or_end(ctx, "dummy", findings)
    sha = bundle_sha256(ctx.paths.task)
    return phases._after(ctx, "dummy"), DummyCheckpoint(bundle_sha256=sha, revision=revision, looked_at=len(files))


if __name__ == "__main__":
    PHASE_TABLE.insert(ROW, after="review")
    from sweep.cli import main
    sys.exit(main(sys.argv[1:]))
