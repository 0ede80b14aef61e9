"""What the controller's driver (pipeline.py) and its phases (phases.py) share.

The run's context (`Ctx`), the control-flow exceptions a phase raises to say how the attempt
stops, and the controller's exit codes live here so that phases.py and pipeline.py both import
this module and neither imports the other at module level.
"""
from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import orjson

from runstate.errors import StateError
from runstate.files import make_private_dir, write_atomic
from runstate.lease import LeaseLost
from runstate.markers import read_outage
from runstate.paths import RunPaths
from runstate.models import Event, Outcome, RunRecord, RunState
from runstate.runs import append_event, load_record, save_record
from sweep import textsafe
from sweep.controller.budget import Budget
from roles import RoleSpec
from sweep.campaign import Campaign
from sweep.execution import Provider
from sweep.models.plan import FrozenCandidate
from sweep.redact import Redactor


class ExitCode(IntEnum):
    """`sweep controller`'s exit status (the scheduler records it; the tick never acts on it)."""

    ok = 0                  # the run reached an ending, a park, a failed attempt or a checkpoint stop
    not_holder = 3          # the lease is not this submission's, or another job holds it: did nothing
    never_recorded = 4      # the record never named this job: gave the lease back, did nothing
    lease_lost = 5          # the lease was lost mid-run: stopped without writing


# ---- how a controller stops -------------------------------------------------------------------

class Interrupted(BaseException):
    """SIGTERM (scancel, preemption, time limit), SIGUSR1 (the time-limit warning) or a lost
    lease: stop now, at a safe point."""


@dataclass
class Ending(Exception):
    outcome: Outcome
    reason: str | None         # an EndReason, or a phase's failure from the phase table
    detail: str = ""
    cause: str | None = None   # a runstate/causes.py code when the phase knows it (else derived)


@dataclass
class Park(Exception):
    role: str
    kind: str
    detail: str
    also: tuple[str, ...] = ()      # more roles to stamp (a config failure stops the whole key family)
    provider: str | None = None     # a remote provider's outage/throttle/stall: ITS cooldown is stamped
                                    # (provider-outage-<name>.json), not the role's: only runs on it wait


def provider_park(role: str, provider: str, *, error_class: str | None = None, detail: str = "",
                  stalled_s: float | None = None) -> Park | None:
    """The park for a remote provider's trouble during `role` (a session, gates, trials), or None
    when it is not the provider's fault: an `outage` or `throttle` (SandboxError.error_class)
    parks the run under that provider's cooldown, and so does an exec stopped as `stalled` (no
    output for `stalled_s`); `config` and `failure` are not parks."""
    if stalled_s is not None:
        return Park(role, "outage", f"{provider}: no output for {stalled_s:.0f} s (stalled) {detail}".strip(),
                    provider=provider)
    if error_class in ("outage", "throttle"):
        return Park(role, error_class, f"{provider}: {detail}", provider=provider)
    return None


@dataclass
class AttemptFailed(Exception):
    detail: str
    cause: str | None = None   # a runstate/causes.py code when the phase knows it (else derived)


@dataclass
class Ctx:
    campaign: Campaign                 # the campaign's directory and its campaign.toml, one handle
    paths: RunPaths                    # this run's directory and its files
    token: str
    job_id: str
    record: RunRecord
    budget: Budget
    candidate_file: FrozenCandidate | None     # None for an evaluation cell (docs/eval.md): no candidate
    stop_reason: str | None = None
    stop_signal: int | None = None     # SIGUSR1 = the time-limit warning (see pipeline.establish_stop_cause)
    lease_lost: bool = False
    interrupting: bool = False
    roles_cache: tuple[dict[str, RoleSpec], dict[str, str]] | None = field(default=None, repr=False)
    provider_cache: Provider | None = field(default=None, repr=False)   # the sandbox provider, probed once per job

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @property
    def candidate(self) -> FrozenCandidate:
        """The run's candidate (candidate.json); only a generation run has one."""
        if self.candidate_file is None:
            raise StateError("an evaluation cell has no candidate", path=self.paths.dir)
        return self.candidate_file

    def evidence_path(self, kind: str, revision: int) -> Path:
        """evidence/<kind>-rNNNN.json, its folder created (0700) if needed."""
        make_private_dir(self.paths.evidence)
        return self.paths.evidence_file(kind, revision)

    def say(self, text: str) -> None:
        text = textsafe.line(Redactor().scrub(text))     # controller.out is read on a terminal
        print(f"[{time.strftime('%H:%M:%S')}] {self.run_id}: {text}", file=sys.stdout, flush=True)

    def event(self, kind: str, **kw: Any) -> None:
        kw = Redactor().scrub_obj(kw)      # details quote agents and tests: no secret in events.jsonl
        append_event(self.paths.dir, Event(run_id=self.run_id, kind=kind, by=f"job:{self.job_id}", **kw))

    def save(self, **update: Any) -> RunRecord:
        """Write the record, but only while it is still ours (same job, not ended by someone else)."""
        redactor = Redactor()     # last_error and checkpoints quote agents and tests
        update = {k: redactor.scrub_obj(v) if isinstance(v, (str, dict)) else v for k, v in update.items()}
        current = load_record(self.paths.dir).value
        if current is None or current.job_id != self.job_id or current.state is not RunState.active:
            raise LeaseLost(f"state.json no longer names job {self.job_id}", path=self.paths.dir)
        self.record = save_record(self.paths.dir, current.model_copy(update=update))
        return self.record


def clear_cooldown_after_success(ctx: Ctx, role: str) -> None:
    """A successful session of a role whose cooldown has passed ends the canary period."""
    stamp = read_outage(ctx.campaign.dir, role)
    if stamp.value is not None and not stamp.value.is_active(time.time()):
        try:
            Path(stamp.path).unlink()
            ctx.event("cooldown_cleared", detail=f"{role}: a session succeeded after the cooldown")
        except FileNotFoundError:
            pass


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    return make_private_dir(path)


def write_json(path: Path, data: Any) -> None:
    # evidence quotes test output and verdicts: scrubbed of every known secret before it is stored
    write_atomic(path, Redactor().scrub_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2)))
