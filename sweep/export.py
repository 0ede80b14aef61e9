"""`sweep export`: a campaign's tasks as a Harbor dataset (see docs/export.md).

    DIR/                   the verified tasks: one Harbor 0.26 dataset
      dataset.toml         [dataset] name and version, [[tasks]] every task with its content digest
      README.md            the dataset card: counts, sources, evidence, limitations, licences
      tasks.jsonl          one line per task: name, source PR, bundle sha256, verified, fidelity, evidence
      <run_id>/            one Harbor task per run; the directory name is the task's short name
        task.toml          schema 1.4: [task] name "sweep-<campaign id>/<run id>", [metadata.sweep],
                           [verifier] separate with its own [verifier.environment] (no network),
                           [agent] non-root user, [environment] resources, [[artifacts]] /app
        instruction.md
        environment/       Dockerfile (the image the gates verified in, or the one derived from the
                           test command's language) + repo/ (the repository at the base commit)
        tests/             test.sh (executable) + its data
        solution/          solve.sh (executable) + solution.patch
      unverified/          only with --include-unverified: the other tasks, a dataset of their own

Incremental and crash-safe: each task is built in a staging directory beside DIR (never inside a
dataset, so Harbor can never load a half-built task) and renamed into place, so a task directory is
complete or absent. A task that is already there with the same content is left alone; one with
different content is a collision, reported and never overwritten. The dataset files are rewritten
last, each atomically; a crash leaves at most the staging directory, which the next export removes.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from runstate.errors import ConfigError, StateError
from runstate.atomic import remove_dead_temps
from runstate.files import write_atomic
from runstate.models import Outcome, RunRecord, RunState
from runstate.paths import RunPaths
from runstate.runs import list_runs
from sweep.harbor import images
from sweep.harbor.digest import harbor_digest
from sweep.models.evidence import (Evidence, GateResult, GatesEvidence, ProbesEvidence, ReviewEvidence, ReviewVerdict,
                                   SessionRecord, SolveEvidence, SourceEvidence, read_evidence)
from sweep.quality.review import finding_text

if TYPE_CHECKING:
    from sweep.models.plan import CampaignFile, FrozenCandidate

E = TypeVar("E", bound=Evidence)

FORMAT = "harbor"
HARBOR_SCHEMA_VERSION = "1.4"        # TaskConfig.schema_version of Harbor 0.26.0
DATASET_SCHEMA_VERSION = "1.0"       # DatasetManifest.schema_version of Harbor 0.26.0
DATASET_VERSION = "1.0.0"            # what `harbor init --dataset` writes
DEFAULT_BASE_IMAGE = images.DEFAULT_BASE_IMAGE
check_base_image = images.check_base_image
AGENT_USER = images.AGENT_USER
UNVERIFIED_DIR = "unverified"
DATASET_TOML, README, TASKS_JSONL = "dataset.toml", "README.md", "tasks.jsonl"
VERIFIER_NETWORKS = ("no-network", "public")
EXECUTABLE_SUFFIXES = (".sh",)
_LICENCE_FILES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "COPYING", "COPYING.md")


@dataclass
class ExportReport:
    out: Path
    added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    collisions: list[str] = field(default_factory=list)     # "run: why"
    skipped: list[str] = field(default_factory=list)        # "run: why" (not exported)
    unverified: list[str] = field(default_factory=list)     # "run: why" (exported into unverified/)

    @property
    def ok(self) -> bool:
        return not self.collisions


@dataclass
class _Built:
    """A task built in staging, with what decides where it goes."""
    verified: bool
    why_unverified: str
    doc: dict[str, Any]


def _latest(rdir: Path, kind: str, model: type[E]) -> E | None:
    """The newest evidence/<kind>-rNNNN.json read through its model; None if there is none. A
    malformed one raises StateError naming the file and the field (the run is not exported)."""
    files = sorted(RunPaths.at(rdir).evidence.glob(f"{kind}-r*.json"))
    return read_evidence(files[-1], model) if files else None


def _roles(rdir: Path) -> dict[str, dict[str, str]]:
    """role -> {runtime, manifest_sha256} of the last session of each role."""
    out: dict[str, dict[str, str]] = {}
    sessions = RunPaths.at(rdir).sessions
    if not sessions.is_dir():
        return out
    for sdir in sorted(p for p in sessions.iterdir() if p.is_dir()):
        res = read_evidence(sdir / "result.json", SessionRecord)    # None: a session killed before it ended
        if res is not None and res.role is not None:
            out[res.role] = {"runtime": res.runtime, "manifest_sha256": res.manifest_sha256}
    return out


def _public_name(value: str) -> str:
    """A source named without the host's paths: a URL as it is, a local path by its last component."""
    if not value or "://" in value:
        return value
    return os.path.basename(value.rstrip("/")) or value


