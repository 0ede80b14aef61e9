"""The six phases. Each returns (next phase, summary for the checkpoint) or raises
Ending / Park / AttemptFailed (see pipeline.py for what each does to the record).

Paid work (every role session) is reserved in spend.json before it starts and settled after.
Every task bundle the author produces is kept: the current one is `task/`, each earlier one moves
to `revisions/NNNN/`, and all evidence (gates, verdicts, rewards) names the bundle's sha256.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from roles import RoleSpec
from runstate.errors import ConfigError, ProviderError, StateError, describe_validation_error
from runstate.files import make_private_dir
from runstate.models import EndReason, Outcome, Phase
from sweep.models.evidence import (Checkpoints, GatesEvidence, ReviewEvidence, ReviewVerdict, SolveEvidence,
                                   SourceEvidence, read_evidence)
from sweep.controller.context import (AttemptFailed, Ctx, Ending, Park, clear_cooldown_after_success, fresh_dir,
                                      provider_park, write_json)
from sweep.execution import Limits, Provider
from sweep.providers.base import SandboxError
from sweep.tree import copy_tree

TRIAL_TIMEOUT_S = 900


# ---- shared helpers ---------------------------------------------------------------------------

def _checkpoints(ctx: Ctx) -> Checkpoints:
    """state.json's checkpoints, read through their model (a malformed one is a StateError)."""
    return Checkpoints.of(ctx.record.checkpoints, where=str(ctx.paths.state))


def _options(ctx: Ctx):
    return ctx.candidate.candidate.options


_PHASE_ROLE = {Phase.author: "author", Phase.review: "reviewer", Phase.solve: "solver"}


def _provider(ctx: Ctx) -> Provider:
    from sweep.providers import get_provider
    if ctx.provider_cache is None:
        try:
            # author and reviewer sessions (and oracle solvers) run on this host whatever the plan's
            # provider: the task image they would need is what the author is still writing
            ctx.provider_cache = get_provider("local", isolation=ctx.campaign.settings.isolation)
        except (ConfigError, ProviderError) as exc:
            # nothing may run unsandboxed by accident: the run parks with the reason, every role
            raise Park(_PHASE_ROLE.get(ctx.record.phase, "author"), "outage", f"configuration error: {exc}",
                       also=tuple(_PHASE_ROLE.values())) from None
    return ctx.provider_cache


def _trial_provider(ctx: Ctx, role: str, *, agent_cli: str | None = None) -> Provider:
    """Where the task's own commands run: the local provider (environment_fidelity "host"), or,
    when the candidate's provider is remote, a sandbox from the task's image per command
    (sweep/providers/container.py, environment_fidelity "container")."""
    name = _options(ctx).provider
    if name == "local":
        return _provider(ctx)
    from sweep.providers import get_sandbox_provider
    from sweep.providers.base import SandboxError
    from sweep.providers.container import ContainerRunner
    try:
        sandboxes = get_sandbox_provider(name, **dict(ctx.campaign.settings.providers.get(name, {})))
    except SandboxError as exc:
        raise _provider_trouble(ctx, role, name, exc) from None
    except ConfigError as exc:
        raise Park(role if role in _PHASE_ROLE.values() else "author", "outage",
                   f"configuration error: provider {name}: {exc}", provider=name) from None
    try:
        return ContainerRunner(sandboxes, environment_dir=ctx.paths.task / "environment", run_dir=ctx.paths.dir,
                               campaign_id=ctx.campaign.file.campaign_id, run_id=ctx.run_id, job_id=ctx.job_id,
                               role=role, attempt=ctx.record.attempts + 1, agent_cli=agent_cli)
    except ConfigError as exc:
        # the task's own environment/Dockerfile (unreadable, a COPY of a missing file): the
        # bundle's fault, not the provider's, so it must not stop every run on that provider
        raise TaskImageProblem(str(exc)) from None


class TaskImageProblem(Exception):
    """The task's environment cannot give an image (judged as a failed gate, not a park)."""


