"""Typed evidence: what the controller writes about a run besides its record (docs/state.md).

source.json, the checkpoints in state.json and the gates/review/solve evidence files were plain
dicts read through string keys. These models are how they are read back now. Like every runstate
model they are tolerant readers (unknown keys ignored; a field a newer sweep adds has a default),
so the dict-shaped files of existing campaigns read unchanged; a file whose known fields have the
wrong type is refused by `read_evidence`, which names the file and the field.

Writers dump with `exclude_unset=True`, so the bytes on disk keep the shape they always had.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runstate.checkpoints import (Checkpoint, EvaluateCheckpoint, GatesCheckpoint, IntakeCheckpoint, RepairCheckpoint,
                                  ProbesCheckpoint, RetryCheckpoint, ReviewCheckpoint, SolveCheckpoint)
from runstate.errors import StateError, describe_validation_error
from runstate.files import read_bytes, read_model
from runstate.paths import SOURCE_FILE
from runstate.phases import PHASE_TABLE

__all__ = ["EVIDENCE_SCHEMA_VERSION", "Checkpoint", "Checkpoints", "Document", "EvaluateCheckpoint", "GateResult", "GatesCheckpoint", "GatesEvidence",
           "IntakeCheckpoint", "ReadinessEvidence", "RepairCheckpoint", "RetryCheckpoint", "ReviewCheckpoint", "ReviewEvidence",
           "ReviewVerdict", "Rollout", "SecretScanEvidence", "SessionLaunch", "SessionRecord", "SolveCheckpoint", "SolveEvidence",
           "SourceEvidence", "read_evidence"]

E = TypeVar("E", bound=BaseModel)


# The version of the evidence documents this sweep writes (source.json, evidence/*.json, a session's
# argv.json and result.json). A file without one was written before versions (0) and reads as it
# always did; a file of a newer version is refused by its reader, naming the file and the version.
EVIDENCE_SCHEMA_VERSION = 1


class Evidence(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class Document(Evidence):
    """A whole evidence file: written through this model (`for_disk`), read back through it."""

    schema_version: int = 0

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v > EVIDENCE_SCHEMA_VERSION:
            raise ValueError(f"written by a newer sweep (schema_version {v}; this sweep reads up to "
                             f"{EVIDENCE_SCHEMA_VERSION}): upgrade sweep to read it")
        return v

    def for_disk(self) -> dict[str, Any]:
        """What a writer stores: the fields it set, stamped with the current schema version."""
        return self.model_copy(update={"schema_version": EVIDENCE_SCHEMA_VERSION}).to_json()


# ---- source.json ---------------------------------------------------------------------------------

class SourceEvidence(Document):
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
    test_workdir: str | None = None     # where in the repository the test command runs
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


class GatesEvidence(Document):
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


class ProbeRecord(Evidence):
    """One probe's result (sweep/quality/probes.py): a change applied to the base in place of the
    reference, scored by the task's tests with the gates' repeats."""

    model_config = ConfigDict(extra="allow")

    name: str
    kind: str                         # wrong_solution (must score 0) | valid_alternative (must score 1)
    origin: str = "mutant"            # mutant | reviewer | prepared
    focus: str = ""
    rationale: str = ""
    patch_sha256: str = ""
    rewards: list[float | None] = Field(default_factory=list)
    outcome: str = ""                 # killed | survived | accepted | rejected | not_applicable
    detail: str = ""
    diff: str = ""                    # the probe's patch (bounded)
    mutant_kind: str | None = None
    path: str | None = None
    line: int | None = None


class MutationScore(Evidence):
    derived: int = 0                  # mutants derived (those that apply to the base), within max_mutants
    run: int = 0                      # of those, run to a verdict
    killed: int = 0
    survived: list[str] = Field(default_factory=list)     # names of the mutants the tests accepted
    note: str = ""                    # why there are none (no solution.patch, max_mutants = 0, ...)

    @property
    def score(self) -> float | None:
        """killed / run; None when no mutant ran."""
        return self.killed / self.run if self.run else None


class ProbesEvidence(Document):
    bundle_sha256: str
    revision: int = 0
    repeats: int = 1
    mode: str = "enforce"             # quality.mutants: enforce | report
    mutation: MutationScore = Field(default_factory=MutationScore)
    probes: list[ProbeRecord] = Field(default_factory=list)
    passed: bool = False              # every wrong solution killed, every valid alternative accepted
    # the candidate's required_probe_focus, and those with no prepared or proposed wrong-solution
    # probe that ran on this bundle (the run cannot be verified while one is missing)
    required_focus: list[str] = Field(default_factory=list)
    missing_focus: list[str] = Field(default_factory=list)
    # the reviewer's probes of the bundle a repair replaced that could not run again (their diff
    # was cut in the evidence): the next review is asked to propose them again
    not_rerun: list[str] = Field(default_factory=list)
    at: float = 0.0

    def survivors(self) -> list[ProbeRecord]:
        return [p for p in self.probes if p.kind == "wrong_solution" and p.outcome == "survived"]

    def rejected_alternatives(self) -> list[ProbeRecord]:
        return [p for p in self.probes if p.kind == "valid_alternative" and p.outcome == "rejected"]


class ReviewVerdict(Evidence):
    """The reviewer's structured output, as given (validated against its role's output_schema
    before it is stored); keys a campaign's own reviewer schema adds are kept."""

    model_config = ConfigDict(extra="allow")

    verdict: str | None = None        # accept | revise | reject (roles/reviewer.toml)
    findings: list[Any] = Field(default_factory=list)
    rationale: Any = None