def source_names(cand: FrozenCandidate, source: SourceEvidence | None) -> tuple[str, str]:
    """(source_pr, source_repo) as the export writes them: the PR's URL when it has one, otherwise
    `<repository directory name>@<base>..<head>`; never a host path."""
    url = cand.candidate.url or (source.url if source else None)
    # the plan's repository first: source.json names sweep's private copy (runs/<id>/source/repo)
    repo = _public_name(str(cand.candidate.repo or (source.repo if source else "") or ""))
    if url:
        return url, repo or url
    base = (source.base if source else "") or cand.candidate.base or ""
    head = (source.head if source else "") or cand.candidate.head or ""
    return f"{repo}@{base}..{head}", repo


def _quality_meta(ev: ProbesEvidence | None, solve: SolveEvidence | None = None,
                  review: ReviewEvidence | None = None) -> dict[str, Any]:
    """Whether the tests discriminate (the mutation score, the survivors the review's equivalent
    claims excused, each probe's outcome) and the task is solvable (each rollout's label, the solve
    rate, pass@k): docs/export.md."""
    rollouts: dict[str, Any] = {}
    if solve is not None and solve.rollouts:
        rollouts = {"rollout_labels": [r.label or "" for r in solve.rollouts], "pass_at_k": dict(solve.pass_at_k)}
        if solve.solve_rate is not None:
            rollouts["solve_rate"] = solve.solve_rate
    if ev is None:
        return {"probed": False, **rollouts}
    m = ev.mutation
    out: dict[str, Any] = {"probed": True, "bundle_sha256": ev.bundle_sha256, "mutants": ev.mode,
                           "mutants_run": m.run, "mutants_killed": m.killed, "mutants_survived": list(m.survived)}
    if m.score is not None:         # TOML has no null: no mutant ran, no score
        out["mutation_score"] = m.score
    out.update(_excused_meta(ev, review))
    if ev.required_focus:
        out.update(required_probe_focus=list(ev.required_focus), missing_probe_focus=list(ev.missing_focus))
    return {**out, **rollouts, "probes": [{"name": p.name, "kind": p.kind, "origin": p.origin, "focus": p.focus, "outcome": p.outcome}
                       for p in ev.probes]}


def _excused_meta(ev: ProbesEvidence, review: ReviewEvidence | None) -> dict[str, Any]:
    """The surviving mutants of this bundle the review's `equivalent` claims excused (a count to
    filter on, and each name with the reviewer's reason), under the plan's bound."""
    if review is None or review.bundle_sha256 != ev.bundle_sha256 or review.max_equivalent_mutants is None:
        return {"mutants_excused": 0}
    reasons = {str(m.get("name")): str(m.get("reason") or "")[:500] for m in (review.verdict.model_extra or {})
               .get("mutants") or [] if isinstance(m, dict)}
    return {"mutants_excused": len(review.equivalent_excused), "max_equivalent_mutants": review.max_equivalent_mutants,
            "mutants_equivalent": [{"name": n, "reason": reasons.get(n, "")} for n in review.equivalent_excused]}