def _provider_trouble(ctx: Ctx, role: str, provider: str, exc: Exception) -> Exception:
    """A remote provider's error during `role`, classified: outage/throttle park the run under the
    provider's cooldown, config parks it with the reason, failure fails the attempt."""
    cls = getattr(exc, "error_class", "failure")
    park = provider_park(role if role in _PHASE_ROLE.values() else "solver", provider, error_class=cls,
                         detail=str(exc)[:300])
    if park is not None:
        return park
    if cls == "config":
        return Park(role if role in _PHASE_ROLE.values() else "author", "outage",
                    f"configuration error: {provider}: {str(exc)[:300]}", provider=provider)
    return AttemptFailed(f"{provider} during {role}: {str(exc)[:300]}")


# Runtimes that run sweep's own code (they need this host's sweep installation): always on the host.
HOST_ONLY_RUNTIMES = frozenset({"oracle", "nop"})


def _session_provider(ctx: Ctx, role: str, runtime: str) -> Provider:
    """Where a role session runs: a solver with an agent runtime runs in the task's image when the
    provider is remote (the image gets the agent CLI's install layer for claude-code and codex);
    every other session runs on this host."""
    if role != "solver" or _options(ctx).provider == "local" or runtime in HOST_ONLY_RUNTIMES:
        return _provider(ctx)
    from sweep.providers.image import AGENT_CLIS
    try:
        return _trial_provider(ctx, role, agent_cli=runtime if runtime in AGENT_CLIS else None)
    except TaskImageProblem as exc:
        raise AttemptFailed(f"the task's image: {exc}") from None


def _image_identity(provider: Provider) -> str | None:
    image = getattr(provider, "image", None)
    return getattr(image, "identity", None)


def _limits(ctx: Ctx, role: RoleSpec | None = None) -> Limits:
    """The plan's resource bounds (docs/security.md); for a session, with its role manifest's
    `[limits]` over them. Trials keep the plan's (and their task.toml timeouts)."""
    plan = ctx.campaign.settings.limits
    return (plan.for_role(role.limits.overrides()) if role is not None else plan).to_limits()


def _roles(ctx: Ctx) -> tuple[dict[str, RoleSpec], dict[str, str]]:
    if ctx.roles_cache is None:
        from roles import load_roles_dir, manifest_sha256
        specs = load_roles_dir(ctx.campaign.dir / "roles")
        shas = {name: manifest_sha256(ctx.campaign.dir / "roles" / f"{name}.toml") for name in specs}
        ctx.roles_cache = (specs, shas)
    return ctx.roles_cache


def _source(ctx: Ctx) -> SourceEvidence:
    from sweep.controller.intake import load_source
    src = load_source(ctx.paths.dir)
    if src is None:
        raise AttemptFailed("source.json is missing or fails its checksum; intake will run again")
    return src


def _session_dir(ctx: Ctx, role: str) -> Path:
    root = make_private_dir(ctx.paths.sessions)
    n = sum(1 for p in root.iterdir() if p.is_dir()) + 1
    return make_private_dir(root / f"{n:04d}-{role}")


def _git_export(repo: str, commit: str, dest: Path) -> None:
    """The tree of `commit` into `dest`: git archive unpacked by tarfile's data filter (sweep.git),
    never an external tar running as whoever runs the controller."""
    from sweep.git import GitFailed, export_tree
    make_private_dir(dest)
    try:
        export_tree(repo, commit, dest, timeout=600)
        _make_private(dest)
    except GitFailed as exc:
        if exc.unsafe:
            # the tree itself (a `.git` entry, a path escaping the directory): the same on every
            # attempt, so it ends the run instead of burning the remaining attempts
            raise Ending(Outcome.blocked, EndReason.intake_failed, exc.message[-300:]) from None
        raise AttemptFailed(exc.message[-300:]) from None


def _make_private(root: Path) -> None:
    """git archive carries 0644/0755 modes, which tarfile restores: make the tree 0700/0600
    (0700 for executables), as every file of a run is (docs/state.md); copies keep these modes."""
    for base, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(base, name), 0o700, follow_symlinks=False) \
                if not os.path.islink(os.path.join(base, name)) else None
        for name in files:
            path = os.path.join(base, name)
            if os.path.islink(path):
                continue
            mode = os.stat(path).st_mode
            os.chmod(path, 0o700 if mode & 0o111 else 0o600)
    os.chmod(root, 0o700)


