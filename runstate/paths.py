"""Where every file of a campaign's run directory lives: each one named once (docs/state.md).

`RunPaths(campaign_dir, run_id)` is the run directory `runs/<run_id>/` with one property per file
or folder in it, in the manner of submitit's JobPaths and Harbor's TrialPaths. Code that needs a
file of a run asks this object rather than spelling `rdir / "..."`; the bare names below are for
the few hot read paths that build strings without pathlib (the tick at 100,000 runs).

Stdlib only.
"""
from __future__ import annotations

import re
from pathlib import Path

RUNS_DIR = "runs"
STATE_FILE = "state.json"            # the record (runstate.models.RunRecord): atomic replace only
LEASE_FILE = "lease.json"            # who may write the record (runstate.lease): O_EXCL / CAS only
EVENTS_FILE = "events.jsonl"         # append-only history
SPEND_FILE = "spend.json"            # reservations and settlements (controller.budget)
CANDIDATE_FILE = "candidate.json"    # the candidate as `init` froze it
SOURCE_FILE = "source.json"          # the PR's frozen source (intake)
REPORT_FILE = "report.md"            # the human summary written at the ending
LOGS_DIR = "logs"                    # controller.out/.err, job scripts
TASK_DIR = "task"                    # the current task bundle
STAGED_TASK_DIR = ".task.staged"     # a bundle being installed (renamed to task/)
REVISIONS_DIR = "revisions"          # earlier bundles, NNNN/
EVIDENCE_DIR = "evidence"            # gates/review/solve/secret-scan evidence, -rNNNN.json
SESSIONS_DIR = "sessions"            # one NNNN-role/ folder per role session
WORK_DIR = "work"                    # scratch workspaces (authoring, trials)

_RUN_ID_RE = re.compile(r"^[a-z0-9_-][a-z0-9._-]{0,127}$")   # == runstate.models.RUN_ID_RE


class RunPaths:
    """The files of one run directory. `RunPaths(campaign_dir, run_id)` validates the id (it can
    never escape runs/); `RunPaths.at(rdir)` wraps a run directory already known."""

    __slots__ = ("dir",)

    def __init__(self, campaign_dir: str | Path, run_id: str) -> None:
        if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id):
            raise ValueError(f"invalid run id {run_id!r}")
        self.dir = Path(campaign_dir) / RUNS_DIR / run_id

    @classmethod
    def at(cls, rdir: str | Path) -> RunPaths:
        rdir = Path(rdir)
        return cls(rdir.parent.parent, rdir.name)

    def __repr__(self) -> str:
        return f"RunPaths({str(self.dir)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunPaths) and other.dir == self.dir

    def __hash__(self) -> int:
        return hash(self.dir)

    @property
    def run_id(self) -> str:
        return self.dir.name

    @property
    def state(self) -> Path:
        return self.dir / STATE_FILE

    @property
    def lease(self) -> Path:
        return self.dir / LEASE_FILE

    @property
    def events(self) -> Path:
        return self.dir / EVENTS_FILE

    @property
    def spend(self) -> Path:
        return self.dir / SPEND_FILE

    @property
    def candidate(self) -> Path:
        return self.dir / CANDIDATE_FILE

    @property
    def source(self) -> Path:
        return self.dir / SOURCE_FILE

    @property
    def report(self) -> Path:
        return self.dir / REPORT_FILE

    @property
    def logs(self) -> Path:
        return self.dir / LOGS_DIR

    @property
    def controller_out(self) -> Path:
        return self.logs / "controller.out"

    @property
    def controller_err(self) -> Path:
        return self.logs / "controller.err"

    def job_script(self, token: str) -> Path:
        return self.logs / f"job-{token}.sbatch"

    @property
    def task(self) -> Path:
        return self.dir / TASK_DIR

    @property
    def staged_task(self) -> Path:
        return self.dir / STAGED_TASK_DIR

    @property
    def revisions(self) -> Path:
        return self.dir / REVISIONS_DIR

    @property
    def evidence(self) -> Path:
        return self.dir / EVIDENCE_DIR

    def evidence_file(self, kind: str, revision: int) -> Path:
        """evidence/<kind>-rNNNN.json (kind: gates, review, solve, secret-scan)."""
        return self.evidence / f"{kind}-r{revision:04d}.json"

    @property
    def sessions(self) -> Path:
        return self.dir / SESSIONS_DIR

    @property
    def work(self) -> Path:
        return self.dir / WORK_DIR