def _toml_doc(*, task_name: str, run_id: str, campaign: CampaignFile, rec: RunRecord, cand: FrozenCandidate,
              source: SourceEvidence | None, gates_ev: GatesEvidence | None, review_ev: ReviewEvidence | None,
              solve_ev: SolveEvidence | None, roles: dict[str, dict[str, str]], bundle_toml: dict[str, Any],
              verified: bool, why_unverified: str, image: dict[str, str], verifier_network: str,
              probes_ev: ProbesEvidence | None = None) -> dict[str, Any]:
    gates = gates_ev.gates if gates_ev else {}
    f2p = gates.get("fail_to_pass") or GateResult(ok=False)
    verdict = review_ev.verdict if review_ev else ReviewVerdict()
    title = " ".join(str((source.title if source else "") or cand.candidate.title or "").split())[:300]

    def table(key: str) -> dict[str, Any]:        # a table of the author's task.toml, or none
        value = bundle_toml.get(key)
        return value if isinstance(value, dict) else {}

    old_verifier, old_agent, old_env = table("verifier"), table("agent"), table("environment")

    def num(table: dict[str, Any], key: str, default: float) -> float:
        v = table.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else default

    rollouts = solve_ev.rollouts if solve_ev else []
    source_pr, source_repo = source_names(cand, source)
    sweep_meta = {
        "campaign_id": campaign.campaign_id, "campaign": campaign.settings.name, "run_id": run_id,
        "verified": verified, "unverified_reason": why_unverified,
        "outcome": rec.outcome.value if rec.outcome else None, "reason": rec.reason,
        "source_pr": source_pr, "source_repo": source_repo,
        "base": source.base if source else "", "head": source.head if source else "",
        "bundle_sha256": gates_ev.bundle_sha256 if gates_ev else "",
        "evidence_sha256": source.evidence_sha256 if source else "",
        "environment_fidelity": (gates_ev.environment_fidelity if gates_ev else "") or "host",
        "environment_image": (gates_ev.image if gates_ev else None) or "",
        "image_source": image["source"], "image_language": image["language"], "base_image": image["base_image"],
        "runtime_sha256": rec.runtime_sha or "", "cost_usd": float(rec.spent_usd),
        "evidence": {
            "summary": f2p.detail,
            "fail_to_pass": list(f2p.fail_to_pass or []),
            "pass_to_pass": list(f2p.pass_to_pass or []),
            "fail_to_pass_count": f2p.fail_to_pass_count or 0,
            "pass_to_pass_count": f2p.pass_to_pass_count or 0,
            "gate_repeats": gates_ev.repeats if gates_ev else 0,
            "solve_rewards": [r.reward for r in rollouts if r.reward is not None],
        },
        "gates": {name: result.ok for name, result in gates.items()},
        "review": {"verdict": verdict.verdict or "",
                   "findings": [finding_text(f)[:500] for f in verdict.findings][:20]},
        "roles": {role: info for role, info in sorted(roles.items())},
        "quality": _quality_meta(probes_ev, solve_ev, review_ev),
    }
    resources = {"build_timeout_sec": num(old_env, "build_timeout_sec", 600.0),
                 "cpus": int(num(old_env, "cpus", 1)), "memory_mb": int(num(old_env, "memory_mb", 2048)),
                 "storage_mb": int(num(old_env, "storage_mb", 10240))}
    return {
        "schema_version": HARBOR_SCHEMA_VERSION,
        "task": {"name": task_name, "description": title or f"pull request {run_id}",
                 "keywords": ["pull-request", "sweep", "swe"]},
        "metadata": {"category": "programming",
                     "tags": ["pull-request", "sweep"] + ([] if verified else ["unverified"]), "sweep": sweep_meta},
        # The verifier's network is a property of its own container, which starts that way: no
        # environment has to switch policy after start (docs/export.md, "Network").
        "verifier": {"timeout_sec": num(old_verifier, "timeout_sec", 600.0), "environment_mode": "separate",
                     "user": "root", "environment": {**resources, "network_mode": verifier_network}},
        "agent": {"timeout_sec": num(old_agent, "timeout_sec", 3600.0), "user": AGENT_USER},
        "environment": {**resources, "network_mode": "public"},
        # the separate verifier starts from a fresh copy of the environment: the agent's work on
        # the repository is carried over as an artifact
        "artifacts": [{"source": "/app"}],
    }


def tree_digest(root: Path) -> str:
    """Paths, bytes, symlink targets and the executable bit: what makes two exported tasks equal."""
    from sweep.tree import file_sha256, walk_tree
    outer = hashlib.sha256()
    for rel, st in walk_tree(root):
        if stat.S_ISREG(st.st_mode):
            x = "x" if st.st_mode & 0o111 else "-"
            outer.update(f"F\0{rel}\0{x}\0{file_sha256(root / rel)}\n".encode())
        elif stat.S_ISLNK(st.st_mode):
            outer.update(b"L\0" + rel.encode() + b"\0" + os.readlink(root / rel).encode() + b"\n")
    return outer.hexdigest()


def _read_argv(bundle: Path) -> list[str]:
    argv_file = bundle / "tests" / "test_command.txt"
    return argv_file.read_text(errors="replace").splitlines() if argv_file.is_file() else []