def _session(ctx: Ctx, role: str, workspace: Path, prompt: str, inputs: dict, *,
             reserve: float | None = None):
    """Reserve, run one role session, settle; classify failures into park / attempt."""
    from sweep.runtimes import SessionRequest, run_session
    specs, shas = _roles(ctx)
    if role not in specs:
        raise Ending(Outcome.blocked, EndReason.construction_failed, f"no manifest for role {role} in roles/")
    opts = _options(ctx)
    runtime = getattr(opts.runtimes, role)
    if reserve is None:
        from sweep.runtimes.base import UNPAID_RUNTIMES, session_reservation
        amount = session_reservation(runtime, specs[role].budget.cost_cap_usd, opts.worker_reservation_usd)
        if amount <= 0 and runtime not in UNPAID_RUNTIMES:
            raise Park(role, "outage", f"configuration error: a {runtime} session costs money but role {role} has "
                                       "no budget.cost_cap_usd and the plan no worker_reservation_usd, so "
                                       "nothing would bound it")
    else:
        amount = reserve
    ok, why = ctx.budget.can_spend(amount)
    if not ok:
        raise Ending(Outcome.generated_unverified if ctx.paths.task.exists() else Outcome.blocked,
                     EndReason.budget_exhausted, why)
    session_dir = _session_dir(ctx, role)
    op_id = session_dir.name
    ctx.budget.reserve(op_id, f"{role} session ({runtime})", amount)
    ctx.event("session_started", phase=ctx.record.phase.value, detail=f"{op_id} runtime {runtime}")
    try:
        req = SessionRequest(role=specs[role], manifest_sha256=shas[role], runtime=runtime,
                             runtime_options=dict(opts.runtime_options.get(role, {})), workspace=workspace,
                             session_dir=session_dir, prompt=prompt, inputs=inputs,
                             limits=_limits(ctx, specs[role]),
                             secrets=_role_secrets(ctx, specs[role], runtime, opts.runtime_options.get(role)))
        result = run_session(req, _session_provider(ctx, role, runtime))
    except (AttemptFailed, Park):
        ctx.budget.settle(op_id, 0.0)       # no remote sandbox could be had: nothing ran
        raise
    except SandboxError as exc:
        # the remote provider's trouble (the session ran, or began to, in the task's image): the
        # reservation is charged whole, since what the agent spent before it cannot be known;
        # unless it was refused before any sandbox existed (nothing_ran: nothing was spent)
        ctx.budget.settle(op_id, 0.0 if exc.nothing_ran else amount)
        ctx.event("session_done", phase=ctx.record.phase.value, detail=f"{op_id}: provider: {exc}")
        raise _provider_trouble(ctx, role, _options(ctx).provider, exc) from None
    except (ConfigError, ProviderError) as exc:
        # refused up front (bad runtime options, a runtime that cannot honour the manifest, an
        # edited manifest): nothing ran, so nothing was spent; the role stays stopped (and shows
        # in `sweep status`) until a human fixes it and the canary after the cooldown succeeds
        ctx.budget.settle(op_id, 0.0)
        ctx.event("session_done", phase=ctx.record.phase.value, detail=f"{op_id}: refused: {exc}")
        raise Park(role, "outage", f"configuration error: {exc}") from None
    # A runtime that cannot measure its cost (the command runtime) reports None: the session is
    # charged its whole reservation, never $0, or a campaign cap would not bind such runtimes.
    ctx.budget.settle(op_id, result.cost_usd)
    sandbox = f" [isolation {result.isolation}, network {result.network}]"
    ctx.event("session_done", phase=ctx.record.phase.value,
              detail=f"{op_id}: {result.status}{sandbox}" + (f" ({result.failure_class}: {result.reason or ''} "
                                                            f"{result.evidence[:200]})" if not result.ok else ""))
    if result.ok:
        clear_cooldown_after_success(ctx, role)
        return result
    if result.failure_class in ("outage", "throttle"):
        raise Park(role, result.failure_class, result.evidence or result.reason or result.status)
    if result.failure_class == "config":
        # a bad key or billing problem stops the whole key family (every role that uses it) until a
        # human fixes it: the cooldowns show in `sweep status`, and the canary after them tells
        # whether the fix worked
        family = specs[role].key_family
        same_family = sorted(name for name, spec in specs.items() if spec.key_family == family)
        raise Park(role, "outage", f"configuration error (key family {family}): "
                                   f"{result.evidence or result.reason}", also=tuple(same_family))
    return result


