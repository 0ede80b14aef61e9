"""The models of state.json's `checkpoints`: one summary per finished phase (plus retry, repair, parks).

They live here, beside the phase table (runstate/phases.py) that names each phase's model, because
the checkpoints are part of the record the state machine keeps. Like every runstate model they are
tolerant readers (unknown keys ignored or kept; a field a newer sweep adds has a default), so the
checkpoints of existing campaigns read unchanged. Writers dump with `exclude_unset=True`, so the bytes
on disk keep the shape they always had.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Summary(BaseModel):
    """A checkpoint-shaped document: dumped with only the fields that were set."""

    model_config = ConfigDict(extra="ignore")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class Checkpoint(Summary):
    """What a finished phase says about itself (a phase returns one; the driver adds `at`)."""

    model_config = ConfigDict(extra="allow")      # a phase's summary may carry more than is read here

    at: float | None = None
    revision: int | None = None
    bundle_sha256: str | None = None
    # set when the phase's findings sent the run back to the author (the phase's own summary then)
    repair: int | None = None
    after: str | None = None

    def summary(self) -> dict[str, Any]:
        """What the phase said, without its time (report.md)."""
        return {k: v for k, v in self.to_json().items() if k != "at"}


class IntakeCheckpoint(Checkpoint):
    base: str | None = None
    head: str | None = None
    evidence_sha256: str | None = None
    changed_files: int | None = None


class GatesCheckpoint(Checkpoint):
    passed: bool | None = None


class ProbesCheckpoint(Checkpoint):
    passed: bool | None = None
    mutation_score: float | None = None     # mutants killed / run (None: none ran)
    killed: int | None = None
    run: int | None = None
    survived: int | None = None


class ReviewCheckpoint(Checkpoint):
    verdict: str | None = None
    excused_mutants: int | None = None      # surviving mutants the accepted review's equivalent claims excused


class SolveCheckpoint(Checkpoint):
    rewards: list[float | None] | None = None
    rollouts: int | None = None
    solved: int | None = None               # rollouts with reward 1
    solve_rate: float | None = None
    labels: dict[str, int] | None = None    # label -> rollouts judged so (sweep/quality/rollouts.py)


class EvaluateCheckpoint(Checkpoint):
    """Written with the ending (the evaluate phase, or any ending before it)."""

    outcome: str | None = None
    reason: str | None = None


class RetryCheckpoint(Summary):
    model_config = ConfigDict(extra="allow")

    count: int = 0
    after_revision: int = 0


class RepairCheckpoint(Summary):
    model_config = ConfigDict(extra="allow")

    count: int = 0
    findings: list[str] = Field(default_factory=list)
    after: str | None = None          # the phase whose findings sent it back to the author
