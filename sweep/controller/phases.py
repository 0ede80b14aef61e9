"""The functions that run the phases of the phase table (runstate/phases.py). Each returns (next
phase, its typed checkpoint) or raises Ending / Park / AttemptFailed (see pipeline.py for what each
does to the record); the next phase is the table's (`_after`), or the author after a repair.

Paid work (every role session) is reserved in spend.json before it starts and settled after.
Every task bundle the author produces is kept: the current one is `task/`, each earlier one moves
to `revisions/NNNN/`, and all evidence (gates, verdicts, rewards) names the bundle's sha256.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

from pydantic import ValidationError

from roles import RoleSpec
from runstate.errors import ConfigError, ProviderError, StateError, describe_validation_error
from runstate.files import make_private_dir
from runstate.checkpoints import (Checkpoint, GatesCheckpoint, IntakeCheckpoint, ProbesCheckpoint, RepairCheckpoint,
                                  ReviewCheckpoint, SolveCheckpoint)
from runstate.models import EndReason, Outcome, Phase
from runstate.phases import PHASE_TABLE, table_of
from sweep.models.evidence import (Checkpoints, GatesEvidence, MutationScore, ProbeRecord, ProbesEvidence,
                                   ReadinessEvidence, ReviewEvidence, ReviewVerdict, SecretScanEvidence, SolveEvidence, SourceEvidence,
                                   read_evidence)
from sweep.controller.context import (AttemptFailed, Ctx, Ending, Park, clear_cooldown_after_success, fresh_dir,
                                      provider_park, write_json)
from sweep.execution import Limits, Provider
from sweep.providers.base import SandboxError
from sweep.tree import copy_tree, require_real_dir

TRIAL_TIMEOUT_S = 900
KILLED_TRIAL_PAUSE_S = 1.0     # before a gate trial killed from outside runs again


# ---- shared helpers ---------------------------------------------------------------------------

def _checkpoints(ctx: Ctx) -> Checkpoints:
    """state.json's checkpoints, read through their model (a malformed one is a StateError)."""
    return Checkpoints.of(ctx.record.checkpoints, where=str(ctx.paths.state))


def _options(ctx: Ctx):
    return ctx.candidate.candidate.options


def runner(phase: str) -> Callable[[Ctx], tuple[str, Checkpoint]]:
    """The function that runs `phase`: its row's `runner` (runstate/phases.py), imported on first use."""
    import importlib
    module, func = table_of(phase).row(phase).runner_ref
    return getattr(importlib.import_module(module), func)


def _after(ctx: Ctx, phase: str) -> str:
    """The phase after `phase` in the table; the solve phase is passed over when the plan asks
    for no rollouts (the one phase a plan can switch off)."""
    nxt = PHASE_TABLE.after(phase)
    quality = _options(ctx).quality
    if nxt == Phase.solve and not (quality.run_rollout and quality.rollouts > 0):
        nxt = PHASE_TABLE.after(nxt)
    if nxt is None:
        raise RuntimeError(f"phase {phase} is the table's last row: it must end the run, not go on")
    return nxt


def _is_role(name: str) -> bool:
    return name in PHASE_TABLE.roles


def _provider(ctx: Ctx) -> Provider:
    from sweep.providers import get_provider
    from sweep.providers.local.bwrap import ProbeInconclusive
    if ctx.provider_cache is None:
        try:
            # author and reviewer sessions (and oracle solvers) run on this host whatever the plan's
            # provider: the task image they would need is what the author is still writing
            declared = ctx.campaign.settings.environment
            ctx.provider_cache = get_provider("local", isolation=ctx.campaign.settings.isolation,
                                              environment=declared.sandbox() if declared is not None else None)
        except ProbeInconclusive as exc:
            # the probe was killed or stalled, every try: not the set-up's fault, so no config
            # park (which stops the role and trips the breaker at once), an ordinary failed attempt
            raise AttemptFailed(f"the sandbox could not be checked: {exc}", cause="check_interrupted") from None
        except (ConfigError, ProviderError) as exc:
            # nothing may run unsandboxed by accident: the run parks with the reason, every role
            table = table_of(ctx.record.phase)
            raise Park(table.role_of(ctx.record.phase) or table.roles[0], "outage", f"configuration error: {exc}",
                       also=table.roles) from None
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
        settings = ctx.campaign.settings.providers.get(name)
        sandboxes = get_sandbox_provider(name, **(settings.options() if settings else {}))
    except SandboxError as exc:
        raise _provider_trouble(ctx, role, name, exc) from None
    except ConfigError as exc:
        raise Park(role if _is_role(role) else "author", "outage",
                   f"configuration error: provider {name}: {exc}", provider=name) from None
    try:
        return ContainerRunner(sandboxes, environment_dir=ctx.paths.task / "environment", run_dir=ctx.paths.dir,
                               campaign_id=ctx.campaign.file.campaign_id, run_id=ctx.run_id, job_id=ctx.job_id,
                               role=role, attempt=ctx.record.attempts + 1, agent_cli=agent_cli,
                               agent_key_in_sandbox=bool(settings and settings.agent_key_in_sandbox))
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
    park = provider_park(role if _is_role(role) else "solver", provider, error_class=cls,
                         detail=str(exc)[:300])
    if park is not None:
        return park
    if cls == "config":
        return Park(role if _is_role(role) else "author", "outage",
                    f"configuration error: {provider}: {str(exc)[:300]}", provider=provider)
    return AttemptFailed(f"{provider} during {role}: {str(exc)[:300]}")


def _session_provider(ctx: Ctx, role: str, runtime: str) -> Provider:
    """Where a role session runs: a solver with an agent runtime runs in the task's image when the
    provider is remote (the image gets the install layer of the agent CLI the runtime drives);
    every other session, and a runtime that runs sweep's own code (host_only), runs on this host."""
    from sweep.runtimes.facts import facts_of
    facts = facts_of(runtime)
    if role != "solver" or _options(ctx).provider == "local" or facts.host_only:
        return _provider(ctx)
    try:
        return _trial_provider(ctx, role, agent_cli=facts.cli.npm_spec if facts.cli else None)
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
        specs = load_roles_dir(ctx.campaign.paths.roles)
        shas = {name: manifest_sha256(ctx.campaign.paths.role_manifest(name)) for name in specs}
        ctx.roles_cache = (specs, shas)
    return ctx.roles_cache


def source_names(cand, src: SourceEvidence) -> tuple[str, str]:
    """(the PR's name, the repository's name) without a host path: the PR's URL when it has one,
    otherwise `<repository directory name>@<base>..<head>` (as the export names it)."""
    url = cand.candidate.url or src.url
    repo = os.path.basename(str(cand.candidate.repo or "").rstrip("/")) or "repo"
    return (url or f"{repo}@{src.base}..{src.head}"), repo


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