def _role_secrets(ctx: Ctx, spec, runtime: str, options: dict | None) -> dict:
    """The plan's secret for this role's key family, only for a runtime that talks to a model API."""
    # Asked of the runtime here, not in sweep.credentials: runtimes import credentials, not back.
    from sweep.credentials import session_secrets
    from sweep.runtimes import get_runtime
    if not get_runtime(runtime).capabilities(options or {}).uses_credentials:
        return {}
    return session_secrets(ctx.campaign.settings, spec.key_family)


def _redact_changed(workspace: Path, changed: list[str]) -> None:
    """Scrub every known secret from the files a session changed (kept in the run directory)."""
    from sweep.redact import Redactor
    redactor = Redactor()
    if redactor:
        for rel in changed:
            redactor.scrub_file(workspace / rel)


def _end_if_secret_in_bundle(ctx: Ctx, bundle: Path, revision: int, *, install: bool) -> None:
    """A bundle holding a secret (in any spelling sweep/redact.py knows) ends the run blocked.

    The files are redacted in place first, and the redacted bundle is installed as task/, so the
    evidence of what the author did is kept without the secret in it.
    """
    from sweep.redact import Redactor
    redactor = Redactor()
    leaked = redactor.files_with_secrets(bundle)
    if not leaked:
        return
    for rel in leaked:
        redactor.scrub_file(bundle / rel)
    if install:
        _install_bundle(ctx, bundle)
    write_json(ctx.evidence_path("secret-scan", revision),
               {"files": leaked, "redacted": True, "at": time.time()})
    shown = ", ".join(leaked[:5]) + (f" and {len(leaked) - 5} more" if len(leaked) > 5 else "")
    raise Ending(Outcome.blocked, EndReason.secret_in_bundle,
                 f"revision {revision} of the bundle held a secret (now redacted) in: {shown}")


# ---- phases -----------------------------------------------------------------------------------

def intake(ctx: Ctx):
    from sweep.controller.intake import GithubSettings, IntakeFailed, IntakeTransient, take_in
    prior = {p.strip().lower() for p in ctx.campaign.settings.prior_verified}
    fc = ctx.candidate
    if fc.pr_key.lower() in prior or (fc.candidate.url or "").lower() in prior or fc.run_id in prior:
        raise Ending(Outcome.blocked, EndReason.duplicate, f"{fc.pr_key} is in the plan's prior_verified")
    try:
        src = take_in(ctx.paths.dir, fc, GithubSettings.for_campaign(ctx.campaign.settings) if fc.candidate.url else None)
    except IntakeFailed as exc:
        raise Ending(Outcome.blocked, EndReason.intake_failed, str(exc)) from None
    except IntakeTransient as exc:
        raise AttemptFailed(f"intake: {exc}") from None
    return Phase.author, {"base": src.base, "head": src.head, "evidence_sha256": src.evidence_sha256,
                          "changed_files": len(src.changed_files)}


