"""How a controller job ended, asked of Slurm only when the tick or the job itself needs to know.

Two questions, each one bounded call, never a loop:

- **The tick** (`end_states`): which end state did these vanished jobs reach? ONE `sacct` call for
  all jobs that vanished on that tick, and only when some did. PREEMPTED, NODE_FAIL, TIMEOUT (and
  BOOT_FAIL) mean the run was interrupted through no fault of its own; FAILED, OUT_OF_MEMORY,
  CANCELLED, COMPLETED mean its attempt counts. Sites without accounting storage answer
  "accounting storage is disabled": that is `available=False`, and the tick then counts the
  vanished run as an attempt and says why. A cluster without slurmdbd but with
  `JobCompType=jobcomp/filetxt` can still answer through `sacct -c` (the `jobcomp` setting).
- **The controller** (`stop_cause`): why is this job being stopped? ONE `scontrol show job
  $SLURM_JOB_ID` at the moment SIGTERM arrives, while the job still exists. Measured on Slurm
  22.05 (docs/slurm.md has the table): a preempted job shows `PreemptTime=<time>`, a job that
  Slurm is requeueing shows `Restarts` above the job's own `SLURM_RESTART_COUNT`, a failed node
  shows `JobState=NODE_FAIL`/`Reason=NodeDown`, the time limit `Reason=TimeLimit`, and a plain
  `scancel` none of these.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from sweep.scheduler.base import EndStates, StopCause
from sweep.scheduler.slurm.client import SlurmCallFailed, client_env, run_client

_JOB_ID_RE = re.compile(r"\d+(?:_\d+)?")
# what sacct says on a site that keeps no record of ended jobs (plain sacct / sacct -c)
_DISABLED = ("accounting storage is disabled", "job completion is disabled")
SCONTROL_TIMEOUT_S = 3.0     # inside the test cluster's KillWait (5 s), far inside Slurm's default 30 s


def sacct_argv(job_ids: Iterable[str], source: str) -> list[str]:
    """`sacct` for `job_ids`: allocations only (-X), parsable, latest record of each id."""
    ids = ",".join(sorted(set(job_ids)))
    argv = ["sacct", "-X", "-n", "-P", f"--jobs={ids}", "--format=JobID,State"]
    if source == "jobcomp":
        argv.insert(1, "-c")      # read JobCompLoc (jobcomp/filetxt) instead of slurmdbd
    return argv


def parse_sacct(text: str, wanted: Iterable[str]) -> dict[str, str]:
    """job id -> state; the last line of an id wins (a requeued job has one record per run)."""
    want = set(wanted)
    states: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2:
            continue
        job_id, state = parts[0].strip(), parts[1].strip()
        if job_id in want and state:
            states[job_id] = state.split()[0].rstrip("+")   # "CANCELLED by 1000" -> "CANCELLED"
    return states


def end_states(job_ids: Iterable[str], *, source: str = "sacct", env: Mapping[str, str] | None = None,
               timeout: float = 20.0) -> EndStates:
    """ONE bounded accounting call for `job_ids`; never raises for a Slurm problem."""
    ids = sorted({j for j in job_ids if _JOB_ID_RE.fullmatch(j)})
    if not ids:
        return EndStates()
    if source == "none":
        return EndStates.unavailable("[scheduler] accounting = \"none\"")
    try:
        out = run_client(sacct_argv(ids, source), env=client_env(env), timeout=timeout)
    except SlurmCallFailed as exc:
        if any(text in str(exc) for text in _DISABLED):
            return EndStates.unavailable(f"this cluster keeps no job accounting ({exc})")
        return EndStates(asked=True, known=False, error=str(exc))
    return EndStates(asked=True, known=True, states=parse_sacct(out, ids))


# ---- the controller's question --------------------------------------------------------------

def parse_scontrol_job(text: str) -> dict[str, str]:
    """`scontrol show job` output -> {Key: value} (values up to the next space)."""
    return dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", text))


def classify_stop(fields: Mapping[str, str], restart_count: int) -> StopCause:
    state = fields.get("JobState", "?")
    reason = fields.get("Reason", "None")
    seen = f"JobState={state} Reason={reason}"
    try:
        restarts = int(fields.get("Restarts", "0"))
    except ValueError:
        restarts = 0
    preempt_time = fields.get("PreemptTime", "None")
    if restarts > restart_count:
        return StopCause("requeued", f"Slurm requeues the job ({seen} Restarts={restarts})", requeued=True)
    if preempt_time not in ("None", "Unknown", ""):
        return StopCause("preempted", f"preempted at {preempt_time} ({seen})")
    if state in ("NODE_FAIL", "BOOT_FAIL") or reason in ("NodeDown", "NodeFail"):
        return StopCause("node_fail", f"the node failed ({seen})")
    if state in ("TIMEOUT", "DEADLINE") or reason == "TimeLimit":
        return StopCause("time_limit", f"the time limit was reached ({seen})")
    if state in ("CANCELLED", "COMPLETING", "RUNNING"):
        return StopCause("cancelled", f"cancelled ({seen})")
    return StopCause("unknown", f"cause unknown ({seen})")


def stop_cause(job_id: str, restart_count: int, *, env: Mapping[str, str] | None = None,
               timeout: float = SCONTROL_TIMEOUT_S) -> StopCause:
    """Why this job is being stopped: ONE `scontrol show job`, bounded; `unknown` if unanswered."""
    if not _JOB_ID_RE.fullmatch(job_id or ""):
        return StopCause("unknown", f"not a Slurm job id: {job_id!r}")
    try:
        out = run_client(["scontrol", "show", "job", job_id], env=client_env(env), timeout=timeout)
    except SlurmCallFailed as exc:
        return StopCause("unknown", f"scontrol unanswered: {exc}")
    return classify_stop(parse_scontrol_job(out), restart_count)