def _git_export(ctx: Ctx, repo: str, commit: str, dest: Path) -> None:
    """Exactly the tree of `commit` into `dest` (sweep.git.export_tree: ls-tree and cat-file into
    files created under dir descriptors; no archive, no filters, no export-subst), refused before
    any byte when it is bigger than the plan's workspace bound."""
    from sweep.git import GitFailed, export_tree
    make_private_dir(dest)
    try:
        export_tree(repo, commit, dest, timeout=600, max_bytes=ctx.campaign.settings.limits.to_limits().workspace_bytes)
        _make_private(dest)
    except GitFailed as exc:
        if exc.unsafe:
            # the tree itself (a `.git` entry, a path escaping the directory, more bytes than the
            # bound): the same on every attempt, so it ends the run instead of burning the rest
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
             reserve: float | None = None, escalation=None):
    """Reserve, run one role session, settle; classify failures into park / attempt.
    `escalation` (quality.escalation): run it with that runtime and its options instead."""
    from sweep.runtimes import SessionRequest, run_session
    specs, shas = _roles(ctx)
    if role not in specs:
        raise Ending(Outcome.blocked, EndReason.construction_failed, f"no manifest for role {role} in roles/")
    opts = _options(ctx)
    runtime = getattr(opts.runtimes, role) if escalation is None else escalation.runtime
    role_options = (dict(opts.runtime_options.get(role, {})) if escalation is None
                    else dict(escalation.runtime_options))
    if reserve is None:
        from sweep.runtimes.base import session_reservation
        from sweep.runtimes.facts import facts_of
        amount = session_reservation(runtime, specs[role].budget.cost_cap_usd, opts.worker_reservation_usd)
        if amount <= 0 and facts_of(runtime).paid:
            raise Park(role, "outage", f"configuration error: a {runtime} session costs money but role {role} has "
                                       "no budget.cost_cap_usd and the plan no worker_reservation_usd, so "
                                       "nothing would bound it")
    else:
        amount = reserve
    session_dir, limit = _reserve_session(ctx, role, runtime, amount, specs[role].budget.cost_cap_usd)
    op_id = session_dir.name
    ctx.event("session_started", phase=ctx.record.phase, detail=f"{op_id} runtime {runtime}")
    try:
        req = SessionRequest(role=specs[role], manifest_sha256=shas[role], runtime=runtime,
                             runtime_options=role_options, workspace=workspace,
                             session_dir=session_dir, prompt=prompt, inputs=inputs,
                             limits=_limits(ctx, specs[role]), cost_limit_usd=limit,
                             secrets=_role_secrets(ctx, specs[role], runtime, role_options))
        result = run_session(req, _session_provider(ctx, role, runtime))
    except (AttemptFailed, Park):
        ctx.budget.settle(op_id, 0.0)       # no remote sandbox could be had: nothing ran
        raise
    except SandboxError as exc:
        # the remote provider's trouble (the session ran, or began to, in the task's image): the
        # reservation is charged whole, since what the agent spent before it cannot be known;
        # unless it was refused before any sandbox existed (nothing_ran: nothing was spent)
        ctx.budget.settle(op_id, 0.0 if exc.nothing_ran else amount)
        ctx.event("session_done", phase=ctx.record.phase, detail=f"{op_id}: provider: {exc}")
        raise _provider_trouble(ctx, role, _options(ctx).provider, exc) from None
    except (ConfigError, ProviderError) as exc:
        # refused up front (bad runtime options, a runtime that cannot honour the manifest, an
        # edited manifest): nothing ran, so nothing was spent; the role stays stopped (and shows
        # in `sweep status`) until a human fixes it and the canary after the cooldown succeeds
        ctx.budget.settle(op_id, 0.0)
        ctx.event("session_done", phase=ctx.record.phase, detail=f"{op_id}: refused: {exc}")
        raise Park(role, "outage", f"configuration error: {exc}") from None
    # A runtime that cannot measure its cost (the command runtime) reports None: the session is
    # charged its whole reservation, never $0, or a campaign cap would not bind such runtimes.
    ctx.budget.settle(op_id, result.cost_usd, bounded=_metered_at_wire(result))
    _end_if_quality_spent(ctx)
    sandbox = f" [isolation {result.isolation}, network {result.network}]"
    ctx.event("session_done", phase=ctx.record.phase,
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
        from sweep.runtimes import key_family_of
        family = key_family_of(specs[role], runtime)
        same_family = sorted(name for name, spec in specs.items()
                             if key_family_of(spec, getattr(opts.runtimes, name)) == family)
        raise Park(role, "outage", f"configuration error (key family {family}): "
                                   f"{result.evidence or result.reason}", also=tuple(same_family))
    return result


QUALITY_SCOPE = "quality"


def _metered_at_wire(result) -> bool:
    """Whether the session's cost is what its wire relay metered, every response of it (the relay
    refuses requests at the session's limit, so the cost is bounded by it plus one response)."""
    report = result.report or {}
    return result.cost_usd is not None and report.get("metered_cost_usd") == result.cost_usd


def _reserve_session(ctx: Ctx, role: str, runtime: str, amount: float,
                     role_cap: float | None) -> tuple[Path, float | None]:
    """Reserve `amount` for a session of `role` (ending the run when the allocation or the quality
    scope cannot cover it); its new session directory and the cost bound it is given."""
    scope = _budget_scope(ctx, role)
    cap = _options(ctx).quality.max_spend_usd if scope == QUALITY_SCOPE else None
    ok, why = ctx.budget.can_spend(amount, scope=scope, scope_cap=cap, cap_name="quality.max_spend_usd")
    if not ok:
        _end_on_budget(ctx, why)
    session_dir = _session_dir(ctx, role)
    # what the session may spend: its role's cap, its reservation, the allocation's rest and the
    # quality scope's rest; the CLI's own cap flag gets it, and the metering relay refuses further
    # requests once it is reached
    left = None if ctx.budget.allocation is None else max(0.0, ctx.budget.allocation - ctx.budget.committed)
    bounds = [x for x in (role_cap, amount or None, left, ctx.budget.scope_left(scope, cap) if scope else None)
              if x is not None]
    ctx.budget.reserve(session_dir.name, f"{role} session ({runtime})", amount, scope=scope)
    return session_dir, min(bounds) if bounds else None


def _budget_scope(ctx: Ctx, role: str) -> str | None:
    """The quality scope holds every session after the first bundle's authoring: the reviews, the
    repairs (an author session with findings to address) and the rollouts."""
    if role == "author" and _checkpoints(ctx).repair is None:
        return None
    return QUALITY_SCOPE


def _end_on_budget(ctx: Ctx, why: str) -> NoReturn:
    raise Ending(Outcome.generated_unverified if ctx.paths.task.exists() else Outcome.blocked,
                 EndReason.budget_exhausted, why)


def _end_if_quality_spent(ctx: Ctx) -> None:
    """Past `quality.max_spend_usd` the quality loop ends at once with the budget cause, whatever
    the work that cost it found: evidence bought beyond its bound verifies nothing."""
    cap = _options(ctx).quality.max_spend_usd
    if cap is None:
        return
    spent = ctx.budget.committed_in(QUALITY_SCOPE)
    if spent > cap + 1e-9:
        _end_on_budget(ctx, f"quality.max_spend_usd {cap:.2f} USD reached: the reviews, repairs and rollouts "
                            f"committed {spent:.2f}")


def _role_secrets(ctx: Ctx, spec, runtime: str, options: dict | None) -> dict:
    """The plan's secret for this role's key family, only for a runtime that talks to a model API."""
    # Asked of the runtime here, not in sweep.credentials: runtimes import credentials, not back.
    from sweep.credentials import session_secrets
    from sweep.runtimes import get_runtime
    if not get_runtime(runtime).capabilities(options or {}).uses_credentials:
        return {}
    from sweep.runtimes import key_family_of
    return session_secrets(ctx.campaign.settings, key_family_of(spec, runtime))


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
               SecretScanEvidence(files=leaked, redacted=True, at=time.time()).for_disk())
    shown = ", ".join(leaked[:5]) + (f" and {len(leaked) - 5} more" if len(leaked) > 5 else "")
    raise Ending(Outcome.blocked, EndReason.secret_in_bundle,
                 f"revision {revision} of the bundle held a secret (now redacted) in: {shown}")


# ---- phases -----------------------------------------------------------------------------------

def intake(ctx: Ctx) -> tuple[str, Checkpoint]:
    from sweep.controller.intake import GithubSettings, IntakeFailed, IntakeTransient, take_in
    from sweep.priors import duplicate_of
    fc = ctx.candidate
    try:
        src = take_in(ctx.paths.dir, fc, GithubSettings.for_campaign(ctx.campaign.settings) if fc.candidate.url else None)
    except IntakeFailed as exc:
        raise Ending(Outcome.blocked, EndReason.intake_failed, str(exc)) from None
    except IntakeTransient as exc:
        raise AttemptFailed(f"intake: {exc}") from None
    # init wrote the duplicates it could see ended; a GitHub PR's commits are known only now
    prior = duplicate_of(ctx.campaign.file.priors, fc.pr_key, (src.base, src.head))
    if prior is not None:
        raise Ending(Outcome.blocked, EndReason.duplicate,
                     f"the same PR (commits {src.base[:12]}..{src.head[:12]}) as the verified prior {prior.entry}")
    return _after(ctx, Phase.intake), IntakeCheckpoint(base=src.base, head=src.head,
                                                       evidence_sha256=src.evidence_sha256,
                                                       changed_files=len(src.changed_files))


def author(ctx: Ctx) -> tuple[str, Checkpoint]:
    from sweep.harbor.bundle import bundle_sha256, validate_bundle
    from sweep.harbor.verification import DEFAULT_TEST_COMMAND
    src = _source(ctx)
    # after `sweep retry` revisions keep counting up, so no earlier evidence file is overwritten
    cps = _checkpoints(ctx)
    revision = max(cps.author_revision, cps.retry_after_revision) + 1
    findings = cps.repair.findings if cps.repair else []
    workspace = fresh_dir(ctx.paths.work / f"author-r{revision:04d}")
    _git_export(ctx, src.repo, src.base, workspace / "repo")
    make_private_dir(workspace / "task")
    if findings and ctx.paths.task.is_dir():
        # a repair starts from the bundle that fell short (the prompt says so and what failed)
        copy_tree(ctx.paths.task, workspace / "task")
    prompt = _author_prompt(src, findings, ctx.campaign.settings.limits.prompt_diff_kb * 1024, revision,
                            _options(ctx).test_runner)
    runtime_source = {"kind": "git", "repo": src.repo, "base": src.base, "head": src.head,
                      "title": src.title, "body": src.body,
                      "test_command": src.test_command or DEFAULT_TEST_COMMAND,  # what the gates run too
                      "test_runner": _options(ctx).test_runner,
                      # how the bundle's task.toml names the PR: never the private copy's host path
                      "source_name": source_names(ctx.candidate, src)[0]}
    if src.test_workdir:
        runtime_source["test_workdir"] = src.test_workdir
    _check_readiness(ctx, runtime_source)
    result = _session(ctx, "author", workspace, prompt, {"source": runtime_source, "findings": findings,
                                                        "revision": revision})
    if not result.ok:
        from sweep.harbor.pr_bundle import PERMANENT_REFUSALS
        if result.reason in PERMANENT_REFUSALS:     # the PR itself cannot become a task: retrying cannot help
            raise Ending(Outcome.blocked, EndReason.construction_failed, result.evidence or result.reason)
        raise AttemptFailed(f"author session {result.status}: {result.reason or ''} {result.evidence[:300]}")
    if (workspace / "task").is_symlink() or not (workspace / "task").is_dir():
        # before anything walks it: a task/ made a link would have the host's directory it names
        # chmod-ed, scanned and copied as the bundle
        return _repair_or_end(ctx, "author", ["bundle invalid: task/ is not a directory (a symlink, or removed)"],
                              no_bundle=not ctx.paths.task.exists())
    _make_private(workspace / "task")     # whatever modes the author's tools used
    _end_if_secret_in_bundle(ctx, workspace / "task", revision, install=True)
    problems = validate_bundle(workspace / "task")
    if problems:
        return _repair_or_end(ctx, "author", [f"bundle invalid: {p}" for p in problems[:10]],
                              no_bundle=not ctx.paths.task.exists())
    new_sha = bundle_sha256(workspace / "task")
    failed_before, passed_before_fix = _failed_gates_for(ctx, new_sha)
    if failed_before:
        # a repair that changes nothing cannot pass: re-running the gates would only re-roll a
        # flaky test until it passes by chance, which is exactly what the gates must not allow
        raise Ending(Outcome.generated_unverified,
                     EndReason.passes_before_fix if passed_before_fix else EndReason.gates_failed,
                     f"the author produced bundle {new_sha[:12]} again, which already failed the gates "
                     f"({failed_before})")
    _install_bundle(ctx, workspace / "task")
    if not findings:
        _end_if_prepared_probes_stale(ctx, new_sha)
    return _after(ctx, Phase.author), Checkpoint(revision=revision, bundle_sha256=new_sha)


def _end_if_prepared_probes_stale(ctx: Ctx, sha: str) -> None:
    """The plan's prepared probes are bound to the bundle they were written for: a bundle built
    afresh (not a repair) with another sha256 ends the run before the gates and before any paid
    session (init allows prepared probes only with an unpaid author). The ending names the sha256
    the run built, which is how a plan gets it (docs/campaign.md)."""
    stale = [p for p in ctx.candidate.candidate.prepared_probes if p.bundle_sha256 != sha]
    if stale:
        shown = ", ".join(f"{p.name} ({p.bundle_sha256[:12]})" for p in stale[:5])
        raise Ending(Outcome.blocked, EndReason.prepared_probes_stale,
                     f"this run built bundle {sha}; prepared probes bound to another bundle: {shown}"[:500],
                     cause="prepared_probes_stale")