def author(ctx: Ctx):
    from sweep.harbor.bundle import bundle_sha256, validate_bundle
    src = _source(ctx)
    # after `sweep retry` revisions keep counting up, so no earlier evidence file is overwritten
    cps = _checkpoints(ctx)
    revision = max(cps.author_revision, cps.retry_after_revision) + 1
    findings = cps.repair.findings if cps.repair else []
    workspace = fresh_dir(ctx.paths.work / f"author-r{revision:04d}")
    _git_export(src.repo, src.base, workspace / "repo")
    make_private_dir(workspace / "task")
    prompt = _author_prompt(src, findings)
    runtime_source = {"kind": "git", "repo": src.repo, "base": src.base, "head": src.head,
                      "title": src.title, "body": src.body,
                      "test_command": src.test_command or "python3 -m unittest -q"}
    result = _session(ctx, "author", workspace, prompt, {"source": runtime_source, "findings": findings,
                                                        "revision": revision})
    if not result.ok:
        from sweep.harbor.pr_bundle import PERMANENT_REFUSALS
        if result.reason in PERMANENT_REFUSALS:     # the PR itself cannot become a task: retrying cannot help
            raise Ending(Outcome.blocked, EndReason.construction_failed, result.evidence or result.reason)
        raise AttemptFailed(f"author session {result.status}: {result.reason or ''} {result.evidence[:300]}")
    _make_private(workspace / "task")     # whatever modes the author's tools used
    _end_if_secret_in_bundle(ctx, workspace / "task", revision, install=True)
    problems = validate_bundle(workspace / "task")
    if problems:
        return _repair_or_end(ctx, "author", [f"bundle invalid: {p}" for p in problems[:10]],
                              no_bundle=not ctx.paths.task.exists())
    new_sha = bundle_sha256(workspace / "task")
    failed_before = _failed_gates_for(ctx, new_sha)
    if failed_before:
        # a repair that changes nothing cannot pass: re-running the gates would only re-roll a
        # flaky test until it passes by chance, which is exactly what the gates must not allow
        raise Ending(Outcome.generated_unverified, EndReason.gates_failed,
                     f"the author produced bundle {new_sha[:12]} again, which already failed the gates "
                     f"({failed_before})")
    _install_bundle(ctx, workspace / "task")
    return Phase.gates, {"revision": revision, "bundle_sha256": new_sha}


def _failed_gates_for(ctx: Ctx, sha: str) -> str | None:
    since = _checkpoints(ctx).retry_after_revision
    for path in sorted(ctx.paths.evidence.glob("gates-r*.json")):
        try:
            ev = read_evidence(path, GatesEvidence)
        except StateError:
            continue    # not gate evidence: it cannot say this bundle failed
        if ev is None or ev.revision <= since:
            continue    # judged before `sweep retry`: the operator asked for a fresh look
        if ev.bundle_sha256 == sha and ev.passed is False:
            return f"revision {ev.revision}: {', '.join(ev.failed())} failed"
    return None


PROMPT_DIFF_LIMIT = 200_000     # characters of the PR's diff in the author's prompt


def _pr_diff(src: SourceEvidence) -> str:
    """The PR's diff (base..head) as text for the prompt, cut at PROMPT_DIFF_LIMIT; "" if git fails."""
    from sweep.git import GitFailed, run_git
    try:
        out = run_git(["diff", "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames", src.base,
                       src.head, "--"], repo=src.repo, timeout=120)
    except GitFailed:
        return ""
    text = out.decode("utf-8", errors="replace")
    if len(text) > PROMPT_DIFF_LIMIT:
        text = text[:PROMPT_DIFF_LIMIT] + f"\n[diff cut at {PROMPT_DIFF_LIMIT} characters]\n"
    return text


def _author_prompt(src: SourceEvidence, findings: list[str]) -> str:
    # the author's instructions promise the PR's title, body and diff: all untrusted data, which
    # only ever becomes the content of the prompt file
    text = ["# Pull request", "", f"Title: {src.title}", "", "Body:", src.body or "(empty)", "",
            f"Base commit: {src.base}", f"Head commit: {src.head}", "",
            "Changed files:", *[f"- {f}" for f in src.changed_files[:200]]]
    diff = _pr_diff(src)
    if diff:
        text += ["", "Diff (base..head):", "```diff", diff.rstrip("\n"), "```"]
    if findings:
        text += ["", "# Repair: the previous bundle fell short", *[f"- {f}" for f in findings]]
    return "\n".join(text) + "\n"