def _choose_image(bundle: Path, gates_ev: GatesEvidence | None, test_argv: list[str],
                  base_image: str) -> tuple[str | None, dict[str, str], str]:
    """(the Dockerfile to export, or None to keep the bundle's; image metadata; why the task
    cannot be called verified in that image, or "")."""
    repo = bundle / "environment" / "repo"
    language = images.task_language(test_argv, repo) or ""
    if gates_ev is not None and gates_ev.environment_fidelity == "container":
        # the gates ran in the image built from the bundle's own Dockerfile: that one is exported,
        # if it still is the image they ran in
        from sweep.providers.image import image_spec
        try:
            identity = image_spec(bundle / "environment").identity
        except ConfigError as exc:
            identity, problem = "", f"the bundle's Dockerfile cannot be read: {exc}"
        else:
            problem = "" if identity == gates_ev.image else (
                "the bundle's Dockerfile is not the image the gates ran in "
                f"(built {identity[:12]}, verified {str(gates_ev.image)[:12]})")
        return None, {"source": "verified", "language": language, "base_image": ""}, problem
    # host fidelity: the gates ran on the host's toolchain, so the image is derived from the
    # test command's language, and must be able to run that command
    derived = images.derive_image(test_argv, images.repo_top_files(repo), base_image=base_image,
                                  language=language or None)
    problem = images.runs_command(derived, test_argv) or ""
    return derived.dockerfile, {"source": "derived", "language": derived.language,
                                "base_image": base_image}, problem