def _check_readiness(ctx: Ctx, source: dict) -> None:
    """The test command, run once per run on the base checkout in this job's environment, before
    the author's first session (sweep/readiness.py). A failure, confirmed by a second run, parks
    the run as a configuration error of the author role with its cause: nothing is spent on a
    campaign whose environment cannot run its tests, and the role's cooldown holds the other runs
    until it is fixed. A pass is kept as evidence/readiness-r0000.json, so the check runs once per run."""
    done = ctx.paths.evidence_file("readiness", 0)
    if done.is_file() or _options(ctx).provider != "local":
        return      # done for this run; a remote provider's trials run in the task's image instead
    # a failure is confirmed by a second run before it parks the run and trips the breaker: a
    # broken environment fails both, a check whose process was killed (an OOM kill, the TERM of
    # a scancel reaching it before this controller) or starved fails once
    ready = _readiness_once(ctx, source, "")
    if not ready.ok:
        ready = _readiness_once(ctx, source, "confirming: ")
    if not ready.ok:
        raise Park("author", "outage", f"configuration error: {ready.cause}: {ready.detail}")
    write_json(ctx.evidence_path("readiness", 0),
               ReadinessEvidence.model_validate({**ready.as_json(), "at": time.time()}).for_disk())


def _readiness_once(ctx: Ctx, source: dict, label: str):
    from sweep.readiness import check_source
    scratch = fresh_dir(ctx.paths.work / "readiness")
    try:
        ready = check_source(source, _provider(ctx), scratch, limits=_limits(ctx))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ctx.event("readiness", phase=ctx.record.phase, detail=label + ready.line())
    return ready


def passes_before_fix(gates: dict) -> bool:
    """The gates failed only because the tests pass before the fix: the reference scores 1 and so
    does the empty solution, on every repeat."""
    def rewards(name: str) -> list:
        result = gates.get(name)
        got = result.get("rewards") if isinstance(result, dict) else getattr(result, "rewards", None)
        return list(got or [])
    ref, empty = rewards("reference"), rewards("empty")
    return bool(ref) and bool(empty) and all(r == 1.0 for r in ref) and all(r == 1.0 for r in empty)


def _failed_gates_for(ctx: Ctx, sha: str) -> tuple[str | None, bool]:
    """(which gates the bundle `sha` already failed, whether because its tests pass before the fix)."""
    since = _checkpoints(ctx).retry_after_revision
    for path in sorted(ctx.paths.evidence.glob("gates-r*.json")):
        try:
            ev = read_evidence(path, GatesEvidence)
        except StateError:
            continue    # not gate evidence: it cannot say this bundle failed
        if ev is None or ev.revision <= since:
            continue    # judged before `sweep retry`: the operator asked for a fresh look
        if ev.bundle_sha256 == sha and ev.passed is False:
            return f"revision {ev.revision}: {', '.join(ev.failed())} failed", passes_before_fix(ev.gates)
    return None, False


PROMPT_FILES_LISTED = 200       # files named with their sizes in the author's prompt
PROMPT_FILE_DIFFED = 1 << 20    # a file bigger than this (and than the limit) is summarised, never diffed


def _pr_diff(src: SourceEvidence, limit: int) -> str:
    """The PR's diff for the author's prompt, bounded whatever the PR holds: a summary of the changed
    files with their sizes (from the object headers: no content read), then the first `limit` bytes
    of the diff of the files small enough to diff (a file bigger than `limit` and 1 MiB on either
    side is left out before git runs, so a 400 MB text file is never diffed); streamed, git stopped
    at the limit. "" if git fails."""
    from sweep.git import GitFailed, diff_restoring, object_sizes, raw_changes
    zero = "0" * len(src.base)
    try:
        changes = raw_changes(src.repo, src.base, src.head, timeout=120)
        sizes = object_sizes(src.repo, [sha for c in changes for sha in (c[3], c[5]) if sha != zero], timeout=120)
        most = max(limit, PROMPT_FILE_DIFFED)
        big = {c[1]: c for c in changes if max(sizes.get(c[3], 0), sizes.get(c[5], 0)) > most}
        diff = diff_restoring(src.repo, src.base, src.head,
                              {path: (c[2], c[3]) if c[0] != "A" else None for path, c in big.items()},
                              ["--no-ext-diff", "--no-textconv", "--no-color", "--no-renames"], timeout=120,
                              limit=limit)
    except GitFailed:
        return ""
    def size(sha: str) -> str:
        return "-" if sha == zero else f"{sizes.get(sha, 0)} B"
    summary = [f"{c[0]} {c[1]} ({size(c[3])} -> {size(c[5])})" + (" [not in the diff: too big]" if c[1] in big else "")
               for c in changes[:PROMPT_FILES_LISTED]]
    if len(changes) > PROMPT_FILES_LISTED:
        summary.append(f"... and {len(changes) - PROMPT_FILES_LISTED} more files")
    text = diff[:limit].decode("utf-8", errors="replace")
    if len(diff) > limit:
        text += f"\n[diff cut at {limit} bytes]\n"
    return "Files (status path (base size -> head size)):\n" + "\n".join(summary) + "\n\n" + text


def _runner_line(argv: list[str], named: str | None) -> str:
    """How per-test results are taken for `argv` (the plan's `test_runner` when it names one), in
    the runner package's words."""
    from sweep.harbor.runners import UnknownRunner, runner_for
    try:
        runner = runner_for(argv, named)
    except UnknownRunner as exc:
        return f"no runner recognises this command ({exc}): the gates will fail"
    return f"per-test results come from the runner itself: {runner.name} ({runner.title})"


def _author_prompt(src: SourceEvidence, findings: list[str], diff_limit: int, revision: int = 1,
                   test_runner: str | None = None) -> str:
    # the author's instructions promise the PR's title, body and diff: all untrusted data, which
    # only ever becomes the content of the prompt file
    import shlex
    command = src.test_command or "python3 -m unittest -q"
    text = ["# Pull request", "", f"Title: {src.title}", "", "Body:", src.body or "(empty)", "",
            f"Base commit: {src.base}", f"Head commit: {src.head}", "",
            "Changed files:", *[f"- {f}" for f in src.changed_files[:200]]]
    diff = _pr_diff(src, diff_limit)
    if diff:
        text += ["", "Diff (base..head):", "```diff", diff.rstrip("\n"), "```"]
    text += ["", "# The contract your bundle is checked against",
             f"- Test command (the plan's; write it to tests/test_command.txt, one argument a line): `{command}`",
             f"- It runs in the repository's directory `{src.test_workdir}` (write it to tests/test_workdir.txt)"
             if src.test_workdir else "- It runs at the repository's root.",
             f"- How per-test results are taken: {_runner_line(shlex.split(command), test_runner)}; never from a report you write.",
             "- sweep generates tests/test.sh (the harness) itself: it installs tests/test_files.txt's files "
             "(from tests/files/) over the repository and runs the test command.",
             "- FAIL_TO_PASS (tests failing in every empty run and passing in every reference run) must be "
             "non-empty; every repeat must agree."]
    if findings:
        text += ["", f"# Repair (revision {revision}): your previous bundle is in task/; start from it",
                 "What failed:", *[f"- {f}" for f in findings]]
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
    require_real_dir(new_bundle)         # copytree would copy wherever a link at the root points
    shutil.copytree(new_bundle, staged, symlinks=True)
    task = ctx.paths.task
    if task.exists():
        revisions = make_private_dir(ctx.paths.revisions)
        n = sum(1 for _ in revisions.iterdir()) + 1
        os.rename(task, revisions / f"{n:04d}")
    os.rename(staged, task)


def _repair_or_end(ctx: Ctx, where: str, findings: list[str], *, no_bundle: bool = False,
                   reason: EndReason | None = None, cause: str | None = None) -> tuple[str, Checkpoint]:
    """Back to the author with `findings` while repairs are left (dropping the checkpoints of the
    phases the table says a repair clears), else the ending the table gives phase `where` (or
    `reason` when the caller knows better, e.g. passes_before_fix)."""
    quality = _options(ctx).quality
    repair = _checkpoints(ctx).repair
    repairs = repair.count if repair else 0
    if quality.repair and repairs < quality.max_repairs:
        ctx.event("repair", phase=ctx.record.phase,
                  detail=f"repair {repairs + 1}/{quality.max_repairs} after {where}: " + "; ".join(findings)[:300])
        cleared = PHASE_TABLE.cleared_by_repair
        checkpoints = {k: v for k, v in ctx.record.checkpoints.items() if k not in cleared}
        checkpoints["repair"] = {**RepairCheckpoint(count=repairs + 1, findings=findings, after=where).to_json(),
                                 "at": time.time()}
        ctx.save(checkpoints=checkpoints)
        return Phase.author, PHASE_TABLE.row(where).checkpoint(repair=repairs + 1, after=where)
    if no_bundle:
        raise Ending(Outcome.blocked, EndReason.construction_failed, f"{where}: " + "; ".join(findings)[:500])
    raise Ending(Outcome.generated_unverified, reason or PHASE_TABLE.failure(where), "; ".join(findings)[:500],
                 cause=cause)


def gate_hash_seed(repeat: int) -> int:
    """PYTHONHASHSEED of gate repeat `repeat` (0-based): fixed, and different on every repeat.

    Fixed, so the gates give the same verdict for the same bundle every time (a re-run cannot
    re-roll a flaky test into a pass); different per repeat, so a test that depends on the
    iteration order of a set or dict of strings (a classic real flakiness source) shows its
    flakiness as a difference between repeats instead of passing by luck.
    """
    return repeat + 1