class ReviewEvidence(Document):
    bundle_sha256: str
    gates_bundle_sha256: str | None = None
    verdict: ReviewVerdict = Field(default_factory=ReviewVerdict)
    # the verdict's `equivalent` claims on surviving mutants, and what they did under the plan's
    # quality.max_equivalent_mutants (sweep/quality/review.py judge_equivalence): excused mutants
    # no longer count as surviving, refused ones still do
    max_equivalent_mutants: int | None = None
    equivalent_claimed: list[str] = Field(default_factory=list)
    equivalent_excused: list[str] = Field(default_factory=list)
    equivalent_refused: list[str] = Field(default_factory=list)
    equivalent_refused_why: str = ""
    at: float = 0.0


class Rollout(Evidence):
    rollout: int
    reward: float | None = None
    session: str = "ok"
    detail: str = ""
    environment_fidelity: str | None = None     # where the rollout's trial ran: "host" | "container"
    label: str | None = None          # sweep/quality/rollouts.py LABELS (None in files of older sweeps)
    label_reason: str = ""
    labelled_by: str | None = None    # "oracle rules" | the reviewer's runtime
    # the agent path (the rollout review): what the reviewer was shown and said
    tests: dict[str, Any] | None = None       # the harness's per-test results, bounded (rollouts.tests_summary)
    diff: str = ""                            # what the solver changed, bounded (rollouts.DIFF_BYTES)
    findings: list[Any] = Field(default_factory=list)     # a blocking label's cited evidence
    mechanical_label: str | None = None       # the oracle rules' label, which binds when it blocks
    reviewer_label: str | None = None         # the reviewer's, when the oracle rules' blocking label overrode it


class SolveEvidence(Document):
    bundle_sha256: str
    runtime: str | None = None
    rollouts: list[Rollout] = Field(default_factory=list)
    solve_rate: float | None = None   # rollouts with reward 1 / rollouts
    pass_at_k: dict[str, float] = Field(default_factory=dict)     # "1", ..., str(n) -> the unbiased pass@k
    # the rollout review of an agent reviewer: "pending" (rollouts scored, labels to come: a rerun
    # of the phase judges these instead of running new ones) or "done"; None: the oracle rules
    review: str | None = None
    at: float = 0.0


# ---- sessions/NNNN-<role>/result.json -------------------------------------------------------------

class SessionRecord(Document):
    """A role session's result.json (written by sweep/runtimes/session.py through this model): the
    fields read back are typed (which role ran, on which runtime, under which manifest, how it
    ended, in what sandbox); the rest of what the session recorded is kept as written."""

    model_config = ConfigDict(extra="allow")

    role: str | None = None
    runtime: str = ""
    manifest_sha256: str = ""
    status: str | None = None
    cost_usd: float | None = None
    isolation: str = ""               # "bwrap" | "none"
    network: str | bool | None = None     # none | api | host (a bool in files of older sweeps)
    endpoints: list[str] = Field(default_factory=list)
    network_allow: list[str] = Field(default_factory=list)   # remote provider, "api": the CIDRs it was given
    # set when the session's model key was inside a remote sandbox (the plan's agent_key_in_sandbox)
    key_in_sandbox: str | None = None