def _build_task(rdir: Path, dest: Path, *, campaign: CampaignFile, rec: RunRecord, base_image: str,
                verifier_network: str) -> _Built:
    from sweep.campaign import load_candidate
    from sweep.tomlw import dumps
    from sweep.tree import UnsafeTree, links_leaving, require_real_dir
    bundle = RunPaths.at(rdir).task
    try:
        require_real_dir(bundle)          # copytree would copy wherever a link at task/ points
        shutil.copytree(bundle, dest, symlinks=True)
        leaving = links_leaving(dest)
    except UnsafeTree as exc:
        raise StateError(f"task/ cannot be exported: {exc}", path=bundle) from None
    if leaving:
        # checked on the copy itself: whatever the run directory's surroundings, no exported link
        # may resolve outside its task
        raise StateError(f"task/ holds a link that leaves the exported task: {leaving[0]}", path=bundle)
    # the image is judged on the copy (checked above), which holds the bundle's bytes
    gates_ev = _latest(rdir, "gates", GatesEvidence)
    test_argv = _read_argv(dest)
    dockerfile, image, problem = _choose_image(dest, gates_ev, test_argv, base_image)
    (dest / "task.toml").unlink(missing_ok=True)
    if dockerfile is not None:
        (dest / "environment" / "Dockerfile").unlink(missing_ok=True)
        (dest / "environment" / "Dockerfile").write_text(dockerfile)
    try:
        bundle_toml = tomllib.loads((bundle / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        bundle_toml = {}
    _write_harness(dest, rdir)          # sweep's harness, naming the recorded ids
    if rec.outcome is not Outcome.verified:
        problem = f"the run ended {rec.outcome.value if rec.outcome else 'without an outcome'}"
    verified = not problem
    doc = _toml_doc(task_name=f"sweep-{campaign.campaign_id}/{rec.run_id}", run_id=rec.run_id, campaign=campaign,
                    rec=rec, cand=load_candidate(rdir), source=read_evidence(RunPaths.at(rdir).source, SourceEvidence),
                    gates_ev=gates_ev, review_ev=_latest(rdir, "review", ReviewEvidence),
                    solve_ev=_latest(rdir, "solve", SolveEvidence), roles=_roles(rdir), bundle_toml=bundle_toml,
                    verified=verified, why_unverified=problem, image=image, verifier_network=verifier_network,
                    probes_ev=_latest(rdir, "probes", ProbesEvidence))
    (dest / "task.toml").write_text(dumps(doc))
    # scripts Harbor runs must be executable (an agent's bundle may have lost the bit); modes are
    # normalised so re-exports compare equal
    for top in ("tests", "solution"):
        for path in (dest / top).rglob("*"):
            if path.is_file() and not path.is_symlink():
                path.chmod(0o755 if path.suffix in EXECUTABLE_SUFFIXES else 0o644)
    for rel in ("task.toml", "instruction.md", "environment/Dockerfile"):
        (dest / rel).chmod(0o644)
    # a dataset is for others to read: directories 0755 (the run directory it came from is 0700)
    for path in [dest, *dest.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    return _Built(verified=verified, why_unverified=problem, doc=doc)


def _write_harness(dest: Path, rdir: Path) -> None:
    """The exported tests/ runs sweep's harness, as every local trial did, naming the ids the gates
    recorded (sweep/harbor/harness.py); a run whose command has no runner keeps what it has."""
    from sweep.campaign import load_candidate
    from sweep.harbor.harness import write_harness
    from sweep.harbor.runners import UnknownRunner
    from sweep.harbor.verification import rollout_harness
    opts = load_candidate(rdir).candidate.options
    source = read_evidence(RunPaths.at(rdir).source, SourceEvidence)
    gates_ev = _latest(rdir, "gates", GatesEvidence)
    try:
        harness = rollout_harness((source.test_command if source else None) or opts.test_command, opts.test_runner,
                                  gates_ev.gates.get("fail_to_pass") if gates_ev else None,
                                  (source.test_workdir if source else None) or opts.test_workdir)
    except (UnknownRunner, ValueError):
        return
    write_harness(dest, harness)


# ---- the dataset files -------------------------------------------------------------------------

def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._") or "dataset"


def _tasks_in(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The task directories of a dataset root with their task.toml (unreadable ones left out)."""
    out = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir() or not (entry / "task.toml").is_file():
            continue
        try:
            out.append((entry, tomllib.loads((entry / "task.toml").read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
    return out


def _licence(task: Path) -> str:
    """The repository's licence as its licence file states it (its first line), or ""."""
    repo = task / "environment" / "repo"
    for name in _LICENCE_FILES:
        path = repo / name
        if path.is_file() and not path.is_symlink():
            try:
                lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()]
            except OSError:
                continue
            first = next((ln for ln in lines if ln), "")
            return f"{name}: {' '.join(first.split())[:120]}"
    return ""


def _index_line(task: Path, doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc.get("metadata", {}).get("sweep", {})
    ev = meta.get("evidence", {})
    return {"name": doc.get("task", {}).get("name"), "path": task.name, "source_pr": meta.get("source_pr"),
            "source_repo": meta.get("source_repo"), "bundle_sha256": meta.get("bundle_sha256"),
            "digest": harbor_digest(task), "verified": meta.get("verified"),
            "unverified_reason": meta.get("unverified_reason", ""),
            "fidelity": meta.get("environment_fidelity"), "image_source": meta.get("image_source"),
            "language": meta.get("image_language"),
            "evidence": {"fail_to_pass": ev.get("fail_to_pass_count", 0), "pass_to_pass": ev.get("pass_to_pass_count", 0),
                         "gate_repeats": ev.get("gate_repeats", 0), "gates": meta.get("gates", {}),
                         "solve_rewards": ev.get("solve_rewards", []),
                         "review": meta.get("review", {}).get("verdict", "")},
            "licence": _licence(task)}


def _card(name: str, lines: list[dict[str, Any]], verified: bool) -> str:
    """README.md: the dataset card."""
    import sweep
    repos: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        repos.setdefault(str(line["source_repo"] or "?"), []).append(line)
    kind = "verified" if verified else "unverified"
    out = [f"# {name}", "",
           f"{len(lines)} {kind} task(s) from {len(repos)} source repositor{'y' if len(repos) == 1 else 'ies'}, "
           f"exported by sweep {getattr(sweep, '__version__', '')} in Harbor's task format (schema "
           f"{HARBOR_SCHEMA_VERSION}). Each task is one pull request: the repository at its base commit, "
           "the PR's own description as the instruction, the PR's tests as the verifier and its non-test "
           "change as the reference solution.", "",
           "Run it with Harbor 0.26: `harbor run -p . -a oracle` (the reference solutions; reward 1), "
           "or with your agent. `-i/-x` filter on the task directory names (the run ids).", "",
           "## Counts", "", "| | tasks |", "|---|---|", f"| {kind} | {len(lines)} |"]
    by_lang: dict[str, int] = {}
    for line in lines:
        by_lang[str(line["language"] or "?")] = by_lang.get(str(line["language"] or "?"), 0) + 1
    out += [f"| language {lang} | {n} |" for lang, n in sorted(by_lang.items())]
    out += ["", "## Sources", "", "| repository | tasks | licence |", "|---|---|---|"]
    for repo, items in sorted(repos.items()):
        licences = sorted({i["licence"] for i in items if i["licence"]}) or ["not found in the repository"]
        out.append(f"| {repo} | {len(items)} | {'; '.join(licences)} |")
    out += ["", "## Evidence", "",
            "Per task: the tests that fail before the PR's fix and pass after it (FAIL_TO_PASS), the ones that "
            "pass both times (PASS_TO_PASS), how many times the gates were repeated, the controls (the "
            "reference solution scores 1, the empty solution 0), the reviewer's verdict and the solver "
            "rollouts' rewards. No probe results are recorded by this sweep version.", "",
            "| task | source | fail_to_pass | pass_to_pass | repeats | controls | review | fidelity | image |",
            "|---|---|---|---|---|---|---|---|---|"]
    for line in lines:
        ev = line["evidence"]
        controls = "ok" if ev["gates"].get("reference") and ev["gates"].get("empty") else "failed"
        out.append(f"| {line['path']} | {line['source_pr']} | {ev['fail_to_pass']} | {ev['pass_to_pass']} | "
                   f"{ev['gate_repeats']} | {controls} | {ev['review'] or '-'} | {line['fidelity']} | "
                   f"{line['image_source']} ({line['language']}) |")
    if not verified:
        out += ["", "Why each task is not verified:", ""]
        out += [f"- {line['path']}: {line['unverified_reason']}" for line in lines]
    out += ["", "## Limitations", "",
            "- `fidelity = host`: sweep's gates ran the tests on the host's toolchain, not in the task's image; "
            "the image (`image = derived`) is derived from the test command's language and was not built by "
            "sweep. `fidelity = container`: the gates ran in the image built from the task's own Dockerfile "
            "(`image = verified`), which is exported unchanged.",
            "- The verifier runs in its own container without network (`[verifier.environment]`): Docker and "
            "Podman need Harbor's egress sidecar for that; see sweep's docs/export.md.",
            "- The base image is pinned by digest; the digest was not re-checked against a registry at export.",
            "- Test ids come from the test runner's own report; a test that is flaky beyond the gate repeats "
            "may still be in PASS_TO_PASS.", ""]
    return "\n".join(out)


def _write_dataset_files(root: Path, name: str, *, verified: bool) -> int:
    tasks = _tasks_in(root)
    lines = [_index_line(task, doc) for task, doc in tasks]
    for dataset_file in (TASKS_JSONL, README, DATASET_TOML):
        remove_dead_temps(root / dataset_file)      # an earlier export killed mid-write left it
    write_atomic(root / TASKS_JSONL, b"".join(orjson.dumps(line) + b"\n" for line in lines), mode=0o644)
    write_atomic(root / README, _card(name, lines, verified).encode(), mode=0o644)
    from sweep.tomlw import dumps
    manifest = {"schema_version": DATASET_SCHEMA_VERSION,
                "dataset": {"name": name, "version": DATASET_VERSION,
                            "description": f"{'Verified' if verified else 'Unverified'} pull-request tasks "
                                           "exported by sweep (see README.md)",
                            "authors": [], "keywords": ["pull-request", "sweep", "swe"]},
                "tasks": [{"name": line["name"], "digest": line["digest"]} for line in lines]}
    header = f"# Dataset manifest for {name}, written by `sweep export` (task digests as `harbor sync` computes them)\n\n"
    write_atomic(root / DATASET_TOML, (header + dumps(manifest)).encode(), mode=0o644)   # last: it lists what is there
    return len(lines)


def _dataset_name(out: Path) -> str:
    """The dataset's name: the one dataset.toml already has, else `sweep/<the directory's name>`."""
    try:
        name = tomllib.loads((out / DATASET_TOML).read_text(encoding="utf-8"))["dataset"]["name"]
        if isinstance(name, str) and re.match(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$", name):
            return name
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError):
        pass
    return f"sweep/{_slug(out.resolve().name)}"


# ---- the verb ----------------------------------------------------------------------------------

def staging_dir(out: Path) -> Path:
    """Where tasks are built: beside DIR (the same filesystem, so the rename into DIR is atomic),
    never inside a dataset root Harbor reads."""
    resolved = out.resolve()
    return resolved.parent / f".{resolved.name}.sweep-export"


def _place(tmp: Path, target: Path, run_id: str, report: ExportReport) -> bool:
    """Rename the built task into place unless something is there; True when it was added."""
    if target.exists() or target.is_symlink():
        if target.is_dir() and not target.is_symlink() and tree_digest(target) == tree_digest(tmp):
            report.unchanged.append(run_id)
        else:
            report.collisions.append(f"{run_id}: {target} exists with different content; not overwritten "
                                     "(export into a new directory, or remove it yourself)")
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, target)      # atomic: the task is complete or absent
    except OSError as exc:          # another export created it meanwhile
        report.collisions.append(f"{run_id}: {target} appeared while exporting ({exc.strerror}); not overwritten")
        return False
    report.added.append(run_id)
    return True


def _not_exportable(bundle: Path) -> str | None:
    """Why a run's bundle cannot be exported at all, or None."""
    from sweep.harbor.bundle import validate_bundle
    if not bundle.is_dir():
        return "no task bundle"
    problems = validate_bundle(bundle)
    if problems:
        return f"invalid bundle: {problems[0]}"
    if os.path.isabs((_read_argv(bundle) or [""])[0]):      # it would be published, and runs nowhere else
        return ("the test command's program is a host path "
                "(write the program's name, found on PATH, in the plan's test_command)")
    return None


def _export_run(rdir: Path, rec: RunRecord, out: Path, staging: Path, report: ExportReport, *,
                campaign: CampaignFile, include_unverified: bool, base_image: str, verifier_network: str) -> None:
    """Build one run's task in staging and rename it into the dataset it belongs to."""
    run_id = rec.run_id
    why = _not_exportable(RunPaths.at(rdir).task)
    if why:
        report.skipped.append(f"{run_id}: {why}")
        return
    tmp = staging / f"{run_id}-{secrets.token_hex(4)}"
    try:
        built = _build_task(rdir, tmp, campaign=campaign, rec=rec, base_image=base_image,
                            verifier_network=verifier_network)
        if built.verified:
            _place(tmp, out / run_id, run_id, report)
        elif include_unverified:
            if _place(tmp, out / UNVERIFIED_DIR / run_id, run_id, report):
                report.unverified.append(f"{run_id}: {built.why_unverified}")
        else:
            report.skipped.append(f"{run_id}: not verified in its exported image: {built.why_unverified} "
                                  "(--include-unverified exports it into unverified/)")
    except StateError as exc:      # evidence that does not read as its model: named, not exported
        report.skipped.append(f"{run_id}: {exc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def export_campaign(campaign_dir: Path, out: Path, *, include_unverified: bool = False,
                    base_image: str = DEFAULT_BASE_IMAGE, run_ids: list[str] | None = None,
                    verifier_network: str = "no-network") -> ExportReport:
    from sweep.campaign import Campaign
    handle = Campaign.load(campaign_dir)
    campaign_dir, campaign = handle.dir, handle.file
    check_base_image(base_image)
    if verifier_network not in VERIFIER_NETWORKS:
        raise ConfigError(f"verifier network {verifier_network!r} is not one of {', '.join(VERIFIER_NETWORKS)}",
                          field="--verifier-network")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a directory", field="DIR")
    out.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(out)
    shutil.rmtree(staging, ignore_errors=True)      # what a killed export left
    for old in out.glob(".export-tmp-*"):           # an older sweep built tasks inside DIR: Harbor loads those
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
    staging.mkdir(mode=0o700)
    report = ExportReport(out=out.resolve())
    listing = list_runs(campaign_dir)
    try:
        for run_id, rec in sorted(listing.records.items()):
            if run_ids is not None and run_id not in run_ids:
                continue
            if rec.state is not RunState.ended:
                continue
            wanted = rec.outcome is Outcome.verified or (
                include_unverified and rec.outcome is Outcome.generated_unverified)
            if not wanted:
                continue
            _export_run(handle.run(run_id).dir, rec, out, staging, report, campaign=campaign,
                        include_unverified=include_unverified, base_image=base_image,
                        verifier_network=verifier_network)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # last: they list what is in each dataset now
    name = _dataset_name(out)
    _write_dataset_files(out, name, verified=True)
    if (out / UNVERIFIED_DIR).is_dir():
        _write_dataset_files(out / UNVERIFIED_DIR, _dataset_name(out / UNVERIFIED_DIR)
                             if (out / UNVERIFIED_DIR / DATASET_TOML).is_file() else f"{name}-unverified",
                             verified=False)
    return report