def _gate_trial(ctx: Ctx, bundle: Path, kind: str, provider: Provider, harness, name: str, seed: int):
    """One trial of the gates as a job (sweep/controller/concurrent.py): its own work directory,
    removed after it; a provider's error is raised as it is (`_gate_trials` classifies it).

    A trial whose script was killed by a signal sweep did not send (`TrialResult.killed_by`: the
    TERM of a scancel or a node's shutdown reaching the trial before this controller) is no verdict:
    it runs once more, unless this controller is being stopped (the interruption path then takes
    over, with no evidence); killed again, the attempt fails as check_interrupted, not the gates."""
    from sweep.harbor.trial import run_trial
    revision = _checkpoints(ctx).author_revision
    work = ctx.paths.work / f"gates-r{revision:04d}-{name}"
    limits = _limits(ctx)

    def once():
        fresh_dir(work)
        try:
            return run_trial(bundle, kind, provider=provider, workdir=work, timeout_s=TRIAL_TIMEOUT_S,
                             env={"PYTHONHASHSEED": str(seed)}, limits=limits, harness=harness)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def job():
        trial = once()
        if trial.killed_by is None or ctx.stop_reason is not None:
            return trial
        ctx.event("gate_trial_killed", phase=Phase.gates.value,
                  detail=f"gate trial {name}: killed by signal {trial.killed_by} ({trial.detail[:200]}); run again")
        time.sleep(KILLED_TRIAL_PAUSE_S)      # this controller's own TERM, if one is coming, lands first
        trial = once()
        if trial.killed_by is None or ctx.stop_reason is not None:
            return trial
        raise AttemptFailed(f"gate trial {name} was killed by signal {trial.killed_by} twice, not by sweep: "
                            f"{trial.detail[:200]}", cause="check_interrupted")
    return job


def _gate_trials(ctx: Ctx, provider: Provider, jobs: list) -> list:
    """The gate trials `jobs`, as many at once as the job's CPUs and memory allow on this provider
    (concurrent.trial_width), with the results (or the first error) of running them one by one."""
    from sweep import proc
    from sweep.controller.concurrent import STOP_GRACE_S, run_in_order, trial_width
    width = trial_width(provider, _limits(ctx).memory_bytes, len(jobs))
    try:
        return run_in_order(jobs, width, stop=lambda: proc.stop_child_groups(STOP_GRACE_S))
    except ProviderError as exc:       # the remote provider's trouble, never the task's verdict
        raise _provider_trouble(ctx, "gates", provider.name, exc) from None


def _task_harness(ctx: Ctx, revision: int):
    """The harness every rollout runs: the plan's test command and runner, and the ids the gates
    recorded for this revision (FAIL_TO_PASS + PASS_TO_PASS)."""
    from sweep.harbor.verification import rollout_harness
    try:
        gates_read = read_evidence(ctx.paths.evidence_file("gates", revision), GatesEvidence)
    except StateError as exc:
        raise AttemptFailed(str(exc)) from None
    return rollout_harness(_source(ctx).test_command, _options(ctx).test_runner,
                           gates_read.gates.get("fail_to_pass") if gates_read else None, _source(ctx).test_workdir)


def gates(ctx: Ctx) -> tuple[str, Checkpoint]:
    from sweep.harbor.bundle import bundle_sha256, validate_bundle
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
    harness = None
    if not problems and "image" not in results:
        from sweep.harbor.verification import verifier_gate
        harness, results["verifier"] = verifier_gate(bundle, _source(ctx).test_command, _options(ctx).test_runner,
                                                     _source(ctx).test_workdir)
    if harness is not None and results["verifier"]["ok"]:
        from sweep.harbor.verification import GateRuns
        runs = GateRuns(bundle, harness)
        order = [(kind, i) for i in range(repeats) for kind in ("reference", "empty")]
        done = _gate_trials(ctx, provider, [_gate_trial(ctx, bundle, kind, provider, harness, f"{kind}-{i}",
                                                        gate_hash_seed(i)) for kind, i in order])
        for (kind, _), trial in zip(order, done, strict=True):
            runs.add(kind, trial)           # the serial order: repeat by repeat, reference then empty
        results.update(runs.standard_gates())
        # a task is verified only if some test fails before the fix and passes after it, and a run of
        # exactly those recorded tests (what scores every rollout) tells the fix from no fix
        results["fail_to_pass"] = runs.fail_to_pass_gate()
        if results["fail_to_pass"]["ok"]:
            selected = harness.selecting(runs.recorded_ids())
            pair = _gate_trials(ctx, provider, [_gate_trial(ctx, bundle, kind, provider, selected, f"{kind}-selected",
                                                            gate_hash_seed(0)) for kind in ("reference", "empty")])
            results["selected"] = runs.selected_gate(dict(zip(("reference", "empty"), pair, strict=True)))
    from sweep.harbor.gates import gates_passed
    passed, not_ok = gates_passed(results)       # the one gate rule, the one the oracle reviewer applies too
    evidence = GatesEvidence(bundle_sha256=sha, revision=revision, repeats=repeats, passed=passed, gates=results,
                             hash_seeds=[gate_hash_seed(i) for i in range(repeats)],
                             environment_fidelity=provider.environment_fidelity if not problems else "host",
                             image=_image_identity(provider) if not problems else None, at=time.time(),
                             isolation=provider.isolation if not problems else None)
    write_json(ctx.evidence_path("gates", revision), evidence.for_disk())
    if not passed:
        failed = [f"gate {name}: {results[name].get('detail') or results[name].get('rewards')}" for name in not_ok]
        return _repair_or_end(ctx, "gates", failed,
                              reason=EndReason.passes_before_fix if passes_before_fix(results) else None)
    return _after(ctx, Phase.gates), GatesCheckpoint(passed=True, bundle_sha256=sha, revision=revision)


def _mutant_probes(bundle: Path, limit: int) -> tuple[list, str]:
    """The bundle's mechanical mutants as wrong-solution probes, and a note when there are none."""
    from sweep.harbor import layout
    from sweep.quality.mutants import PatchProblem, derive_mutants, test_literals
    from sweep.quality.probes import WRONG, Probe, applies_to, test_change_lines
    if limit <= 0:
        return [], "quality.max_mutants = 0: no mutants"
    patch = bundle / layout.SOLUTION_PATCH
    if not patch.is_file() or patch.is_symlink():
        return [], "the bundle has no solution/solution.patch to derive mutants from"
    try:
        # the literals the PR's tests add are tried as returned constants first: a test that checks one
        # input accepts the constant it expects there
        mutants = derive_mutants(patch.read_bytes(), limit=limit, accept=applies_to(bundle / layout.ENV_REPO),
                                 literals=test_literals(test_change_lines(bundle)))
    except PatchProblem as exc:
        return [], f"solution/solution.patch is not a unified diff sweep can rewrite: {exc}"
    probes = [Probe(name=f"mutant-{i + 1:02d}", kind=WRONG, focus=m.kind, rationale=m.description, patch=m.patch,
                    origin="mutant", mutant_kind=m.kind, path=m.path or None, line=m.line)
              for i, m in enumerate(mutants)]
    return probes, "" if probes else "no mutant of the reference patch applies to the base"


def _run_probes(ctx: Ctx, bundle: Path, candidates: list, provider: Provider, tag: str) -> list[dict]:
    """Each probe through the trial runner with the gates' repeats; their evidence records."""
    from sweep.quality.probes import run_probe
    records = []
    for i, probe in enumerate(candidates):
        try:
            outcome = run_probe(bundle, probe, provider=provider, workdir=fresh_dir(ctx.paths.work / f"{tag}-{i}"),
                                repeats=_options(ctx).quality.gate_repeats, timeout_s=TRIAL_TIMEOUT_S,
                                limits=_limits(ctx), env_for_repeat=lambda k: {"PYTHONHASHSEED": str(gate_hash_seed(k))})
        except ProviderError as exc:       # the remote provider's trouble, never the task's verdict
            raise _provider_trouble(ctx, "gates", provider.name, exc) from None
        records.append(outcome.as_evidence())
    return records


def _proposed_probes_fail(ctx: Ctx, verdict: ReviewVerdict, probes_read: ProbesEvidence | None,
                          revision: int) -> list[str]:
    """The probes the reviewer's verdict proposes (at most `quality.max_probes`; more is an invalid
    output), run like the mutants and added to this revision's probe evidence (where the next
    review reads them); findings for each the tests did not treat as its kind requires."""
    from sweep.quality.probes import ProbeListProblem, proposed_probes
    try:
        proposed = proposed_probes((verdict.model_extra or {}).get("probes"), _options(ctx).quality.max_probes)
    except ProbeListProblem as exc:
        raise AttemptFailed(f"reviewer output: {exc}") from None
    if not proposed or probes_read is None:
        return []
    try:
        provider = _trial_provider(ctx, "gates")
    except TaskImageProblem as exc:
        raise AttemptFailed(f"the task's image: {exc}") from None
    records = [ProbeRecord.model_validate(r)
               for r in _run_probes(ctx, ctx.paths.task, proposed, provider, f"review-probes-r{revision:04d}")]
    from sweep.quality.probes import missing_focus
    # a rerun review replaces its own earlier proposals; probes carried from an earlier revision stay
    # unless a new proposal takes the name (mutants and the plan's prepared probes always stay)
    names = {r.name for r in records}
    kept = [p for p in probes_read.probes if p.origin != "reviewer" or (_carried(p) and p.name not in names)]
    ev = probes_read.model_copy(update={"probes": kept + records, "passed": probes_read.passed and all(
        r.outcome in ("killed", "accepted") for r in records),
        "missing_focus": missing_focus(probes_read.required_focus, kept + records)})
    write_json(ctx.evidence_path("probes", revision), ev.for_disk())
    ctx.event("probes", phase=Phase.review.value, detail="reviewer probes: " + ", ".join(
        f"{r.name} {r.kind} {r.outcome}" for r in records)[:400])
    return _probe_findings(records)


def _probe_findings(records: list[ProbeRecord]) -> list[str]:
    """A repair's findings for each probe the tests did not treat as its kind requires."""
    return [(_weak_test_finding(r) if r.kind == "wrong_solution" else
             f"the tests rejected the valid alternative {r.name} ({r.rationale}), rewards {r.rewards}:\n{r.diff[:1500]}")
            for r in records if r.outcome in ("survived", "rejected")]