def _install_bundle(ctx: Ctx, new_bundle: Path) -> None:
    """task/ <- new bundle; the previous task/ moves to revisions/NNNN/ (every revision is kept).

    Order matters for crashes: the new bundle is first copied next to task/, then the old task/ is
    renamed into revisions/, then the copy is renamed to task/. A crash leaves either the old
    task/ or a revision plus a staged copy, and the author phase (not yet checkpointed) reruns.
    """
    staged = ctx.paths.staged_task
    if staged.exists():
        shutil.rmtree(staged)
    shutil.copytree(new_bundle, staged, symlinks=True)
    task = ctx.paths.task
    if task.exists():
        revisions = make_private_dir(ctx.paths.revisions)
        n = sum(1 for _ in revisions.iterdir()) + 1
        os.rename(task, revisions / f"{n:04d}")
    os.rename(staged, task)


def _repair_or_end(ctx: Ctx, where: str, findings: list[str], *, no_bundle: bool = False):
    quality = _options(ctx).quality
    repair = _checkpoints(ctx).repair
    repairs = repair.count if repair else 0
    if quality.repair and repairs < quality.max_repairs:
        ctx.event("repair", phase=ctx.record.phase.value,
                  detail=f"repair {repairs + 1}/{quality.max_repairs} after {where}: " + "; ".join(findings)[:300])
        checkpoints = {k: v for k, v in ctx.record.checkpoints.items() if k not in ("gates", "review", "solve")}
        checkpoints["repair"] = {"count": repairs + 1, "findings": findings, "after": where, "at": time.time()}
        ctx.save(checkpoints=checkpoints)
        return Phase.author, {"repair": repairs + 1, "after": where}
    if no_bundle:
        raise Ending(Outcome.blocked, EndReason.construction_failed, f"{where}: " + "; ".join(findings)[:500])
    raise Ending(Outcome.generated_unverified, EndReason(f"{where}_failed"), "; ".join(findings)[:500])


def gate_hash_seed(repeat: int) -> int:
    """PYTHONHASHSEED of gate repeat `repeat` (0-based): fixed, and different on every repeat.

    Fixed, so the gates give the same verdict for the same bundle every time (a re-run cannot
    re-roll a flaky test into a pass); different per repeat, so a test that depends on the
    iteration order of a set or dict of strings (a classic real flakiness source) shows its
    flakiness as a difference between repeats instead of passing by luck.
    """
    return repeat + 1


