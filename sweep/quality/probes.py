"""Probes: changes applied to the base repository in place of the reference solution.

A probe is a `wrong_solution` (the task's tests must score it 0) or a `valid_alternative` (they
must score it 1), with a focus (what it checks), a rationale and its patch. The mechanical mutants
(sweep/quality/mutants.py) run as wrong-solution probes. A probe runs through the same trial
machinery as the gates (sweep/harbor/trial.py, with the repository the patch gives as the
solution) and the same repeats, so a probe result is as trustworthy as a gate result.

The patch is untrusted data (it comes from the reference patch, a reviewer or a plan): it is only
ever a file git apply reads, in a copy of the base with no .git, with the ceiling set so git never
finds an enclosing repository.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sweep.execution import Limits, Provider
from sweep.git import GitFailed, run_git
from sweep.harbor import layout
from sweep.harbor.trial import run_trial
from sweep.tree import UnsafeTree, copy_tree

WRONG, VALID = "wrong_solution", "valid_alternative"
PROBE_KINDS = (WRONG, VALID)
DIFF_LIMIT = 4000           # characters of a probe's diff kept in the evidence and shown to a reviewer


@dataclass(frozen=True)
class Probe:
    name: str
    kind: str               # wrong_solution | valid_alternative
    focus: str
    rationale: str
    patch: bytes
    origin: str = "mutant"  # mutant | reviewer | prepared
    mutant_kind: str | None = None
    path: str | None = None
    line: int | None = None
    bound_to: str | None = None     # the bundle sha256 a prepared (or carried) probe was written for
    carried_from: int | None = None     # a reviewer's probe of an earlier revision, re-run after a repair

    @property
    def patch_sha256(self) -> str:
        return hashlib.sha256(self.patch).hexdigest()


@dataclass
class ProbeOutcome:
    probe: Probe
    rewards: list[float | None] = field(default_factory=list)
    outcome: str = ""       # killed | survived (wrong) | accepted | rejected (valid) | not_applicable
    detail: str = ""

    @property
    def as_required(self) -> bool:
        """The tests treated the probe as its kind requires."""
        return self.outcome in ("killed", "accepted")

    def as_evidence(self) -> dict:
        p = self.probe
        out = {"name": p.name, "kind": p.kind, "origin": p.origin, "focus": p.focus, "rationale": p.rationale,
               "patch_sha256": p.patch_sha256, "rewards": self.rewards, "outcome": self.outcome,
               "detail": self.detail[:300], "diff": diff_text(p.patch)}
        for key in ("mutant_kind", "path", "line", "bound_to", "carried_from"):
            if getattr(p, key) is not None:
                out[key] = getattr(p, key)
        return out


def diff_text(patch: bytes, limit: int = DIFF_LIMIT) -> str:
    text = patch.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + f"\n[diff cut at {limit} characters]\n"


def apply_patch(patch: bytes, repo: Path, *, check: bool = False) -> str | None:
    """git apply `patch` in `repo` (a tree without .git); None when it applied, else git's message."""
    with tempfile.NamedTemporaryFile(prefix="probe-", suffix=".patch", delete=False) as fh:
        fh.write(patch)
        name = fh.name
    try:
        run_git(["apply", "--whitespace=nowarn", "--binary", *(["--check"] if check else []), "--", name],
                repo=repo, timeout=120, env={"GIT_CEILING_DIRECTORIES": str(Path(repo).resolve().parent)})
        return None
    except GitFailed as exc:
        return exc.message
    finally:
        Path(name).unlink(missing_ok=True)


def applies_to(base_repo: Path) -> Callable[[bytes], bool]:
    """A check for derive_mutants: does a patch apply to `base_repo` (git apply --check)?"""
    return lambda patch: apply_patch(patch, base_repo, check=True) is None


MAX_TEST_SOURCE = 200_000   # bytes of one test file read for its literals


def test_change_lines(bundle: Path) -> list[tuple[str, str]]:
    """The lines the PR adds to each of its test files (tests/test_files.txt; the PR's version in
    tests/files/, the base's in environment/repo/, a new file whole), as (path, text) pairs for
    sweep/quality/mutants.py `test_literals`. Paths are data: an unsafe one, a symlink or a file
    that is not there is skipped."""
    import difflib
    out: list[tuple[str, str]] = []
    listed = bundle / layout.TEST_FILES
    try:
        names = [n for n in listed.read_text(encoding="utf-8", errors="replace").splitlines() if n]
    except OSError:
        return []
    for rel in names:
        new, old = bundle / layout.TEST_FILES_DIR / rel, bundle / layout.ENV_REPO / rel
        if layout.unsafe_relpath(rel) is not None or not new.is_file() or new.is_symlink():
            continue
        new_lines = new.read_bytes()[:MAX_TEST_SOURCE].decode("utf-8", errors="replace").splitlines()
        old_lines = (old.read_bytes()[:MAX_TEST_SOURCE].decode("utf-8", errors="replace").splitlines()
                     if old.is_file() and not old.is_symlink() else [])
        added = [ln[1:] for ln in difflib.unified_diff(old_lines, new_lines, lineterm="", n=0)
                 if ln.startswith("+") and not ln.startswith("+++")]
        out.append((rel, "\n".join(added)))
    return out