def _prepared_probe_findings(ev: ProbesEvidence | None) -> list[str]:
    """The plan's prepared probes, and the reviewer's carried from an earlier revision, bind like a
    new proposal: each one failed goes back to the author."""
    return _probe_findings([p for p in ev.probes if p.origin == "prepared" or _carried(p)]) if ev is not None else []


def _carried(p: ProbeRecord) -> bool:
    return bool((p.model_extra or {}).get("carried_from"))


def probes(ctx: Ctx) -> tuple[str, Checkpoint]:
    """Wrong solutions the tests must reject (and valid alternatives they must accept), run like the
    gates: the mechanical mutants of the reference patch, for every task, with no model."""
    from sweep.harbor.bundle import bundle_sha256
    bundle = ctx.paths.task
    sha = bundle_sha256(bundle)
    revision = _checkpoints(ctx).author_revision
    quality = _options(ctx).quality
    candidates, note = _mutant_probes(bundle, quality.max_mutants)
    try:
        provider = _trial_provider(ctx, "gates")
    except TaskImageProblem as exc:
        raise AttemptFailed(f"the task's image: {exc}") from None
    from sweep.quality.probes import missing_focus, prepared_probes
    carried, not_rerun = _carried_probes(ctx, revision)
    extra = prepared_probes(ctx.candidate.candidate.prepared_probes) + carried
    records = _run_probes(ctx, bundle, candidates + extra, provider, f"probes-r{revision:04d}")
    ran = [r for r in records if r["outcome"] != "not_applicable"]
    mutants = [r for r in ran if r["origin"] == "mutant"]
    mutation = MutationScore(derived=len(candidates), run=len(mutants),
                             killed=sum(r["outcome"] == "killed" for r in mutants),
                             survived=[r["name"] for r in mutants if r["outcome"] == "survived"], note=note)
    kept = [ProbeRecord.model_validate(r) for r in records]
    required = list(ctx.candidate.candidate.required_probe_focus)
    evidence = ProbesEvidence(bundle_sha256=sha, revision=revision, repeats=quality.gate_repeats,
                              mode=quality.mutants, mutation=mutation, probes=kept,
                              passed=all(r["outcome"] in ("killed", "accepted") for r in ran),
                              required_focus=required, missing_focus=missing_focus(required, kept),
                              not_rerun=not_rerun, at=time.time())
    write_json(ctx.evidence_path("probes", revision), evidence.for_disk())
    survivors = evidence.survivors()
    summary = ProbesCheckpoint(passed=evidence.passed, bundle_sha256=sha, revision=revision,
                               mutation_score=mutation.score, killed=mutation.killed, run=mutation.run,
                               survived=len(survivors))
    ctx.event("probes", phase=Phase.probes.value,
              detail=f"mutants killed {mutation.killed}/{mutation.run}" + (f"; survived: {', '.join(mutation.survived)}"
                                                                         if mutation.survived else ""))
    from sweep.runtimes.facts import facts_of
    if survivors and quality.mutants == "enforce" and facts_of(_options(ctx).runtimes.reviewer).mechanical:
        # the oracle reviewer cannot judge a mutant equivalent: a wrong solution the tests accept
        # means the tests do not discriminate, and no mechanical repair can strengthen them
        shown = "; ".join(f"{p.name} ({p.rationale})" for p in survivors[:5])
        # the phase is finished (its evidence is written): its checkpoint says so, and status shows the score
        ctx.save(checkpoints={**ctx.record.checkpoints, Phase.probes.value: {**summary.to_json(), "at": time.time()}})
        raise Ending(Outcome.generated_unverified, EndReason.weak_tests,
                     f"the tests accepted {len(survivors)} of {mutation.run} wrong solutions derived from the "
                     f"reference patch (mutation score {mutation.killed}/{mutation.run}): {shown}"[:500])
    _end_if_planned_probes_fail(ctx, evidence, summary, mechanical=facts_of(_options(ctx).runtimes.reviewer).mechanical)
    return _after(ctx, Phase.probes), summary


def _carried_probes(ctx: Ctx, revision: int) -> tuple[list, list[str]]:
    """After a repair, the reviewer's probes of the bundle it replaced, re-run on this one (they
    stay in its probe evidence with `carried_from` and `bound_to`, so a repair cannot drop one),
    and the names of those whose recorded diff was cut (the next review is asked for them again);
    after `sweep retry` none (the operator asked for a fresh look)."""
    from sweep.quality.probes import carried_probes
    cps = _checkpoints(ctx)
    if cps.repair is None:
        return [], []
    for earlier in range(revision - 1, cps.retry_after_revision, -1):
        previous = _probes_evidence(ctx, earlier)
        if previous is not None:
            carried, lost = carried_probes(previous)
            if lost:
                ctx.event("probes", phase=Phase.probes.value,
                          detail=f"not re-run (diff cut in the evidence; to be proposed again): {', '.join(lost)}"[:400])
            return carried, lost
    return [], []


def _end_if_planned_probes_fail(ctx: Ctx, ev: ProbesEvidence, summary: ProbesCheckpoint, *, mechanical: bool) -> None:
    """A prepared probe the tests did not treat as its kind requires ends the run at once, before
    any reviewer session: prepared probes come only with an unpaid author, which builds the same
    bundle again on a repair, so nothing could repair it. With the oracle reviewer (which proposes
    no probe) a required focus with no wrong-solution probe that ran ends it too; an agent reviewer
    is asked for one instead (its prompt names the focus)."""
    failing = [p for p in ev.probes if p.origin != "mutant" and p.outcome in ("survived", "rejected")
               and (mechanical or p.origin == "prepared")]
    if not failing and not (mechanical and ev.missing_focus):
        return
    ctx.save(checkpoints={**ctx.record.checkpoints, Phase.probes.value: {**summary.to_json(), "at": time.time()}})
    if failing:
        raise Ending(Outcome.generated_unverified, EndReason.weak_tests, "; ".join(
            f"the tests {'accepted the wrong solution' if p.kind == 'wrong_solution' else 'rejected the valid alternative'}"
            f" {p.name} ({p.origin}, focus {p.focus!r}): rewards {p.rewards}" for p in failing[:5])[:500])
    raise Ending(Outcome.generated_unverified, EndReason.weak_tests, _focus_missing_text(ev.missing_focus),
                 cause="probe_focus_missing")


def _focus_missing_text(missing: list[str]) -> str:
    return ("no wrong-solution probe ran for the required focus " + ", ".join(repr(f) for f in missing))[:500]


def review(ctx: Ctx) -> tuple[str, Checkpoint]:
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
    workspace = fresh_dir(ctx.paths.work / f"review-r{revision:04d}")
    copy_tree(bundle, workspace / "task")
    probes_read = _probes_evidence(ctx, revision)
    probes_input = _probes_for_reviewer(probes_read)
    prompt = _review_prompt(ctx, gates_evidence.get("gates", {}), probes_read)
    verdict = _reviewer_verdict(ctx, workspace, prompt,
                                {"gates": gates_evidence.get("gates", {}), "bundle_dir": str(workspace / "task"),
                                 "bundle_sha256": sha, "probes": probes_input}, probes_read)
    decision = verdict.verdict
    from sweep.quality.review import finding_text
    findings = [finding_text(f) for f in verdict.findings][:20]
    survivors = _judged_survivors(probes_read)
    eq = _equivalence(ctx, verdict, survivors if decision == "accept" else [])   # only an accept's claims count
    write_json(ctx.evidence_path("review", revision),
               ReviewEvidence(bundle_sha256=sha, gates_bundle_sha256=gates_cp.bundle_sha256 if gates_cp else None,
                              verdict=verdict, at=time.time(),
                              **(eq.as_evidence() if survivors and decision == "accept" else {})).for_disk())
    failed = _proposed_probes_fail(ctx, verdict, probes_read, revision) + _prepared_probe_findings(probes_read)
    if failed:
        return _repair_or_end(ctx, "review", failed, reason=EndReason.weak_tests)
    if decision == "accept" and survivors:
        judged = _mutant_judgements(verdict)
        weak = [p for p in survivors if judged.get(p.name, ("", ""))[0] == "weak_tests"]
        # an equivalent claim the plan does not let excuse its mutant leaves it surviving (model
        # output may tighten the mechanical check, never loosen it past the plan's bound)
        refused = [p for p in survivors if p.name in eq.refused]
        if weak or refused:
            return _repair_or_end(ctx, "review", [_weak_test_finding(p) for p in weak] + [
                _weak_test_finding(p, f"the reviewer judged it equivalent ({judged[p.name][1][:200]}), which does not "
                                      f"excuse it: {eq.why}") for p in refused],
                reason=EndReason.weak_tests, cause="equivalence_over_bound" if refused else None)
    if decision == "accept":
        checkpoint = ReviewCheckpoint(verdict="accept", bundle_sha256=sha, revision=revision)
        if eq.excused:          # set only then: the checkpoint of a review that excused nothing keeps its shape
            checkpoint.excused_mutants = len(eq.excused)
        return _after(ctx, Phase.review), checkpoint
    if decision == "revise":
        return _repair_or_end(ctx, "review", findings or [verdict.rationale if "rationale" in verdict.model_fields_set
                                                          else "reviewer asked for a revision"])
    if decision == "reject":
        raise Ending(Outcome.generated_unverified, EndReason.review_rejected,
                     "; ".join(findings)[:500] or str(verdict.rationale if verdict.rationale is not None else "")[:500])
    raise AttemptFailed(f"reviewer verdict {decision!r} is not accept/revise/reject")


def _judged_survivors(probes: ProbesEvidence | None) -> list[ProbeRecord]:
    """The surviving mutants a review must judge (none under quality.mutants = "report"; a probe
    the plan or a reviewer wrote binds as it is: only a mutant can be judged equivalent)."""
    return [p for p in probes.survivors() if p.origin == "mutant"] if probes and probes.mode == "enforce" else []


def _equivalence(ctx: Ctx, verdict: ReviewVerdict, survivors: list[ProbeRecord]):
    """What the verdict's `equivalent` claims excuse under quality.max_equivalent_mutants."""
    from sweep.quality.review import judge_equivalence
    return judge_equivalence(survivors, _mutant_judgements(verdict), _options(ctx).quality.max_equivalent_mutants)