def gates(ctx: Ctx):
    from sweep.harbor.bundle import bundle_sha256, validate_bundle
    from sweep.harbor.trial import run_trial
    bundle = ctx.paths.task
    sha = bundle_sha256(bundle)
    revision = _checkpoints(ctx).author_revision
    repeats = _options(ctx).quality.gate_repeats
    problems = validate_bundle(bundle)
    results: dict = {"valid": {"ok": not problems, "detail": "; ".join(problems[:5])}}
    provider = _provider(ctx)
    if not problems:
        try:
            provider = _trial_provider(ctx, "gates")
        except TaskImageProblem as exc:
            results["image"] = {"ok": False, "detail": str(exc)[:300]}
    if not problems and "image" not in results:
        from sweep.harbor import junit
        rewards: dict[str, list[float | None]] = {"reference": [], "empty": []}    # None: no reward
        details: dict[str, list[str]] = {"reference": [], "empty": []}
        reports: dict[str, list[Any]] = {"reference": [], "empty": []}      # per-test outcomes of each run (JUnit)
        for i in range(repeats):
            for kind in ("reference", "empty"):
                work = fresh_dir(ctx.paths.work / f"gates-r{revision:04d}-{kind}-{i}")
                try:
                    trial = run_trial(bundle, kind, provider=provider, workdir=work, timeout_s=TRIAL_TIMEOUT_S,
                                      env={"PYTHONHASHSEED": str(gate_hash_seed(i))}, limits=_limits(ctx))
                except ProviderError as exc:       # the remote provider's trouble, never the task's verdict
                    raise _provider_trouble(ctx, "gates", provider.name, exc) from None
                rewards[kind].append(trial.reward)
                details[kind].append(trial.detail)
                try:
                    reports[kind].append(junit.read_junit(Path(trial.workdir or work) / "logs" / "verifier"))
                except junit.ReportProblem as exc:
                    reports[kind].append(exc)
                shutil.rmtree(work, ignore_errors=True)
        results["reference"] = {"ok": all(r == 1.0 for r in rewards["reference"]), "rewards": rewards["reference"],
                                "detail": "; ".join(d for d in details["reference"] if d)[:300]}
        results["empty"] = {"ok": all(r == 0.0 for r in rewards["empty"]),
                            "rewards": rewards["empty"], "detail": "; ".join(d for d in details["empty"] if d)[:300]}
        results["repeat"] = {"ok": len(set(rewards["reference"])) == 1 and len(set(rewards["empty"])) == 1,
                             "detail": "same result on every repeat" if len(set(rewards["reference"])) == 1
                             and len(set(rewards["empty"])) == 1 else "results differ between repeats: flaky"}
        # a task is verified only if some test fails before the fix and passes after it
        results["fail_to_pass"] = junit.compare_runs(reports["empty"], reports["reference"]).as_evidence()
    passed = all(r["ok"] for r in results.values())
    evidence = GatesEvidence(bundle_sha256=sha, revision=revision, repeats=repeats, passed=passed, gates=results,
                             hash_seeds=[gate_hash_seed(i) for i in range(repeats)],
                             environment_fidelity=provider.environment_fidelity if not problems else "host",
                             image=_image_identity(provider) if not problems else None, at=time.time(),
                             isolation=provider.isolation if not problems else None)
    write_json(ctx.evidence_path("gates", revision), evidence.to_json())
    if not passed:
        failed = [f"gate {name}: {r.get('detail') or r.get('rewards')}" for name, r in results.items() if not r["ok"]]
        return _repair_or_end(ctx, "gates", failed)
    return Phase.review, {"passed": True, "bundle_sha256": sha, "revision": revision}


def review(ctx: Ctx):
    from sweep.harbor.bundle import bundle_sha256
    bundle = ctx.paths.task
    sha = bundle_sha256(bundle)
    revision = _checkpoints(ctx).author_revision
    gates_cp = _checkpoints(ctx).gates
    try:
        gates_read = read_evidence(ctx.paths.evidence_file("gates", revision), GatesEvidence)
    except StateError as exc:
        raise AttemptFailed(str(exc)) from None
    gates_evidence = {"gates": {k: g.to_json() for k, g in gates_read.gates.items()}} if gates_read else {}
    import orjson
    workspace = fresh_dir(ctx.paths.work / f"review-r{revision:04d}")
    copy_tree(bundle, workspace / "task")
    prompt = ("# Review this task bundle\n\nThe bundle is in `task/`. The controller's gate results:\n\n"
              + orjson.dumps(gates_evidence.get("gates", {}), option=orjson.OPT_INDENT_2).decode() + "\n")
    result = _session(ctx, "reviewer", workspace, prompt,
                      {"gates": gates_evidence.get("gates", {}), "bundle_dir": str(workspace / "task"),
                       "bundle_sha256": sha})
    if not result.ok:
        raise AttemptFailed(f"reviewer session {result.status}: {result.reason or ''} {result.evidence[:300]}")
    try:
        verdict = ReviewVerdict.model_validate(result.structured_output or {})
    except ValidationError as exc:
        raise AttemptFailed(f"reviewer output: {describe_validation_error(exc)}") from None
    decision = verdict.verdict
    findings = [str(f) for f in verdict.findings][:20]
    write_json(ctx.evidence_path("review", revision),
               ReviewEvidence(bundle_sha256=sha, gates_bundle_sha256=gates_cp.bundle_sha256 if gates_cp else None,
                              verdict=verdict, at=time.time()).to_json())
    if decision == "accept":
        quality = _options(ctx).quality
        nxt = Phase.solve if quality.run_rollout and quality.rollouts > 0 else Phase.evaluate
        return nxt, {"verdict": "accept", "bundle_sha256": sha, "revision": revision}
    if decision == "revise":
        return _repair_or_end(ctx, "review", findings or [verdict.rationale if "rationale" in verdict.model_fields_set
                                                          else "reviewer asked for a revision"])
    if decision == "reject":
        raise Ending(Outcome.generated_unverified, EndReason.review_rejected,
                     "; ".join(findings)[:500] or str(verdict.rationale if verdict.rationale is not None else "")[:500])
    raise AttemptFailed(f"reviewer verdict {decision!r} is not accept/revise/reject")


