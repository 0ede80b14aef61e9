"""Typed evidence: what the controller writes about a run besides its record (docs/state.md).

source.json, the checkpoints in state.json and the gates/review/solve evidence files were plain
dicts read through string keys. These models are how they are read back now. Like every runstate
model they are tolerant readers (unknown keys ignored; a field a newer sweep adds has a default),
so the dict-shaped files of existing campaigns read unchanged; a file whose known fields have the
wrong type is refused by `read_evidence`, which names the file and the field.

Writers dump with `exclude_unset=True`, so the bytes on disk keep the shape they always had.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runstate.errors import StateError, describe_validation_error
from runstate.files import read_model

E = TypeVar("E", bound=BaseModel)


class Evidence(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


# ---- source.json ---------------------------------------------------------------------------------

class SourceEvidence(Evidence):
    """source.json: the PR as intake froze it (checksummed by `evidence_sha256`)."""

    kind: str = "git"
    url: str | None = None
    repo: str
    base: str
    head: str
    base_ref: str | None = None
    head_ref: str | None = None
    title: str = ""
    body: str = ""
    changed_files: list[str] = Field(default_factory=list)
    test_command: str | None = None
    pr_key: str | None = None
    frozen_at: float | None = None
    evidence_sha256: str


# ---- evidence/<kind>-rNNNN.json ------------------------------------------------------------------

class GateResult(Evidence):
    model_config = ConfigDict(extra="allow")      # a gate may carry more than is read here

    ok: bool
    detail: str = ""
    rewards: list[float | None] | None = None
    # the fail_to_pass gate's per-test evidence (sweep/harbor/junit.py; lists capped, counts whole)
    fail_to_pass: list[str] | None = None
    pass_to_pass: list[str] | None = None
    fail_to_pass_count: int | None = None
    pass_to_pass_count: int | None = None


class GatesEvidence(Evidence):
    bundle_sha256: str
    revision: int = 0
    repeats: int = 1
    passed: bool
    gates: dict[str, GateResult] = Field(default_factory=dict)
    hash_seeds: list[int] = Field(default_factory=list)
    environment_fidelity: str = "host"      # "container": the trials ran in the task's image (remote)
    image: str | None = None          # that image's identity (sha256 of Dockerfile + context), container only
    isolation: str | None = None      # what enforced the trials' sandbox: "bwrap" | "none" | "container"
    at: float = 0.0

    def failed(self) -> list[str]:
        return [name for name, g in self.gates.items() if not g.ok]


class ReviewVerdict(Evidence):
    """The reviewer's structured output, as given (validated against its role's output_schema
    before it is stored); keys a campaign's own reviewer schema adds are kept."""

    model_config = ConfigDict(extra="allow")

    verdict: str | None = None        # accept | revise | reject (roles/reviewer.toml)
    findings: list[Any] = Field(default_factory=list)
    rationale: Any = None


class ReviewEvidence(Evidence):
    bundle_sha256: str
    gates_bundle_sha256: str | None = None
    verdict: ReviewVerdict = Field(default_factory=ReviewVerdict)
    at: float = 0.0


class Rollout(Evidence):
    rollout: int
    reward: float | None = None
    session: str = "ok"
    detail: str = ""
    environment_fidelity: str | None = None     # where the rollout's trial ran: "host" | "container"


class SolveEvidence(Evidence):
    bundle_sha256: str
    runtime: str | None = None
    rollouts: list[Rollout] = Field(default_factory=list)
    at: float = 0.0


# ---- sessions/NNNN-<role>/result.json -------------------------------------------------------------

class SessionRecord(Evidence):
    """A role session's result.json (written by sweep/runtimes/session.py), as far as it is read
    back: which role ran, on which runtime, under which manifest, how it ended, in what sandbox."""

    role: str | None = None
    runtime: str = ""
    manifest_sha256: str = ""
    status: str | None = None
    cost_usd: float | None = None
    isolation: str = ""               # "bwrap" | "none"
    network: str | bool | None = None     # none | api | host (a bool in files of older sweeps)
    endpoints: list[str] = Field(default_factory=list)
    network_allow: list[str] = Field(default_factory=list)   # remote provider, "api": the CIDRs it was given


class SessionLaunch(Evidence):
    """A role session's argv.json, written before launch (so a killed session still says what ran)."""

    role: str | None = None
    runtime: str = ""
    manifest_sha256: str = ""
    isolation: str = ""
    network: str | bool | None = None
    endpoints: list[str] = Field(default_factory=list)


# ---- state.json's checkpoints ----------------------------------------------------------------------

class Checkpoint(Evidence):
    model_config = ConfigDict(extra="allow")      # a phase's summary may carry more than is read here

    at: float | None = None
    revision: int | None = None
    bundle_sha256: str | None = None

    def summary(self) -> dict[str, Any]:
        """What the phase said, without its time (report.md)."""
        return {k: v for k, v in self.to_json().items() if k != "at"}


class IntakeCheckpoint(Checkpoint):
    base: str | None = None
    head: str | None = None
    evidence_sha256: str | None = None


class GatesCheckpoint(Checkpoint):
    passed: bool | None = None


class ReviewCheckpoint(Checkpoint):
    verdict: str | None = None


class RetryCheckpoint(Evidence):
    model_config = ConfigDict(extra="allow")

    count: int = 0
    after_revision: int = 0


class RepairCheckpoint(Evidence):
    model_config = ConfigDict(extra="allow")

    count: int = 0
    findings: list[str] = Field(default_factory=list)
    after: str | None = None          # the phase whose findings sent it back to the author


class Checkpoints(Evidence):
    """state.json's `checkpoints`: one summary per finished phase (plus retry and parks)."""

    model_config = ConfigDict(extra="allow")

    intake: IntakeCheckpoint | None = None
    author: Checkpoint | None = None
    gates: GatesCheckpoint | None = None
    review: ReviewCheckpoint | None = None
    solve: Checkpoint | None = None
    evaluate: Checkpoint | None = None
    retry: RetryCheckpoint | None = None
    repair: RepairCheckpoint | None = None

    @classmethod
    def of(cls, checkpoints: dict[str, Any], *, where: str = "state.json") -> Checkpoints:
        try:
            return cls.model_validate(checkpoints)
        except ValidationError as exc:
            raise StateError("checkpoints: " + describe_validation_error(exc), path=where) from None

    def phases(self) -> list[tuple[str, Checkpoint]]:
        """The finished phases' checkpoints, in pipeline order."""
        out: list[tuple[str, Checkpoint]] = []
        for name in ("intake", "author", "gates", "review", "solve", "evaluate"):
            cp = getattr(self, name)
            if cp is not None:
                out.append((name, cp))
        return out

    @property
    def author_revision(self) -> int:
        return (self.author.revision if self.author else None) or 0

    @property
    def retry_after_revision(self) -> int:
        return self.retry.after_revision if self.retry else 0


def read_evidence(path: Path, model: type[E]) -> E | None:
    """The evidence file read through its model; None if it does not exist. A file that exists but
    is not valid evidence raises StateError naming the file and the field: evidence is never
    silently taken for something it is not."""
    loaded = read_model(path, model)
    if loaded.value is not None:
        return loaded.value
    if loaded.missing:
        return None
    raise StateError(f"not valid {model.__name__}: {loaded.problem}", path=path,
                     hint="an evidence file is written once by the controller; restore it or `sweep retry` the run")