def _review_prompt(ctx: Ctx, gates: dict, probes: ProbesEvidence | None) -> str:
    """The reviewer's prompt: the PR (title, body, diff bounded as the author's is; untrusted text,
    fenced as data), the gate results with FAIL_TO_PASS / PASS_TO_PASS, the probes, the citation rule."""
    from sweep.quality.review import CITATION_RULE, gates_section, pr_section
    src = _source(ctx)
    diff = _pr_diff(src, ctx.campaign.settings.limits.prompt_diff_kb * 1024)
    return ("# Review this task bundle\n\nThe bundle is in `task/`.\n\n" + pr_section(src.title, src.body, diff)
            + "\n" + gates_section(gates) + _probes_prompt(probes, _options(ctx).quality.max_equivalent_mutants)
            + "\n## Your answer\n\n" + CITATION_RULE + "\n")


def _reviewer_verdict(ctx: Ctx, workspace: Path, prompt: str, inputs: dict,
                      probes: ProbesEvidence | None) -> ReviewVerdict:
    """The reviewer's verdict on the task, checked by `_verdict_problem` (through `_judged`)."""
    return _judged(ctx, workspace, prompt, inputs, lambda result, _rt: _verdict_problem(ctx, result, probes),
                   Phase.review.value)[0]


def _judged(ctx: Ctx, workspace: Path, prompt: str, inputs: dict, check, phase: str) -> tuple[ReviewVerdict, str]:
    """A reviewer session's answer, checked by `check(result, runtime)`, and the runtime that gave
    it. An invalid output (none, one its schema or sweep refuses, an accept that leaves a surviving
    mutant unjudged, rollout labels that do not fit) and a blocking finding whose citation is not in
    the bundle each get one correction round: the session runs again on its prompt with the errors
    so far appended. The same kind of error again goes to the plan's escalation runtime
    (quality.escalation) for one review with every refusal so far; without one, or when the
    escalation's answer is refused too, it is a failed attempt. A crash between rounds reruns the
    phase from its first round: nothing was checkpointed."""
    from sweep.quality.review import fenced
    corrected: list[str] = []
    text = prompt
    escalation = _options(ctx).quality.escalation
    escalated = False
    while True:
        result = _session(ctx, "reviewer", workspace, text, inputs, escalation=escalation if escalated else None)
        runtime = escalation.runtime if escalated and escalation is not None else _options(ctx).runtimes.reviewer
        kind, error, verdict = check(result, runtime)
        if verdict is not None and (not kind or kind in corrected):
            return verdict, runtime         # a standing answer (kind set: told once, it stands as given)
        if verdict is None and kind in corrected and (escalation is None or escalated):
            after = " and the escalation to " + escalation.runtime if escalation is not None else ""
            raise AttemptFailed(f"{error} (again after a correction round{after})"[:1000],
                                cause=REFUSAL_CAUSES.get(kind, "review_failed"))
        if verdict is None and kind in corrected:
            escalated = True
            ctx.event("review_escalated", phase=phase,
                      detail=f"{kind} again after its correction round: one review by runtime {escalation.runtime}")
            text += f"\n## Your previous answer was refused again ({kind})\n\n" + fenced(error, "text") + "\n"
            continue
        corrected.append(kind)
        ctx.event("review_correction", phase=phase, detail=f"{kind}: {error}"[:500])
        text = (text + f"\n## Your previous answer was refused ({kind})\n\n" + fenced(error, "text")
                + "\n\nAnswer again, in full, with this put right: it is your one correction round for it.\n")


# the cause of an attempt whose review answer was refused again: a surviving mutant left unjudged
# is a wrong solution the tests accept that no one vouched for (weak tests); any other, no usable verdict
REFUSAL_CAUSES = {"missing probe focus": "probe_focus_missing", "unjudged mutant": "weak_tests"}


# a judge session that ran and answered, but not with a usable structured output: the command
# runtime's unreadable output file, claude's exhausted structured-output retries, sweep's own check
# of the output against the role's schema (sweep/runtimes/session.py)
INVALID_OUTPUT_REASONS = frozenset({"bad_output", "no_structured_output", "schema_mismatch"})


def _verdict_problem(ctx: Ctx, result, probes: ProbesEvidence | None) -> tuple[str, str, ReviewVerdict | None]:
    """(kind, error, None) for an answer that gets a correction round, ("", "", verdict) for a good
    one; a session that failed otherwise (timeout, crash, a bound) is a failed attempt at once."""
    if not result.ok:
        if result.reason in INVALID_OUTPUT_REASONS:
            return "invalid output", f"reviewer output: {result.evidence[:1500]}", None
        raise AttemptFailed(f"reviewer session {result.status}: {result.reason or ''} {result.evidence[:300]}")
    try:
        verdict = ReviewVerdict.model_validate(result.structured_output or {})
    except ValidationError as exc:
        return "invalid output", f"reviewer output: {describe_validation_error(exc)}", None
    if verdict.verdict not in ("accept", "revise", "reject"):
        return "invalid output", f"reviewer verdict {verdict.verdict!r} is not accept/revise/reject", None
    survivors = _judged_survivors(probes)
    judged = _mutant_judgements(verdict)
    unjudged = [p.name for p in survivors if p.name not in judged
                or (judged[p.name][0] == "equivalent" and not judged[p.name][1].strip())]
    if verdict.verdict == "accept" and unjudged:
        return "unjudged mutant", ("the reviewer accepted without judging each surviving mutant equivalent (with a "
                                  f"reason) or weak_tests: {', '.join(unjudged)}"), None
    uncovered = _focus_left_open(verdict, probes)
    if verdict.verdict == "accept" and uncovered:
        return "missing probe focus", ("the reviewer accepted while a required probe focus has no wrong-solution probe: "
                                  "propose one in `probes` (kind wrong_solution, focus exactly as written) for "
                                  + ", ".join(repr(f) for f in uncovered)), None
    from sweep.runtimes.facts import facts_of
    if verdict.verdict != "accept" and not facts_of(_options(ctx).runtimes.reviewer).mechanical:
        from sweep.quality.review import citation_problems
        problems = (citation_problems(ctx.paths.task, verdict.findings) if verdict.findings
                    else [f"a {verdict.verdict} must list its findings, each citing the bundle"])
        if problems:
            return "mis-cited finding", "; ".join(problems)[:1500], None
    eq = _equivalence(ctx, verdict, survivors) if verdict.verdict == "accept" else None
    if eq is not None and eq.refused:
        # not refused: the answer stands, but the reviewer is told once that these mutants still count
        # as surviving; its ways out are `weak_tests` (a repair) or a plan with a larger bound
        return "equivalence over bound", (
            f"these surviving mutants still count as surviving: {eq.why}. The run cannot verify with them: judge "
            "them `weak_tests` so the author strengthens the tests (or, if this answer stands, the run goes to a "
            "repair and without one ends weak_tests); only the plan can raise the bound"), verdict
    return "", "", verdict


def _focus_left_open(verdict: ReviewVerdict, probes: ProbesEvidence | None) -> list[str]:
    """The required focus entries no probe that ran covers and the verdict proposes no wrong solution for."""
    if probes is None or not probes.missing_focus:
        return []
    items = (verdict.model_extra or {}).get("probes")
    proposed = {str(i.get("focus") or "") for i in items if isinstance(i, dict) and i.get("kind") == "wrong_solution"} \
        if isinstance(items, list) else set()
    return [f for f in probes.missing_focus if f not in proposed]


def _probes_evidence(ctx: Ctx, revision: int) -> ProbesEvidence | None:
    try:
        return read_evidence(ctx.paths.evidence_file("probes", revision), ProbesEvidence)
    except StateError as exc:
        raise AttemptFailed(str(exc)) from None


def _probes_for_reviewer(ev: ProbesEvidence | None) -> dict:
    if ev is None:
        return {}
    return {"mode": ev.mode, "mutation": {**ev.mutation.to_json(), "score": ev.mutation.score},
            "probes": [{k: v for k, v in p.to_json().items() if k != "diff" or p.outcome != "killed"}
                       for p in ev.probes]}


def _probes_prompt(ev: ProbesEvidence | None, max_equivalent: int) -> str:
    from sweep.quality.review import equivalence_rule
    if ev is None:
        return ""
    m = ev.mutation
    text = ["", "## Probes", "", f"Wrong solutions derived mechanically from the reference patch: {m.killed} of "
            f"{m.run} rejected by the tests (mutation score)." + (f" {m.note}" if m.note else "")]
    survivors = [p for p in ev.survivors() if p.origin == "mutant"]
    if survivors:
        text += ["", "These wrong solutions were ACCEPTED by the tests. For each, judge it in the verdict's "
                 "`mutants` list: `equivalent` (it behaves exactly like the reference; give the reason) or "
                 "`weak_tests` (the tests should reject it: the author will strengthen them).", "",
                 equivalence_rule(max_equivalent)]
        for p in survivors:
            text += ["", f"### {p.name}: {p.rationale}", "```diff", p.diff.rstrip("\n"), "```"]
    return "\n".join(text + _planned_probes_prompt(ev)) + "\n"


def _planned_probes_prompt(ev: ProbesEvidence) -> list[str]:
    """The plan's prepared probes with their outcomes, and its required probe focus (what is missing)."""
    text: list[str] = []         # the plan's own words (trusted), and sweep's outcomes
    prepared = [p for p in ev.probes if p.origin == "prepared"]
    if prepared:
        text += ["", "Probes the plan prepared (a wrong solution must score 0, a valid alternative 1):"]
        text += [f"- {p.name} ({p.kind}, focus {p.focus!r}): {p.outcome}, rewards {p.rewards}" for p in prepared]
    carried = [p for p in ev.probes if _carried(p)]
    if carried:
        text += ["", "Probes proposed for an earlier revision, re-run on this bundle (they still bind):"]
        text += [f"- {p.name} ({p.kind}, focus {p.focus!r}, from revision {(p.model_extra or {})['carried_from']}): "
                 f"{p.outcome}, rewards {p.rewards}" for p in carried]
    if ev.not_rerun:
        text += ["", "Probes proposed for an earlier revision whose diff was too long to keep, so they could not "
                 "run on this bundle: " + ", ".join(ev.not_rerun) + ". Propose again those that still matter."]
    if ev.required_focus:
        text += ["", "The plan requires a wrong-solution probe that ran for each focus: "
                 + ", ".join(repr(f) for f in ev.required_focus) + "."]
        if ev.missing_focus:
            text += ["No probe covers " + ", ".join(repr(f) for f in ev.missing_focus) + " yet: propose one in the "
                     "verdict's `probes` for each (kind wrong_solution, `focus` exactly that text, a patch of the "
                     "base repository the tests must reject); no accept without them."]
    return text