class SessionLaunch(Document):
    """A role session's argv.json, written before launch (so a killed session still says what ran),
    through this model; the fields read back are typed, the rest kept as written."""

    model_config = ConfigDict(extra="allow")

    role: str | None = None
    runtime: str = ""
    manifest_sha256: str = ""
    isolation: str = ""
    network: str | bool | None = None
    endpoints: list[str] = Field(default_factory=list)


class ReadinessEvidence(Document):
    """evidence/readiness-r0000.json: the test command's readiness check that passed on the base
    checkout (sweep/readiness.py `Readiness`); its presence means the check is done for the run."""

    ok: bool = False
    cause: str | None = None
    detail: str = ""
    program: str | None = None
    tests: int | None = None
    duration_s: float = 0.0
    skipped: str | None = None
    at: float = 0.0


class SecretScanEvidence(Document):
    """evidence/secret-scan-rNNNN.json: the files of a bundle that held a secret (now redacted)."""

    files: list[str] = Field(default_factory=list)
    redacted: bool = True
    at: float = 0.0


# ---- state.json's checkpoints ----------------------------------------------------------------------
# The per-phase models live beside the phase table (runstate/checkpoints.py); they are re-exported here.

class Checkpoints(Evidence):
    """state.json's `checkpoints`: one summary per finished phase (plus retry and parks).

    A phase's summary is read through its row's checkpoint model (runstate/phases.py); the shipped
    phases have a typed attribute each, and a phase added by a row alone is read by `phases()`."""

    model_config = ConfigDict(extra="allow")

    intake: IntakeCheckpoint | None = None
    author: Checkpoint | None = None
    gates: GatesCheckpoint | None = None
    probes: ProbesCheckpoint | None = None
    review: ReviewCheckpoint | None = None
    solve: SolveCheckpoint | None = None
    evaluate: EvaluateCheckpoint | None = None
    retry: RetryCheckpoint | None = None
    repair: RepairCheckpoint | None = None

    @classmethod
    def of(cls, checkpoints: dict[str, Any], *, where: str = "state.json") -> Checkpoints:
        try:
            cps = cls.model_validate(checkpoints)
            for row in PHASE_TABLE.rows:     # a row's phase without an attribute: through its model
                if row.phase not in cls.model_fields and row.phase in checkpoints:
                    row.checkpoint.model_validate(checkpoints[row.phase])
            return cps
        except ValidationError as exc:
            raise StateError("checkpoints: " + describe_validation_error(exc), path=where) from None

    def get(self, phase: str) -> Checkpoint | None:
        """The checkpoint of `phase` (any row of the phase table), read through its row's model."""
        if phase in type(self).model_fields:
            value = getattr(self, phase)
            return value if isinstance(value, Checkpoint) else None
        raw = (self.model_extra or {}).get(phase)
        return PHASE_TABLE.row(phase).checkpoint.model_validate(raw) if isinstance(raw, dict) else None

    def phases(self) -> list[tuple[str, Checkpoint]]:
        """The finished phases' checkpoints, in pipeline order (the phase table's)."""
        out: list[tuple[str, Checkpoint]] = []
        for name in PHASE_TABLE.names:
            cp = self.get(name)
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


# ---- source.json: the frozen PR evidence and its checksum --------------------------------------

def evidence_sha256(evidence: dict) -> str:
    body = {k: v for k, v in evidence.items() if k != "evidence_sha256"}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def load_source(rdir: Path) -> SourceEvidence | None:
    """A frozen source.json whose checksum holds, read as SourceEvidence, else None (a torn, edited
    or malformed file is redone by intake). One that a newer sweep wrote (its schema_version above
    this sweep's) is refused with a StateError naming the file: redoing it would overwrite it."""
    raw = read_bytes(Path(rdir) / SOURCE_FILE)
    if not raw:
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("evidence_sha256") != evidence_sha256(data):
        return None
    version = data.get("schema_version", 0)
    if isinstance(version, int) and version > EVIDENCE_SCHEMA_VERSION:
        raise StateError(f"written by a newer sweep (schema_version {version}; this sweep reads up to "
                         f"{EVIDENCE_SCHEMA_VERSION})", path=Path(rdir) / SOURCE_FILE,
                         hint="run the campaign with the sweep that wrote it (`sweep runtime freeze`)")
    try:
        return SourceEvidence.model_validate(data)
    except ValidationError:
        return None