def solve(ctx: Ctx):
    from sweep.harbor.bundle import bundle_sha256
    from sweep.harbor.trial import run_trial
    bundle = ctx.paths.task
    sha = bundle_sha256(bundle)
    revision = _checkpoints(ctx).author_revision
    opts = _options(ctx)
    instruction = (bundle / "instruction.md").read_text(errors="replace")
    rewards = []
    for k in range(opts.quality.rollouts):
        workspace = fresh_dir(ctx.paths.work / f"solve-r{revision:04d}-{k}")
        copy_tree(bundle / "environment" / "repo", workspace / "repo")
        # blind: the solver sees the instruction and the starting repository, never the tests or
        # the reference solution (the oracle control is the one exception: it IS the reference)
        inputs = {"reference_solution": str(bundle / "solution")} if opts.runtimes.solver == "oracle" else {}
        result = _session(ctx, "solver", workspace, instruction, inputs)
        _redact_changed(workspace, result.changed_paths)     # the solver's repo stays in the run dir
        if not result.ok:
            rewards.append({"rollout": k, "reward": None, "session": result.status,
                            "detail": (result.reason or result.evidence)[:200]})
            continue
        trial_dir = fresh_dir(ctx.paths.work / f"solve-r{revision:04d}-{k}-trial")
        try:
            runner = _trial_provider(ctx, "solver")
        except TaskImageProblem as exc:
            raise AttemptFailed(f"the task's image: {exc}") from None
        try:
            trial = run_trial(bundle, workspace / "repo", provider=runner, workdir=trial_dir,
                              timeout_s=TRIAL_TIMEOUT_S, limits=_limits(ctx))
        except ProviderError as exc:
            raise _provider_trouble(ctx, "solver", runner.name, exc) from None
        shutil.rmtree(trial_dir, ignore_errors=True)
        rewards.append({"rollout": k, "reward": trial.reward, "session": "ok", "detail": trial.detail[:200],
                        "environment_fidelity": trial.environment_fidelity})
    evidence = SolveEvidence.model_validate({"bundle_sha256": sha, "runtime": opts.runtimes.solver,
                                             "rollouts": rewards, "at": time.time()})
    write_json(ctx.evidence_path("solve", revision), evidence.to_json())
    return Phase.evaluate, {"bundle_sha256": sha, "rewards": [r["reward"] for r in rewards]}


def evaluate(ctx: Ctx):
    from sweep.harbor.bundle import bundle_sha256
    cps = _checkpoints(ctx)
    bundle = ctx.paths.task
    if not bundle.exists():
        raise Ending(Outcome.blocked, EndReason.construction_failed, "no task bundle was produced")
    _end_if_secret_in_bundle(ctx, bundle, cps.author_revision, install=False)
    sha = bundle_sha256(bundle)
    gates_ok = cps.gates is not None and cps.gates.passed is True and cps.gates.bundle_sha256 == sha
    review_ok = cps.review is not None and cps.review.verdict == "accept" and cps.review.bundle_sha256 == sha
    solve_sha = cps.solve.bundle_sha256 if cps.solve else None
    if gates_ok and review_ok and solve_sha in (None, sha):
        raise Ending(Outcome.verified, None, f"gates passed and review accepted for bundle {sha[:12]}")
    missing = [name for name, ok in (("gates", gates_ok), ("review", review_ok)) if not ok]
    raise Ending(Outcome.generated_unverified, EndReason.evidence_incomplete,
                 f"{', '.join(missing)} not passed for the current bundle {sha[:12]}")


RUNNERS = {Phase.intake: intake, Phase.author: author, Phase.gates: gates, Phase.review: review,
           Phase.solve: solve, Phase.evaluate: evaluate}