def _mutant_judgements(verdict: ReviewVerdict) -> dict[str, tuple[str, str]]:
    """name -> (judgement, reason) from the verdict's `mutants` list (roles/reviewer.toml)."""
    out: dict[str, tuple[str, str]] = {}
    for item in (verdict.model_extra or {}).get("mutants") or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out[item["name"]] = (str(item.get("judgement") or ""), str(item.get("reason") or ""))
    return out


def _weak_test_finding(p: ProbeRecord, note: str = "") -> str:
    return (f"weak tests: the wrong solution {p.name} ({p.rationale}) scored {p.rewards}"
            + (f"; {note}" if note else "") + f"; strengthen the tests so they reject it:\n{p.diff[:1500]}")


def _probes_ok(ctx: Ctx, cps: Checkpoints, sha: str) -> tuple[bool, str]:
    """Every wrong-solution probe scored 0 and every valid alternative 1, for this bundle; a
    surviving mutant passes only under `quality.mutants = "report"` or when the accepted review
    of this bundle judged it equivalent with a reason and the plan lets that claim excuse it
    (quality.max_equivalent_mutants; sweep/quality/review.py judge_equivalence)."""
    if cps.probes is None or cps.probes.bundle_sha256 != sha:
        return False, f"probes not run for the current bundle {sha[:12]}"
    ev = _probes_evidence(ctx, cps.author_revision)
    if ev is None or ev.bundle_sha256 != sha:
        return False, f"no probe evidence for the current bundle {sha[:12]}"
    rejected = ev.rejected_alternatives()
    if rejected:
        return False, "the tests rejected valid alternatives: " + ", ".join(p.name for p in rejected)
    proposed = [p.name for p in ev.survivors() if p.origin != "mutant"]
    if proposed:        # a wrong solution proposed or prepared binds whatever quality.mutants says
        return False, "the tests accepted wrong solutions the reviewer proposed or the plan prepared: " + ", ".join(proposed)
    if ev.missing_focus:
        return False, _focus_missing_text(ev.missing_focus)
    survivors = ev.survivors() if ev.mode == "enforce" else []
    if survivors:
        try:
            review = read_evidence(ctx.paths.evidence_file("review", cps.author_revision), ReviewEvidence)
        except StateError as exc:
            raise AttemptFailed(str(exc)) from None
        from sweep.quality.review import judge_equivalence
        judged = _mutant_judgements(review.verdict) if review and review.bundle_sha256 == sha else {}
        eq = judge_equivalence(survivors, judged, _options(ctx).quality.max_equivalent_mutants)
        open_ = [p.name for p in survivors if p.name not in eq.excused]
        if open_:
            return False, "the tests accepted wrong solutions: " + ", ".join(open_) + (
                f" ({EQUIVALENCE_REFUSED}: {eq.why})" if eq.refused else "")
    return True, ""


EQUIVALENCE_REFUSED = "equivalent claims not excused"


def _end_if_rollouts_block(ctx: Ctx, cps: Checkpoints) -> None:
    """The judged rollouts of the current bundle: a reward_hack or task_defect label ends the run
    with that cause; rollouts that all scored 0 end it `unsolved` unless the plan allows that."""
    try:
        ev = read_evidence(ctx.paths.evidence_file("solve", cps.author_revision), SolveEvidence)
    except StateError as exc:
        raise AttemptFailed(str(exc)) from None
    if ev is None:
        raise Ending(Outcome.generated_unverified, EndReason.evidence_incomplete, "the solve evidence is missing")
    for label, reason in (("reward_hack", EndReason.reward_hack), ("task_defect", EndReason.task_defect)):
        hit = [r for r in ev.rollouts if r.label == label]
        if hit:
            raise Ending(Outcome.generated_unverified, reason,
                         f"rollout {hit[0].rollout} judged {label}: {hit[0].label_reason}"[:500])
    if ev.rollouts and not any(r.reward == 1.0 for r in ev.rollouts) and not _options(ctx).quality.allow_unsolved:
        raise Ending(Outcome.generated_unverified, EndReason.unsolved,
                     f"no rollout of {len(ev.rollouts)} scored 1 (solve rate 0; the plan does not set "
                     "quality.allow_unsolved)")


def solve(ctx: Ctx) -> tuple[str, Checkpoint]:
    """The blind rollouts, scored by the task's tests and labelled: by the oracle rules
    (sweep/quality/rollouts.py) for the oracle reviewer, by a rollout review for an agent reviewer
    (`_judge_rollouts`). Rollouts scored but not yet judged (the review parked, failed its attempt
    or was killed) are judged on the rerun, not run again."""
    from sweep.harbor.bundle import bundle_sha256
    from sweep.runtimes.facts import facts_of
    sha = bundle_sha256(ctx.paths.task)
    revision = _checkpoints(ctx).author_revision
    opts = _options(ctx)
    rewards = _pending_rollouts(ctx, revision, sha)
    if rewards is None:
        rewards = _run_rollouts(ctx, revision)
    agent = not facts_of(opts.runtimes.reviewer).mechanical
    if agent:
        _write_solve(ctx, revision, sha, rewards, review="pending")
        _judge_rollouts(ctx, revision, sha, rewards)
    evidence = _write_solve(ctx, revision, sha, rewards, review="done" if agent else None)
    scores = [r["reward"] for r in rewards]
    labels = [r["label"] for r in rewards]
    summary = SolveCheckpoint(
        bundle_sha256=sha, rewards=scores, rollouts=len(scores), solved=sum(1 for s in scores if s == 1.0),
        solve_rate=evidence.solve_rate, labels={lb: labels.count(lb) for lb in sorted(set(labels))})
    blocking = [r for r in rewards if r["label"] in ("reward_hack", "task_defect")]
    if blocking and agent and not facts_of(opts.runtimes.author).mechanical:
        # an agent author can repair the task (harden what was hacked, fix the defect); the oracle
        # author would build the same bundle again, so there evaluate ends the run with the cause
        from sweep.quality.review import finding_text
        first = blocking[0]
        findings = [f"rollout {first['rollout']} judged {first['label']}: {first['label_reason']}"[:500]]
        findings += [finding_text(f) for f in first.get("findings") or []][:10]
        # the phase is finished (its evidence is written): status shows the labels if the run ends here
        ctx.save(checkpoints={**ctx.record.checkpoints, Phase.solve.value: {**summary.to_json(), "at": time.time()}})
        return _repair_or_end(ctx, "solve", findings, reason=EndReason(first["label"]))
    return _after(ctx, Phase.solve), summary


def _write_solve(ctx: Ctx, revision: int, sha: str, rewards: list[dict], *, review: str | None) -> SolveEvidence:
    from sweep.quality.rollouts import pass_at_k, solve_rate
    scores = [r["reward"] for r in rewards]
    solved = sum(1 for s in scores if s == 1.0)
    fields: dict[str, Any] = {
        "bundle_sha256": sha, "runtime": _options(ctx).runtimes.solver, "rollouts": rewards,
        "solve_rate": solve_rate(scores),
        "pass_at_k": {str(k): pass_at_k(len(scores), solved, k) for k in range(1, len(scores) + 1)}, "at": time.time()}
    if review is not None:
        fields["review"] = review
    evidence = SolveEvidence.model_validate(fields)
    write_json(ctx.evidence_path("solve", revision), evidence.for_disk())
    return evidence


def _pending_rollouts(ctx: Ctx, revision: int, sha: str) -> list[dict] | None:
    """The rollouts of this bundle already scored and waiting for their review, or None."""
    try:
        ev = read_evidence(ctx.paths.evidence_file("solve", revision), SolveEvidence)
    except StateError:
        return None
    if ev is None or ev.bundle_sha256 != sha or ev.review != "pending" or not ev.rollouts:
        return None
    ctx.event("rollouts_pending", phase=Phase.solve.value,
              detail=f"{len(ev.rollouts)} rollout(s) of bundle {sha[:12]} scored before: judged, not run again")
    return [r.to_json() for r in ev.rollouts]


def _run_rollouts(ctx: Ctx, revision: int) -> list[dict]:
    """`quality.rollouts` blind solver sessions, each scored by the task's tests and labelled by the
    oracle rules; with the per-test results and the diff the rollout review is shown."""
    from sweep.harbor import layout
    from sweep.quality.rollouts import oracle_label
    from sweep.runtimes.facts import facts_of
    bundle = ctx.paths.task
    opts = _options(ctx)
    instruction = (bundle / "instruction.md").read_text(errors="replace")
    listed = bundle / layout.TEST_FILES
    test_files = listed.read_text(errors="replace").splitlines() if listed.is_file() and not listed.is_symlink() else []
    harness = _task_harness(ctx, revision)
    # blind: the solver sees the instruction and the starting repository, never the tests or
    # the reference solution (the oracle control is the one exception: it IS the reference)
    control = facts_of(opts.runtimes.solver).reference_solution
    rewards: list[dict[str, Any]] = []
    for k in range(opts.quality.rollouts):
        workspace = fresh_dir(ctx.paths.work / f"solve-r{revision:04d}-{k}")
        copy_tree(bundle / "environment" / "repo", workspace / "repo")
        inputs = {"reference_solution": str(bundle / "solution")} if control else {}
        result = _session(ctx, "solver", workspace, instruction, inputs)
        _redact_changed(workspace, result.changed_paths)     # the solver's repo stays in the run dir
        r = _score_rollout(ctx, k, revision, result, workspace, harness, test_files)
        label, why = oracle_label(reward=r["reward"], session_ok=r["session"] == "ok",
                                  reference_control=control, tampered=r.pop("tampered", []))
        r.update(label=label, label_reason=why, labelled_by="oracle rules")
        rewards.append(r)
    return rewards


