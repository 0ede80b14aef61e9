"""What `sweep init` asks the cluster once, before any run exists (and `sweep doctor` again).

Two calls, each bounded: `sinfo -h -o %R|%G` (every partition and the GRES of its nodes) and
`scontrol show config` (for MessageTimeout). A lane whose partition the cluster does not have, or
a GPU lane whose partition has no GPU (of the requested type), is an error naming the plan field:
otherwise every run of that lane would burn a refused sbatch. When Slurm cannot be asked (no
client, slurmctld down) the checks are skipped with a warning: init must work on a machine that
only prepares the campaign, and the warning is one line: which command, what it said, what to
check. When the cluster cannot be reached at all (SLURM_CONF names no file, or sinfo fails) the
second call is not made: it would only wait as long again to say the same.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sweep.scheduler.base import Finding, Preflight
from sweep.scheduler.slurm.client import SlurmCallFailed, client_env, run_client

if TYPE_CHECKING:
    from sweep.models.lanes import SchedulerSettings

DEFAULT_MESSAGE_TIMEOUT_S = 10.0     # Slurm's default MessageTimeout


@dataclass
class ClusterFacts:
    partitions: dict[str, set[str]] = field(default_factory=dict)   # partition -> GRES entries ("gpu:a100:4")
    default_partition: str | None = None
    message_timeout_s: float | None = None
    problems: list[str] = field(default_factory=list)               # what could not be asked
    unreachable: str | None = None     # the cluster could not be reached at all: what said so


SINFO_ARGV = ["sinfo", "-h", "-o", "%R|%G|%P"]


def _first_line(text: str, limit: int = 200) -> str:
    """A client's message as one line: Slurm repeats itself ("retrying in 1sec") over many."""
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else "no message"
    return first if len(first) <= limit else first[:limit - 3] + "..."


def ask_cluster(*, env: Mapping[str, str] | None = None, timeout: float = 20.0) -> ClusterFacts:
    facts = ClusterFacts()
    conf = client_env(env).get("SLURM_CONF")
    if conf and not Path(conf).is_file():
        facts.unreachable = f"SLURM_CONF={conf} is not a file"
        facts.problems.append(facts.unreachable)
        return facts
    try:
        out = run_client(SINFO_ARGV, env=client_env(env), timeout=timeout)
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 2 or not parts[0]:
                continue
            gres = {g.strip() for g in re.split(r",(?![^()]*\))", parts[1]) if g.strip() and g.strip() != "(null)"}
            facts.partitions.setdefault(parts[0], set()).update(gres)
            if len(parts) > 2 and parts[2].endswith("*"):
                facts.default_partition = parts[0]
    except SlurmCallFailed as exc:
        where = f"SLURM_CONF={conf}" if conf else "SLURM_CONF unset"
        said = (f"gave no answer within {timeout:g} s" if exc.timed_out
                else f"said: {_first_line(exc.stderr or str(exc))}")
        facts.unreachable = f"`{' '.join(SINFO_ARGV)}` {said} ({where})"
        facts.problems.append(facts.unreachable)
        return facts
    try:
        out = run_client(["scontrol", "show", "config"], env=client_env(env), timeout=timeout)
        match = re.search(r"^\s*MessageTimeout\s*=\s*(\d+)", out, re.MULTILINE)
        if match:
            facts.message_timeout_s = float(match.group(1))
    except SlurmCallFailed as exc:
        facts.problems.append(f"`scontrol show config` said: {_first_line(str(exc))}")
    return facts


def _gpu_count(entry: str, gpu_type: str | None) -> int:
    m = re.match(r"^gpu(?::([^:(]+))?:(\d+)", entry)
    if not m:
        return 0
    if gpu_type and m.group(1) != gpu_type:
        return 0
    return int(m.group(2))


def check_lanes(scheduler_settings: SchedulerSettings, needs_gpu_lane: bool, max_gpus: int, facts: ClusterFacts) -> list[Finding]:
    """Lanes against what the cluster said (empty if it could not be asked: see facts.problems)."""
    out: list[Finding] = []
    if facts.unreachable:
        out.append(Finding("warning", "scheduler", f"cannot reach the Slurm cluster, so the lanes are not "
                           f"checked against it: {facts.unreachable}; check that SLURM_CONF names the "
                           "cluster's slurm.conf (or configless DNS works) and that `sinfo` answers"))
        return out
    if facts.problems and not facts.partitions:
        out.append(Finding("warning", "scheduler", "could not ask Slurm, so the lanes are not checked against "
                           "the cluster: " + "; ".join(facts.problems)))
        return out
    lanes = scheduler_settings.lanes
    for name, lane in (("cpu", lanes.cpu), ("gpu", lanes.gpu)):
        if name == "gpu" and not needs_gpu_lane:
            continue
        wanted = [p for p in (lane.partition or "").split(",") if p] or \
            ([facts.default_partition] if facts.default_partition else [])
        missing = [p for p in wanted if p not in facts.partitions]
        if missing:
            out.append(Finding("error", f"scheduler.lanes.{name}.partition",
                               f"the cluster has no partition {missing[0]!r} (it has: "
                               f"{', '.join(sorted(facts.partitions)) or 'none'})"))
            continue
        if name == "gpu":
            gpu_type = getattr(lane, "gpu_type", None)
            best = max((_gpu_count(g, gpu_type) for p in wanted for g in facts.partitions.get(p, ())), default=0)
            if best == 0:
                what = f"GPU of type {gpu_type!r}" if gpu_type else "GPU"
                out.append(Finding("error", "scheduler.lanes.gpu.partition",
                                   f"partition {', '.join(wanted)} has no node with a {what} "
                                   f"(GRES: {', '.join(sorted(g for p in wanted for g in facts.partitions[p])) or 'none'})"))
            elif best < max_gpus:
                out.append(Finding("error", "scheduler.lanes.gpu.partition",
                                   f"a candidate needs {max_gpus} GPUs, but no node of partition "
                                   f"{', '.join(wanted)} has more than {best}"))
    return out


def check_message_timeout(call_timeout_s: float, facts: ClusterFacts) -> list[Finding]:
    if facts.unreachable:
        return []       # said once, by check_lanes
    known = facts.message_timeout_s
    limit = known if known is not None else DEFAULT_MESSAGE_TIMEOUT_S
    if call_timeout_s > limit:
        return []
    source = "the cluster's" if known is not None else "Slurm's default"
    return [Finding("warning", "scheduler.call_timeout_seconds",
                    f"{call_timeout_s:g} s is not above {source} MessageTimeout ({limit:g} s): sweep would "
                    "give up on sbatch before Slurm does, and more submissions would end uncertain "
                    f"(set it to at least {limit * 2:g})")]


def preflight(scheduler_settings: SchedulerSettings, needs_gpu_lane: bool, max_gpus: int, *,
              env: Mapping[str, str] | None = None) -> Preflight:
    """init's and doctor's check: one sinfo and one scontrol, the lanes and MessageTimeout."""
    facts = ask_cluster(env=env, timeout=min(20.0, scheduler_settings.call_timeout_seconds))
    findings = check_lanes(scheduler_settings, needs_gpu_lane, max_gpus, facts) + \
        check_message_timeout(scheduler_settings.call_timeout_seconds, facts)
    checked = (f"lanes match the cluster's partitions and GRES; MessageTimeout "
               f"{facts.message_timeout_s or DEFAULT_MESSAGE_TIMEOUT_S:g} s < call_timeout_seconds "
               f"{scheduler_settings.call_timeout_seconds:g} s")
    return Preflight(findings, None if findings else checked)