def run_probe(bundle: Path, probe: Probe, *, provider: Provider, workdir: Path, repeats: int,
              env_for_repeat: Callable[[int], dict[str, str]], timeout_s: float,
              limits: Limits | None = None) -> ProbeOutcome:
    """The probe's repository (the base with its patch applied) scored by the bundle's tests,
    `repeats` times with the gates' environment per repeat. A wrong solution is killed when no
    repeat scored above 0 (stopping at the first that did: it survived); a valid alternative is
    accepted when every repeat scored 1 (stopping at the first that did not)."""
    result = ProbeOutcome(probe)
    workdir = Path(workdir)
    repo = workdir / "repo"
    try:
        copy_tree(bundle / layout.ENV_REPO, repo)
    except UnsafeTree as exc:
        result.outcome, result.detail = "not_applicable", f"cannot copy the base: {exc}"
        return result
    problem = apply_patch(probe.patch, repo)
    if problem is not None:
        result.outcome, result.detail = "not_applicable", f"the patch does not apply to the base: {problem}"
        shutil.rmtree(workdir, ignore_errors=True)
        return result
    details = []
    for i in range(repeats):
        trial_dir = workdir / f"trial-{i}"
        trial = run_trial(bundle, repo, provider=provider, workdir=trial_dir, timeout_s=timeout_s,
                          env=env_for_repeat(i), limits=limits)
        shutil.rmtree(trial_dir, ignore_errors=True)
        result.rewards.append(trial.reward)
        details.append(trial.detail)
        scored = trial.reward if trial.reward is not None else 0.0
        if probe.kind == WRONG and scored > 0:
            break
        if probe.kind == VALID and trial.reward != 1.0:
            break
    scores = [r if r is not None else 0.0 for r in result.rewards]
    if probe.kind == WRONG:
        result.outcome = "killed" if all(s == 0 for s in scores) else "survived"
    else:
        result.outcome = "accepted" if len(scores) == repeats and all(s == 1.0 for s in scores) else "rejected"
    result.detail = (details[-1] if details else "")[:300]
    shutil.rmtree(workdir, ignore_errors=True)
    return result


class ProbeListProblem(ValueError):
    """A list of proposed or prepared probes sweep refuses (too many, a repeated name, no patch)."""


def proposed_probes(items: object, max_probes: int, *, origin: str = "reviewer") -> list[Probe]:
    """The probes a reviewer's verdict proposes (`probes`: a list of {kind, focus, rationale, patch}
    and an optional name), at most `max_probes` (`quality.max_probes`) of them."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise ProbeListProblem("`probes` must be a list")
    if len(items) > max_probes:
        raise ProbeListProblem(f"{len(items)} probes proposed, more than quality.max_probes = {max_probes}")
    out: list[Probe] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProbeListProblem(f"probes[{i}] must be a table")
        kind, patch = item.get("kind"), item.get("patch")
        if kind not in PROBE_KINDS:
            raise ProbeListProblem(f"probes[{i}].kind must be one of {', '.join(PROBE_KINDS)} (got {kind!r})")
        if not isinstance(patch, str) or not patch.strip():
            raise ProbeListProblem(f"probes[{i}].patch must be a non-empty unified diff")
        name = str(item.get("name") or f"{origin}-{i + 1:02d}")
        if any(p.name == name for p in out):
            raise ProbeListProblem(f"probes[{i}].name {name!r} repeats an earlier probe's name")
        out.append(Probe(name=name, kind=kind, focus=str(item.get("focus") or "")[:300],
                         rationale=str(item.get("rationale") or "")[:2000], patch=patch.encode(), origin=origin))
    return out


def prepared_probes(items: list) -> list[Probe]:
    """The plan's `prepared_probes` of a candidate (sweep/models/plan.py PreparedProbe, checked at
    init) as probes: run like the reviewer's, each remembering the bundle it was written for."""
    return [Probe(name=p.name, kind=p.kind, focus=p.focus, rationale=p.rationale, patch=p.patch.encode(),
                  origin="prepared", bound_to=p.bundle_sha256) for p in items]


def missing_focus(required: list[str], records: list) -> list[str]:
    """The entries of `required_probe_focus` with no wrong-solution probe (prepared or proposed by
    the reviewer: a mutant's focus is its kind, never a plan's) that ran on the bundle: one killed
    or survived, not one whose patch did not apply. `records` are evidence ProbeRecords."""
    ran = {r.focus for r in records if r.kind == WRONG and r.origin != "mutant" and r.outcome in ("killed", "survived")}
    return [f for f in required if f not in ran]


def carried_probes(previous) -> tuple[list[Probe], list[str]]:
    """The reviewer's probes of the bundle a repair replaced (`previous`: its ProbesEvidence), to be
    re-run on the repaired bundle: a repair gets a new sha256, and what the tests had to reject
    before they must still reject. A probe's patch is taken back from its recorded diff, only when
    that diff is whole (its sha256 is the patch's); the names of those that cannot are returned
    (the reviewer is asked to propose them again)."""
    out: list[Probe] = []
    lost: list[str] = []
    for r in previous.probes:
        if r.origin != "reviewer":
            continue
        patch = r.diff.encode()
        if hashlib.sha256(patch).hexdigest() != r.patch_sha256:
            lost.append(r.name)
            continue
        extra = r.model_extra or {}
        out.append(Probe(name=r.name, kind=r.kind, focus=r.focus, rationale=r.rationale, patch=patch, origin="reviewer",
                         bound_to=extra.get("bound_to") or previous.bundle_sha256,
                         carried_from=extra.get("carried_from") or previous.revision))
    return out, lost
