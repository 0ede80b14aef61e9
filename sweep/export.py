"""`sweep export`: a campaign's tasks as one Harbor dataset (see docs/export.md).

    DIR/
      <run_id>/            one Harbor task per run, named after the run id
        task.toml          schema 1.1: [task] name "sweep-<campaign id>/<run id>", [metadata.sweep]
                           (source PR, commits, bundle sha256, gates, FAIL_TO_PASS, verdict, fidelity,
                           runtime and RoleSpec hashes, cost), [verifier] separate + no-network,
                           [agent] non-root user, [environment] resources and network
        instruction.md
        environment/       Dockerfile (pinned base image, the project's declared dependencies,
                           a non-root `agent` user) + repo/ (the repository at the base commit)
        tests/             test.sh (executable) + its data
        solution/          solve.sh (executable) + solution.patch
      manifest.json        every task in DIR, written last

Incremental and crash-safe: each task is built in a hidden temp directory inside DIR and renamed
into place, so a task directory is complete or absent. A task that is already there with the same
content is left alone; one with different content is a collision, reported and never overwritten.
A crash leaves at most `.export-tmp-*` directories, which the next export removes, and an old
manifest.json, which the next export rewrites.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from runstate.errors import ConfigError, StateError
from runstate.files import write_atomic
from runstate.models import Outcome, RunRecord, RunState
from runstate.paths import RunPaths
from runstate.runs import list_runs
from sweep.models.evidence import (Evidence, GateResult, GatesEvidence, ReviewEvidence, ReviewVerdict, SessionRecord,
                                   SolveEvidence, SourceEvidence, read_evidence)

if TYPE_CHECKING:
    from sweep.models.plan import CampaignFile, FrozenCandidate

E = TypeVar("E", bound=Evidence)

FORMAT = "harbor"
HARBOR_SCHEMA_VERSION = "1.1"        # task.toml schema of Harbor 0.26.0 (harborframework.com/docs/tasks)
# Pinned by tag and digest (the tag documents what it is, the digest fixes the bytes). Override with
# `--base-image`, which must also be pinned by digest. See docs/export.md for how to refresh it.
DEFAULT_BASE_IMAGE = ("python:3.11-slim-bookworm@sha256:"
                      "2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91")
PYTEST_PIN = "pytest==8.3.3"
AGENT_USER = "agent"
AGENT_UID = 1000
MANIFEST = "manifest.json"
TMP_PREFIX = ".export-tmp-"
EXECUTABLE_SUFFIXES = (".sh",)


@dataclass
class ExportReport:
    out: Path
    added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    collisions: list[str] = field(default_factory=list)     # "run: why"
    skipped: list[str] = field(default_factory=list)        # "run: why" (not exportable)

    @property
    def ok(self) -> bool:
        return not self.collisions


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


def check_base_image(image: str) -> str:
    name, sep, digest = image.partition("@sha256:")
    if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or ":" not in name:
        raise ConfigError(f"base image {image!r} is not pinned: expected NAME:TAG@sha256:<64 hex digits>",
                          field="--base-image")
    if any(ch.isspace() for ch in image):
        raise ConfigError(f"base image {image!r} contains whitespace", field="--base-image")
    return image


def dockerfile(repo: Path, test_argv: list[str], base_image: str) -> str:
    """The task image: pinned base, git, the project's declared dependencies, a non-root agent.

    Which dependency files exist decides which fixed lines are written; no file content and no
    PR text is interpolated.
    """
    lines = [
        "# Task image written by `sweep export`. The base image is pinned by digest (docs/export.md).",
        f"FROM {base_image}",
        "ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1",
        "RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*",
        f"RUN groupadd --gid {AGENT_UID} {AGENT_USER} && useradd --uid {AGENT_UID} --gid {AGENT_UID} "
        f"--create-home --shell /bin/bash {AGENT_USER}",
        "WORKDIR /app",
        "COPY repo/ /app/",
    ]
    installs = []
    for req in ("requirements.txt", "requirements-dev.txt", "requirements-test.txt", "test-requirements.txt"):
        if (repo / req).is_file():
            installs.append(f"RUN pip install -r {req}")
    if (repo / "pyproject.toml").is_file() or (repo / "setup.py").is_file() or (repo / "setup.cfg").is_file():
        installs.append("RUN pip install -e .")
    if any("pytest" in arg for arg in test_argv):
        installs.append(f"RUN pip install '{PYTEST_PIN}'")
    if not installs:
        lines.append("# the project declares no dependencies "
                     "(no requirements*.txt, pyproject.toml, setup.py, setup.cfg)")
    lines += installs
    lines += [f"RUN chown -R {AGENT_USER}:{AGENT_USER} /app", f"USER {AGENT_USER}", ""]
    return "\n".join(lines)


def _toml_doc(*, task_name: str, run_id: str, campaign: CampaignFile, rec: RunRecord, cand: FrozenCandidate,
              source: SourceEvidence | None, gates_ev: GatesEvidence | None, review_ev: ReviewEvidence | None,
              solve_ev: SolveEvidence | None, roles: dict[str, dict[str, str]], bundle_toml: dict[str, Any],
              verified: bool, base_image: str) -> dict[str, Any]:
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
    sweep_meta = {
        "campaign_id": campaign.campaign_id, "campaign": campaign.settings.name, "run_id": run_id,
        "verified": verified, "outcome": rec.outcome.value if rec.outcome else None, "reason": rec.reason,
        "source_pr": cand.candidate.url or cand.pr_key,
        "source_repo": str((source.repo if source else "") or cand.candidate.repo or ""),
        "base": source.base if source else "", "head": source.head if source else "",
        "bundle_sha256": gates_ev.bundle_sha256 if gates_ev else "",
        "evidence_sha256": source.evidence_sha256 if source else "",
        "environment_fidelity": (gates_ev.environment_fidelity if gates_ev else "") or "host",
        "environment_image": (gates_ev.image if gates_ev else None) or "",
        "runtime_sha256": rec.runtime_sha or "", "cost_usd": float(rec.spent_usd), "base_image": base_image,
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
                   "findings": [str(f)[:500] for f in verdict.findings][:20]},
        "roles": {role: info for role, info in sorted(roles.items())},
    }
    return {
        "schema_version": HARBOR_SCHEMA_VERSION,
        "task": {"name": task_name, "description": title or f"pull request {run_id}",
                 "keywords": ["pull-request", "sweep", "swe"]},
        "metadata": {"category": "programming",
                     "tags": ["pull-request", "sweep"] + ([] if verified else ["unverified"]), "sweep": sweep_meta},
        "verifier": {"timeout_sec": num(old_verifier, "timeout_sec", 600.0), "environment_mode": "separate",
                     "network_mode": "no-network", "user": "root"},
        "agent": {"timeout_sec": num(old_agent, "timeout_sec", 3600.0), "user": AGENT_USER, "network_mode": "public"},
        "environment": {"build_timeout_sec": num(old_env, "build_timeout_sec", 600.0),
                        "cpus": int(num(old_env, "cpus", 1)), "memory_mb": int(num(old_env, "memory_mb", 2048)),
                        "storage_mb": int(num(old_env, "storage_mb", 10240)), "network_mode": "public"},
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


def _build_task(rdir: Path, dest: Path, *, campaign: CampaignFile, rec: RunRecord, base_image: str) -> None:
    from sweep.campaign import load_candidate
    from sweep.tomlw import dumps
    bundle = RunPaths.at(rdir).task
    shutil.copytree(bundle, dest, symlinks=True)
    for rel in ("task.toml", "environment/Dockerfile"):
        (dest / rel).unlink(missing_ok=True)
    try:
        bundle_toml = tomllib.loads((bundle / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        bundle_toml = {}
    argv_file = bundle / "tests" / "test_command.txt"
    test_argv = argv_file.read_text(errors="replace").splitlines() if argv_file.is_file() else []
    (dest / "environment" / "Dockerfile").write_text(dockerfile(bundle / "environment" / "repo", test_argv, base_image))
    doc = _toml_doc(task_name=f"sweep-{campaign.campaign_id}/{rec.run_id}", run_id=rec.run_id, campaign=campaign,
                    rec=rec, cand=load_candidate(rdir), source=read_evidence(RunPaths.at(rdir).source, SourceEvidence),
                    gates_ev=_latest(rdir, "gates", GatesEvidence), review_ev=_latest(rdir, "review", ReviewEvidence),
                    solve_ev=_latest(rdir, "solve", SolveEvidence),
                    roles=_roles(rdir), bundle_toml=bundle_toml, verified=rec.outcome is Outcome.verified,
                    base_image=base_image)
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


def _clean_temps(out: Path) -> None:
    for entry in out.iterdir():
        if entry.name.startswith(TMP_PREFIX) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


def _write_manifest(out: Path, campaign: CampaignFile) -> int:
    import sweep
    tasks = []
    for entry in sorted(out.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir() or not (entry / "task.toml").is_file():
            continue
        try:
            doc = tomllib.loads((entry / "task.toml").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        meta = doc.get("metadata", {}).get("sweep", {})
        tasks.append({"path": entry.name, "name": doc.get("task", {}).get("name"),
                      "run_id": meta.get("run_id"), "campaign_id": meta.get("campaign_id"),
                      "verified": meta.get("verified"), "outcome": meta.get("outcome"),
                      "bundle_sha256": meta.get("bundle_sha256"), "content_sha256": tree_digest(entry),
                      "fail_to_pass": meta.get("evidence", {}).get("fail_to_pass_count")})
    manifest = {"format": FORMAT, "harbor_schema_version": HARBOR_SCHEMA_VERSION,
                "sweep_version": getattr(sweep, "__version__", ""), "written_at": time.time(),
                "last_campaign": {"campaign_id": campaign.campaign_id, "name": campaign.settings.name},
                "tasks": tasks}
    write_atomic(out / MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n", mode=0o644)
    return len(tasks)


def export_campaign(campaign_dir: Path, out: Path, *, include_unverified: bool = False,
                    base_image: str = DEFAULT_BASE_IMAGE, run_ids: list[str] | None = None) -> ExportReport:
    from sweep.campaign import Campaign
    from sweep.harbor.bundle import validate_bundle
    handle = Campaign.load(campaign_dir)
    campaign_dir, campaign = handle.dir, handle.file
    check_base_image(base_image)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a directory", field="DIR")
    out.mkdir(parents=True, exist_ok=True)
    _clean_temps(out)
    report = ExportReport(out=out.resolve())
    listing = list_runs(campaign_dir)
    for run_id, rec in sorted(listing.records.items()):
        if run_ids is not None and run_id not in run_ids:
            continue
        if rec.state is not RunState.ended:
            continue
        wanted = rec.outcome is Outcome.verified or (include_unverified and rec.outcome is Outcome.generated_unverified)
        if not wanted:
            continue
        rdir = handle.run(run_id).dir
        if not RunPaths.at(rdir).task.is_dir():
            report.skipped.append(f"{run_id}: no task bundle")
            continue
        problems = validate_bundle(RunPaths.at(rdir).task)
        if problems:
            report.skipped.append(f"{run_id}: invalid bundle: {problems[0]}")
            continue
        tmp = out / f"{TMP_PREFIX}{run_id}-{secrets.token_hex(4)}"
        try:
            try:
                _build_task(rdir, tmp, campaign=campaign, rec=rec, base_image=base_image)
            except StateError as exc:      # evidence that does not read as its model: named, not exported
                report.skipped.append(f"{run_id}: {exc}")
                continue
            target = out / run_id
            if target.exists() or target.is_symlink():
                if target.is_dir() and not target.is_symlink() and tree_digest(target) == tree_digest(tmp):
                    report.unchanged.append(run_id)
                else:
                    report.collisions.append(f"{run_id}: {target} exists with different content; not overwritten "
                                             "(export into a new directory, or remove it yourself)")
                continue
            try:
                os.rename(tmp, target)      # atomic: the task is complete or absent
            except OSError as exc:          # another export created it meanwhile
                report.collisions.append(f"{run_id}: {target} appeared while exporting ({exc.strerror}); "
                                         "not overwritten")
                continue
            report.added.append(run_id)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    _write_manifest(out, campaign)          # last: it lists what is in DIR now
    return report
