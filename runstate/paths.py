"""Where every file of a campaign lives: each one named once (docs/state.md).

`CampaignPaths(campaign_dir)` is the campaign directory with one property per campaign-level file
or folder (campaign.toml, the tick's lock and report, markers, stamps, the ended-runs index, ...),
and `RunPaths(campaign_dir, run_id)` is the run directory `runs/<run_id>/` with one property per
file or folder in it, in the manner of submitit's JobPaths and Harbor's TrialPaths. Code that needs
a file asks these objects rather than spelling `dir / "..."` (a loaded campaign carries its
CampaignPaths as `Campaign.paths`); the bare names below are for the few hot read paths that build
strings without pathlib (the tick at 100,000 runs) and for messages that name a file.

Stdlib only.
"""
from __future__ import annotations

import re
from pathlib import Path

# ---- campaign-level files -----------------------------------------------------------------------
CAMPAIGN_FILE = "campaign.toml"      # the frozen plan (sweep.models.plan.CampaignFile), written by init
ROLES_DIR = "roles"                  # the campaign's copy of the role manifests
RUNTIME_DIR = "runtime"              # the frozen runtime (sweep runtime freeze)
TICK_FILE = "tick.json"              # what the last tick saw and did (runstate.models.TickReport)
LOCK_FILE = "tick.lock"              # one tick (or operator verb) at a time
QUEUE_FILE = "queue.json"            # the last tick's queue read (runstate.models.QueueFile)
GHOSTS_FILE = "ghosts.json"          # the tick's memory of jobs no lease recognises
LANE_BACKOFF_FILE = "lane-backoff.json"   # lanes whose submissions were refused
DRAIN_FILE = "drain-request.json"    # latched until `sweep undrain`
OUTAGE_PREFIX = "outage-"            # outage-<role>.json: a role's cooldown
PROVIDER_PREFIX = "provider-outage-"  # provider-outage-<provider>.json: a remote provider's cooldown
INDEX_FILE = "ended-index.jsonl"     # the ended-runs index (a cache, never the truth)
UNCERTAIN_FILE = "sandboxes-uncertain.json"   # remote sandboxes may be orphaned: admission stops
LOCAL_JOBS_DIR = "local-jobs"        # the local scheduler backend's job records
TICK_LOG = "tick.log"                # the scrontab entry's output (written by Slurm)
HTML_REPORT = "report.html"          # `sweep report`'s default output
PLAN_INPUTS = ("plan.toml", "plan.json")   # a plan kept beside campaign.toml by the operator (init allows it)

# ---- run-level files ------------------------------------------------------------------------------
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


class CampaignPaths:
    """The campaign-level files of one campaign directory."""

    __slots__ = ("dir",)

    def __init__(self, campaign_dir: str | Path) -> None:
        self.dir = Path(campaign_dir)

    def __repr__(self) -> str:
        return f"CampaignPaths({str(self.dir)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CampaignPaths) and other.dir == self.dir

    def __hash__(self) -> int:
        return hash(self.dir)

    @property
    def campaign_file(self) -> Path:
        return self.dir / CAMPAIGN_FILE

    @property
    def roles(self) -> Path:
        return self.dir / ROLES_DIR

    def role_manifest(self, role: str) -> Path:
        return self.roles / f"{role}.toml"

    @property
    def runtime(self) -> Path:
        return self.dir / RUNTIME_DIR

    @property
    def runs(self) -> Path:
        return self.dir / RUNS_DIR

    def run(self, run_id: str) -> RunPaths:
        return RunPaths(self.dir, run_id)

    @property
    def tick_report(self) -> Path:
        return self.dir / TICK_FILE

    @property
    def tick_lock(self) -> Path:
        return self.dir / LOCK_FILE

    @property
    def queue(self) -> Path:
        return self.dir / QUEUE_FILE

    @property
    def ghosts(self) -> Path:
        return self.dir / GHOSTS_FILE

    @property
    def lane_backoff(self) -> Path:
        return self.dir / LANE_BACKOFF_FILE

    @property
    def drain(self) -> Path:
        return self.dir / DRAIN_FILE

    def outage(self, role: str) -> Path:
        """outage-<role>.json (the caller validates the role name: it becomes a file name)."""
        return self.dir / f"{OUTAGE_PREFIX}{role}.json"

    def provider_outage(self, provider: str) -> Path:
        """provider-outage-<provider>.json (the caller validates the provider name)."""
        return self.dir / f"{PROVIDER_PREFIX}{provider}.json"

    @property
    def ended_index(self) -> Path:
        return self.dir / INDEX_FILE

    @property
    def sandboxes_uncertain(self) -> Path:
        return self.dir / UNCERTAIN_FILE

    @property
    def local_jobs(self) -> Path:
        return self.dir / LOCAL_JOBS_DIR

    @property
    def tick_log(self) -> Path:
        return self.dir / TICK_LOG

    @property
    def html_report(self) -> Path:
        return self.dir / HTML_REPORT


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
        """evidence/<kind>-rNNNN.json (kind: gates, probes, review, solve, secret-scan, readiness)."""
        return self.evidence / f"{kind}-r{revision:04d}.json"

    @property
    def sessions(self) -> Path:
        return self.dir / SESSIONS_DIR

    @property
    def work(self) -> Path:
        return self.dir / WORK_DIR
