"""The one squeue call of a tick: its exact argv and the parser of its output.

`--Format` (not `-o`) because `%b` shows only per-node GRES: a `--gpus=N` job prints `N/A`
there and its request is only visible as `tres-per-job`. Each field is `Name:|` (width 0 = printed
whole, never truncated or padded, with `|` appended), and the job name comes last so a foreign
job's name containing `|` cannot shift the other columns.
"""
from __future__ import annotations

import re

from sweep.scheduler.base import JobInfo, parse_gpu_count

FIELDS = ("JobID", "State", "Partition", "tres-per-node", "tres-per-job", "Reason", "Name")
FORMAT = ",".join(f"{f}:|" for f in FIELDS[:-1]) + f",{FIELDS[-1]}:"
_JOB_ID_RE = re.compile(r"\d+(?:_\d+|_\[[^\]]*\])?(?:\+\d+)?")
_STATE_RE = re.compile(r"[A-Z_]+")


def squeue_argv(user_mode: str, user: str) -> list[str]:
    """squeue for this user's jobs only (--me, or -u USER on clients that refuse --me)."""
    who = ["--me"] if user_mode == "me" else ["--user", user]
    return ["squeue", *who, "--noheader", f"--Format={FORMAT}"]


class SqueueParseError(ValueError):
    pass


def parse_squeue(text: str, name_prefix: str) -> list[JobInfo]:
    """This campaign's jobs in squeue's output (names starting with `name_prefix`).

    Foreign lines that do not parse (another tool's job with a newline in its name) are skipped;
    a line that mentions our prefix and does not parse raises SqueueParseError, because guessing
    would risk reporting one of our own jobs as gone.
    """
    jobs: list[JobInfo] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|", len(FIELDS) - 1)
        parsed = _parse_fields(fields)
        if parsed is None:
            if name_prefix in line:
                raise SqueueParseError(f"unexpected squeue line: {line!r}")
            continue
        if parsed.name.startswith(name_prefix):
            jobs.append(parsed)
    return jobs


def _parse_fields(fields: list[str]) -> JobInfo | None:
    if len(fields) != len(FIELDS):
        return None
    job_id, state, partition, per_node, per_job, reason = (f.strip() for f in fields[:-1])
    name = fields[-1].rstrip()   # a padded last column would only add trailing spaces
    if not _JOB_ID_RE.fullmatch(job_id) or not _STATE_RE.fullmatch(state):
        return None
    gres = ",".join(t for t in (per_node, per_job) if t and t != "N/A")
    return JobInfo(job_id=job_id, name=name, state=state, reason=reason, partition=partition,
                   gres=gres, gpus=parse_gpu_count(per_node, per_job))