def _score_rollout(ctx: Ctx, k: int, revision: int, result, workspace: Path, harness, test_files: list[str]) -> dict:
    """One rollout's record: its reward by the task's tests, the harness's per-test results, the
    solver's diff (bounded) and the paths it changed that touch how the tests run."""
    from sweep.harbor.trial import run_trial
    from sweep.quality.rollouts import tampered_paths, tests_summary
    diff = _rollout_diff(ctx.paths.task / "environment" / "repo", workspace, result.changed_paths)
    if not result.ok:
        if not ended_by_a_bound(result):
            _rollout_never_ran(ctx, k, result)
        # the solver ran and was stopped by one of its bounds: it did not solve the task
        return {"rollout": k, "reward": 0.0, "session": result.status,
                "detail": (result.reason or result.evidence)[:200], "tampered": [], "diff": diff}
    trial_dir = fresh_dir(ctx.paths.work / f"solve-r{revision:04d}-{k}-trial")
    try:
        runner = _trial_provider(ctx, "solver")
    except TaskImageProblem as exc:
        raise AttemptFailed(f"the task's image: {exc}") from None
    try:
        trial = run_trial(ctx.paths.task, workspace / "repo", provider=runner, workdir=trial_dir,
                          timeout_s=TRIAL_TIMEOUT_S, limits=_limits(ctx), harness=harness)
    except ProviderError as exc:
        raise _provider_trouble(ctx, "solver", runner.name, exc) from None
    shutil.rmtree(trial_dir, ignore_errors=True)
    changed = [p[len("repo/"):] for p in result.changed_paths if p.startswith("repo/")]
    # a trial that could not score the solver's repository (its test output hit a bound) did
    # not see it pass: 0, with the trial's reason
    out = {"rollout": k, "reward": 0.0 if trial.reward is None else trial.reward, "session": "ok",
           "detail": trial.detail[:200], "environment_fidelity": trial.environment_fidelity,
           "tampered": tampered_paths(changed, test_files), "diff": diff}
    tests = tests_summary(trial.results)
    if tests is not None:
        out["tests"] = tests
    return out


def _judge_rollouts(ctx: Ctx, revision: int, sha: str, rewards: list[dict]) -> None:
    """The rollout review of an agent reviewer: its prompt holds each rollout (reward, per-test
    results, bounded diff) and it labels each one (sweep/quality/rollouts.py); an answer sweep
    refuses gets the review's correction round, then the escalation, then fails the attempt. A
    blocking label of the oracle rules (tampering, the oracle control scoring 0) binds whatever the
    reviewer says; the reviewer's label is kept beside it."""
    from sweep.quality.review import fenced
    from sweep.quality.rollouts import BLOCKING, review_prompt
    workspace = fresh_dir(ctx.paths.work / f"rollout-review-r{revision:04d}")
    copy_tree(ctx.paths.task, workspace / "task")
    from sweep.quality.rollouts import tests_lines
    for r in rewards:
        d = make_private_dir(make_private_dir(workspace / "rollouts") / str(r["rollout"]))
        (d / "diff.patch").write_text(r.get("diff") or "")
        (d / "tests.txt").write_text("\n".join(tests_lines(r.get("tests"))) + "\n")
    shown = [{"rollout": r["rollout"], "reward": r["reward"], "session": r["session"],
              "mechanical_label": r["label"]} for r in rewards]
    inputs = {"bundle_dir": str(workspace / "task"), "bundle_sha256": sha, "rollouts": shown}
    verdict, runtime = _judged(ctx, workspace, review_prompt(rewards, fenced), inputs,
                               lambda result, rt: _labels_problem(ctx, result, rt, rewards, workspace), Phase.solve.value)
    answers = {a["rollout"]: a for a in (verdict.model_extra or {}).get("rollouts") or []}
    for r in rewards:
        a = answers[r["rollout"]]
        r["mechanical_label"] = r["label"]
        if r["label"] in BLOCKING and a["label"] not in BLOCKING:
            r["reviewer_label"] = a["label"]
            continue            # the oracle rules' evidence of tampering binds
        r.update(label=a["label"], label_reason=str(a.get("reason") or "")[:1000], labelled_by=runtime,
                 findings=list(a.get("findings") or [])[:10])
    ctx.event("rollouts_judged", phase=Phase.solve.value,
              detail=", ".join(f"{r['rollout']}: {r['label']}" for r in rewards)[:400])


def _labels_problem(ctx: Ctx, result, runtime: str, rewards: list[dict], workspace: Path):
    """(kind, error, None) for a rollout review answer that gets a correction round, ("", "", verdict)
    for one sweep takes; a session that failed otherwise is a failed attempt."""
    from sweep.quality.review import citation_problems
    from sweep.quality.rollouts import answer_problems
    from sweep.runtimes.facts import facts_of
    if not result.ok:
        if result.reason in INVALID_OUTPUT_REASONS:
            return "invalid output", f"reviewer output: {result.evidence[:1500]}", None
        raise AttemptFailed(f"rollout review session {result.status}: {result.reason or ''} {result.evidence[:300]}")
    try:
        verdict = ReviewVerdict.model_validate(result.structured_output or {})
    except ValidationError as exc:
        return "invalid output", f"reviewer output: {describe_validation_error(exc)}", None
    mechanical = facts_of(runtime).mechanical       # the oracle's labels are the rules' own
    problems = answer_problems((verdict.model_extra or {}).get("rollouts"), rewards,
                               (lambda findings: []) if mechanical else
                               (lambda findings: citation_problems(ctx.paths.task, findings,
                                                                   {"rollouts/": workspace / "rollouts"})))
    if problems:
        return "invalid rollout labels", "; ".join(problems)[:1500], None
    return "", "", verdict


ROLLOUT_FILE_DIFFED = 256 * 1024     # a changed file bigger than this is named, not diffed


def _rollout_diff(base_repo: Path, workspace: Path, changed: list[str]) -> str:
    """What the solver changed under repo/, as a unified diff of the changed text files (bounded:
    rollouts.DIFF_BYTES); a binary, large or non-regular file is only named."""
    import difflib
    from sweep.quality.rollouts import bounded_diff
    out: list[str] = []
    for rel in sorted(p[len("repo/"):] for p in changed if p.startswith("repo/")):
        sides: list[str | None] = []
        for path in (base_repo / rel, workspace / "repo" / rel):
            if path.is_symlink() or (path.exists() and not path.is_file()):
                sides.append(None)
            elif not path.exists():
                sides.append("")
            elif path.stat().st_size > ROLLOUT_FILE_DIFFED:
                sides.append(None)
            else:
                data = path.read_bytes()
                sides.append(None if b"\0" in data else data.decode("utf-8", errors="replace"))
        if sides[0] is None or sides[1] is None:
            out.append(f"(changed: {rel}: binary, large or not a regular file; not diffed)\n")
            continue
        out += difflib.unified_diff(sides[0].splitlines(True), sides[1].splitlines(True), f"a/{rel}", f"b/{rel}")
        if sum(len(x) for x in out) > 4 * 8192:
            break
    return bounded_diff("".join(out))


def ended_by_a_bound(result) -> bool:
    """A session stopped by one of its own bounds (walltime, turns, cost, a resource bound, an
    out-of-scope write, an unsafe workspace): the agent ran and did not finish in its bounds."""
    reason = result.reason or ""
    return reason in BOUND_REASONS or reason.startswith("limit_")


BOUND_REASONS = frozenset({"walltime", "max_turns", "max_budget", "out_of_scope_write", "unsafe_workspace"})


def _rollout_never_ran(ctx: Ctx, k: int, result) -> NoReturn:
    """A solver session that failed before producing a result (the CLI could not start or crashed,
    a config or parse failure) is no evidence of the task's difficulty: the run spends an attempt
    and tries again, and on its last attempt ends unverified, never verified on a missing reward."""
    detail = f"solver rollout {k} could not run ({result.failure_class}: {result.reason}): {result.evidence}"[:500]
    if ctx.record.attempts + 1 >= ctx.record.max_attempts:
        raise Ending(Outcome.generated_unverified, EndReason.insufficient_evidence, detail)
    raise AttemptFailed(detail)


def evaluate(ctx: Ctx) -> NoReturn:
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
    unscored = [i for i, r in enumerate(getattr(cps.solve, "rewards", None) or []) if r is None] if cps.solve else []
    if unscored:     # written by an older sweep, or a bug: a rollout without a reward is no evidence
        raise Ending(Outcome.generated_unverified, EndReason.insufficient_evidence,
                     f"solver rollout(s) {unscored} have no reward")
    _end_if_quality_spent(ctx)        # also after a controller killed between settling and ending
    probes_ok, probes_why = _probes_ok(ctx, cps, sha)
    if gates_ok and review_ok and probes_ok and solve_sha == sha:
        _end_if_rollouts_block(ctx, cps)
    if gates_ok and review_ok and probes_ok and solve_sha in (None, sha):
        score = cps.probes.mutation_score if cps.probes else None
        solved = cps.solve.solved if cps.solve else None
        raise Ending(Outcome.verified, None, "gates passed, probes as required"
                     + (f" (mutants killed {cps.probes.killed}/{cps.probes.run}" + (
                         f", {cps.review.excused_mutants} surviving excused as equivalent" if cps.review
                         and cps.review.excused_mutants else "") + ")" if score is not None and cps.probes else "") + f", review accepted for bundle {sha[:12]}"
                     + (f", rollouts solved {solved}/{cps.solve.rollouts}" if solved is not None and cps.solve else ""))
    if gates_ok and review_ok and cps.probes is not None and cps.probes.bundle_sha256 == sha:
        raise Ending(Outcome.generated_unverified, EndReason.weak_tests, probes_why[:500],
                     cause="probe_focus_missing" if probes_why.startswith(_focus_missing_text([]))
                     else "equivalence_over_bound" if f"({EQUIVALENCE_REFUSED}: " in probes_why else None)
    missing = [name for name, ok in (("gates", gates_ok), ("review", review_ok), ("probes", probes_ok)) if not ok]
    raise Ending(Outcome.generated_unverified, EndReason.evidence_incomplete,
                 f"{', '.join(missing)} not passed for the current bundle {sha[:12]}")

