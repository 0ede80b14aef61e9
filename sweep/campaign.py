"""Campaign directories: `sweep init` and loading the frozen campaign.

`init` is crash-safe and idempotent: it writes the roles, then every run (candidate.json, then a
queued state.json), then the verbatim plan copy, then ONE syncfs(2) of the campaign's filesystem,
and campaign.toml LAST. Until campaign.toml exists nothing treats the directory as a campaign, so
the runs are written without a per-file fsync (at 100,000 runs that fsync was most of init's time),
and re-running `init` with the same plan completes a half-written one, repairing any run file a
crash left torn. With a different plan it refuses: a campaign's plan is frozen.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from pydantic import ValidationError

from runstate.errors import ConfigError, validation_problem
from runstate.files import (DIR_MODE, FILE_MODE, MAX_RECORD_BYTES, dump_model, make_private_dir, read_bytes,
                            read_model, write_all, write_atomic, write_model_atomic)
from runstate.models import PIPELINE_ROLES, EndReason, Outcome, RunRecord, RunState, validate_run_id
from runstate.paths import CAMPAIGN_FILE, CANDIDATE_FILE, PLAN_INPUTS, ROLES_DIR, RUNS_DIR, STATE_FILE, CampaignPaths, RunPaths
from runstate.runs import create_run_dir, load_record, save_record
from sweep import __version__
from sweep.models.environment import JobEnvironment
from sweep.models.plan import CampaignFile, FrozenCandidate, Plan, PlanSettings

if TYPE_CHECKING:
    from sweep.scheduler.base import Scheduler

ENV_CAMPAIGN = "SWEEP_CAMPAIGN"


def _pydantic_message(exc: ValidationError) -> tuple[str, str]:
    """(field, message) of the first error, with the field as a dotted path (candidates.3.url)."""
    return validation_problem(exc, unknown="unknown field (check the spelling; see docs/campaign.md for the fields)")


def load_plan(path: Path) -> Plan:
    """Read a plan (TOML by default, JSON for *.json). Errors name the file and the field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("plan file not found", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read plan: {exc.strerror}", path=path) from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise ConfigError(f"not valid {kind}: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a table/object at the top level", path=path)
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        field, msg = _pydantic_message(exc)
        raise ConfigError(msg, path=path, field=field) from None
    return plan


def plan_sha256(plan: Plan) -> str:
    """Of what the plan says, not of every default: a newer sweep that adds a field with a default
    still recognises an unchanged plan (re-running `init` stays a no-op across upgrades)."""
    data = plan.model_dump(mode="json", exclude_defaults=True)
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


def resolve_candidates(plan: Plan, plan_path: Path) -> list[FrozenCandidate]:
    """Run ids in panel order, with options merged over the plan's defaults; duplicates rejected."""
    seen: dict[str, int] = {}
    seen_pr: dict[str, int] = {}
    out = []
    # Most candidates share the defaults or one of a few option sets, and one repository: merge,
    # check and resolve each distinct one once (at 100,000 candidates this was most of `init`).
    merged: dict[bytes, object] = {}
    repos: dict[str, str] = {}
    for i, cand in enumerate(plan.candidates):
        set_fields = cand.options.model_fields_set
        key = orjson.dumps(cand.options.model_dump(mode="json", include=set_fields),
                           option=orjson.OPT_SORT_KEYS) if set_fields else b""
        options = merged.get(key)
        if options is None:
            options = cand.options.merged_over(plan.defaults, set_fields)
            check_capabilities(options, plan_path, f"candidates.{i}.options")
            merged[key] = options
        if cand.prepared_probes or cand.required_probe_focus:
            check_prepared_probes(cand, options, plan_path, f"candidates.{i}")
        update = {"options": options}
        if cand.repo:
            repo = repos.get(cand.repo)
            if repo is None:
                path = Path(cand.repo)
                if not path.is_absolute():     # relative to the plan file, frozen as absolute
                    path = (plan_path.parent / path).resolve()
                repo = repos[cand.repo] = str(path)
            update["repo"] = repo
        cand = cand.model_copy(update=update)
        run_id = cand.derived_id()
        if run_id in seen:
            raise ConfigError(f"run id {run_id!r} of candidate {i} collides with candidate {seen[run_id]}",
                              path=plan_path, field=f"candidates.{i}",
                              hint="give one of them an explicit id")
        pr_key = cand.pr_key()
        if pr_key in seen_pr:
            raise ConfigError(f"candidate {i} is the same PR as candidate {seen_pr[pr_key]} ({pr_key})",
                              path=plan_path, field=f"candidates.{i}")
        seen[run_id] = i
        seen_pr[pr_key] = i
        out.append(FrozenCandidate(run_id=run_id, panel_index=i, pr_key=pr_key, candidate=cand))
    return out


def check_capabilities(options, plan_path: Path, where: str) -> None:
    """Fail at `init`, before any paid work, for a provider or runtime this sweep cannot run."""
    from sweep.providers import PROVIDERS, SANDBOX_PROVIDERS
    from sweep.runtimes import RUNTIMES
    # a remote provider (trials and solver in the task's image) is named in SANDBOX_PROVIDERS;
    # whether its SDK is installed is checked by the registry when it is first used
    if options.provider not in PROVIDERS and options.provider not in SANDBOX_PROVIDERS:
        raise ConfigError(f"provider {options.provider!r} is not available in this sweep "
                          f"(available: {', '.join(sorted(set(PROVIDERS) | set(SANDBOX_PROVIDERS)))})",
                          path=plan_path, field=f"{where}.provider")
    if options.test_runner is not None:
        from sweep.harbor.runners import RUNNERS, supported
        if options.test_runner not in RUNNERS:
            raise ConfigError(f"test runner {options.test_runner!r} is not one sweep knows (supported: {supported()})",
                              path=plan_path, field=f"{where}.test_runner")
    for role in PIPELINE_ROLES:
        name = getattr(options.runtimes, role)
        if name not in RUNTIMES:
            raise ConfigError(f"session runtime {name!r} is not available in this sweep "
                              f"(available: {', '.join(sorted(RUNTIMES))})", path=plan_path,
                              field=f"{where}.runtimes.{role}")
    _check_escalation(options.quality.escalation, plan_path, f"{where}.quality.escalation")


def _check_escalation(escalation, plan_path: Path, field: str) -> None:
    """The reviewer's escalation runtime exists and can play the reviewer with its options."""
    if escalation is None:
        return
    from sweep.runtimes import RUNTIMES, get_runtime
    if escalation.runtime not in RUNTIMES:
        raise ConfigError(f"session runtime {escalation.runtime!r} is not available in this sweep "
                          f"(available: {', '.join(sorted(RUNTIMES))})", path=plan_path, field=f"{field}.runtime")
    runtime = get_runtime(escalation.runtime)
    roles = runtime.capabilities(escalation.runtime_options).roles
    if roles is not None and "reviewer" not in roles:
        raise ConfigError(f"runtime {escalation.runtime!r} cannot play the reviewer (it plays {sorted(roles)})",
                          path=plan_path, field=f"{field}.runtime")
    try:
        runtime.check_options(escalation.runtime_options)
    except ConfigError as exc:
        raise ConfigError(f"{field}: {exc}", path=plan_path, field=f"{field}.runtime_options") from None


def check_prepared_probes(cand, options, plan_path: Path, where: str) -> None:
    """A candidate's prepared probes and required focus, refused at init when they cannot work:
    more probes than quality.max_probes; probes bound to a bundle sha256 with an author whose
    bundle is known only after a paid session (only an unpaid author builds it before any paid
    work, so the controller can check the hash before the reviewer's and solver's sessions); a
    required focus the oracle reviewer (which proposes no probe) can never see a probe for."""
    from sweep.runtimes.facts import facts_of
    limit = options.quality.max_probes
    if len(cand.prepared_probes) > limit:
        raise ConfigError(f"{len(cand.prepared_probes)} prepared probes, more than quality.max_probes = {limit}",
                          path=plan_path, field=f"{where}.prepared_probes")
    author = options.runtimes.author
    if cand.prepared_probes and facts_of(author).paid:
        raise ConfigError(f"prepared probes are bound to a bundle sha256, but the author runtime {author!r} is paid: "
                          "its bundle is known only after a paid session, so the hash could not be checked before "
                          "any paid work", path=plan_path, field=f"{where}.prepared_probes",
                          hint="use the oracle author, or leave the probes to the reviewer")
    if facts_of(options.runtimes.reviewer).mechanical:
        prepared = {p.focus for p in cand.prepared_probes if p.kind == "wrong_solution"}
        missing = [f for f in cand.required_probe_focus if f not in prepared]
        if missing:
            raise ConfigError(f"required focus {missing[0]!r} has no prepared wrong_solution probe, and the "
                              f"reviewer runtime {options.runtimes.reviewer!r} proposes none, so the run could "
                              "never verify", path=plan_path, field=f"{where}.required_probe_focus")


@dataclass
class InitResult:
    campaign: CampaignFile
    created: bool
    runs_written: int
    warnings: list[str] = field(default_factory=list)


def check_local_sources(frozen: list[FrozenCandidate], plan_path: Path) -> dict[int, tuple[str, str]]:
    """Every local repository exists and is a git repository, and every base/head names a commit
    in it: one `git cat-file --batch-check` per repository, whatever the number of candidates, each
    distinct ref asked once (100,000 candidates on one base: 100,001 lookups, not 200,000).
    A missing one is an error naming the candidate's field and the ref, before any run exists
    (otherwise each run would burn a job to end intake_failed). Returns panel index -> the (base,
    head) commits of each local candidate."""
    from sweep.git import GitFailed, run_git
    by_repo: dict[str, list[tuple[int, str, str]]] = {}
    for fc in frozen:
        c = fc.candidate
        if c.url or not c.repo:
            continue
        repo, base, head = c.local_source()
        by_repo.setdefault(repo, []).extend([(fc.panel_index, "base", base), (fc.panel_index, "head", head)])
    commits: dict[int, dict[str, str]] = {}
    for repo, refs in by_repo.items():
        i = refs[0][0]
        path = Path(repo)
        if not path.is_dir():
            raise ConfigError(f"repository {repo} does not exist", path=plan_path, field=f"candidates.{i}.repo")
        distinct = list(dict.fromkeys(ref for _, _, ref in refs))    # a shared base is asked once
        query = "".join(f"{ref}^{{commit}}\n" for ref in distinct).encode()
        try:      # sweep.git's hardened call: the repository's own config runs nothing
            stdout = run_git(["cat-file", "--batch-check"], repo=repo, input=query, timeout=120)
        except GitFailed as exc:
            what = "cannot read repository" if exc.timed_out else "is not a git repository:"
            raise ConfigError(f"{repo} {what} {exc.message[:200]}", path=plan_path,
                              field=f"candidates.{i}.repo") from None
        answers = dict(zip(distinct, stdout.decode(errors="replace").splitlines(), strict=False))
        for idx, which, ref in refs:
            answer = answers.get(ref, "")
            if answer.endswith(" missing") or " commit " not in f" {answer} ":
                raise ConfigError(f"{which} {ref!r} is not a commit in {repo}", path=plan_path,
                                  field=f"candidates.{idx}.{which}")
            commits.setdefault(idx, {})[which] = answer.split(" ", 1)[0]
    return {idx: (c["base"], c["head"]) for idx, c in commits.items()}


def preflight_scheduler(plan: Plan, frozen: list[FrozenCandidate], plan_path: Path) -> list[str]:
    """GPU candidates need a GPU lane on a backend with lanes; then the backend's own preflight
    (the scheduler contract; on Slurm one sinfo, one scontrol). Errors raise ConfigError naming the
    field; what could not be checked comes back as warnings."""
    from sweep.scheduler import backend
    sched = plan.scheduler
    gpu = [fc for fc in frozen if fc.candidate.options.gpus > 0]
    chosen = backend(sched.backend)
    if not chosen.uses_lanes:
        return []
    if gpu and "gpu" not in sched.lanes.model_fields_set:
        fc = gpu[0]
        raise ConfigError(f"candidate {fc.run_id} needs {fc.candidate.options.gpus} GPU(s) but the plan "
                          "configures no GPU lane", path=plan_path,
                          field=f"candidates.{fc.panel_index}.options.gpus",
                          hint="add [scheduler.lanes.gpu] with the partition that has your GPUs (docs/slurm.md)")
    warnings = []
    checked = chosen.preflight(sched, bool(gpu), max((fc.candidate.options.gpus for fc in gpu), default=0))
    for f in checked.findings:
        if f.level == "error":
            raise ConfigError(f.message, path=plan_path, field=f.field)
        warnings.append(f"{f.field}: {f.message}")
    return warnings


def resolve_environment(environment: JobEnvironment, plan_path: Path, campaign_dir: Path) -> JobEnvironment:
    """The plan's `[environment]` with every path absolute and checked (sweep/models/environment.py)."""
    from sweep.models.environment import EnvironmentProblem
    try:
        return environment.resolved(plan_path.parent, campaign_dir)
    except EnvironmentProblem as exc:
        raise ConfigError(str(exc), path=plan_path, field=f"environment.{exc.field}") from None


READINESS_AT_INIT = 3      # distinct test commands tried by `init` (each one run of the tests)


def check_test_commands(plan: Plan, frozen: list[FrozenCandidate]) -> tuple[dict[str, str], list[str]]:
    """The readiness check at `init` (sweep/readiness.py), as warnings: for the first local
    candidate of each of the first few distinct test commands, the command run once on the base
    checkout in the job's environment. Returns ({test command: its program as resolved there
    ("" = not found)}, warnings). The controller runs the same check again, on its own node, in
    its own job's environment, and parks the run when it fails."""
    import shlex
    import shutil

    from runstate.errors import ProviderError
    from sweep.providers import get_provider
    from sweep.readiness import check_local_candidate
    warnings: list[str] = []
    programs: dict[str, str] = {}
    from sweep.scheduler import backend
    if plan.environment is None and not backend(plan.scheduler.backend).jobs_get_tickers_environment:
        warnings.append("the plan declares no [environment]: controller jobs get the environment of whatever "
                        "runs `sweep tick` (from scrontab: the login PATH, not this shell's); declare the "
                        "toolchains the test command needs (docs/campaign.md#environment)")
    seen: dict[tuple[str, str | None, str | None], FrozenCandidate] = {}
    for fc in frozen:
        opts = fc.candidate.options
        key = (opts.test_command or "python3 -m unittest -q", opts.test_workdir, opts.test_runner)
        if key not in seen and fc.candidate.repo and opts.provider == "local":
            seen[key] = fc
    if not seen:
        return programs, warnings
    try:
        provider = get_provider("local", isolation=plan.isolation,
                                environment=plan.environment.sandbox() if plan.environment else None)
    except (ConfigError, ProviderError) as exc:
        return programs, [*warnings, f"readiness not checked: {exc}"]
    for n, ((command, workdir, runner), fc) in enumerate(seen.items()):
        if n >= READINESS_AT_INIT:
            warnings.append(f"readiness checked for the first {READINESS_AT_INIT} distinct test commands only")
            break
        repo, base, head = fc.candidate.local_source()
        ready = check_local_candidate(repo, base, head, command, provider, test_workdir=workdir,
                                      test_runner=runner, limits=plan.limits.to_limits())
        if ready.program is not None:
            programs[command] = ready.program
        where = f"candidates.{fc.panel_index} ({command!r})"
        if not ready.ok:
            warnings.append(f"{where}: readiness: {ready.line()}; every run with this test command will park "
                            "with this cause before its author session")
        program = shlex.split(command)[0]
        here = shutil.which(program) if "/" not in program else program
        if ready.program and here and os.path.realpath(here) != os.path.realpath(ready.program):
            warnings.append(f"{where}: {program} is {here} in this shell but {ready.program} in the job "
                            "environment: the tests run with the latter")
    return programs, warnings


def _refuse_missing_keys(plan: Plan, frozen: list[FrozenCandidate], plan_path: Path) -> None:
    """ConfigError naming role, runtime and family when a runtime that needs a key (claude-code,
    codex) plays a role whose key family has no `[secrets]` entry."""
    from sweep.credentials import DEFAULT_VARIABLE
    from sweep.runtimes.preflight import missing_key_families
    for where, role, runtime, family in missing_key_families(plan, [fc.candidate for fc in frozen])[:1]:
        variable = DEFAULT_VARIABLE.get(family, "THE_KEY_VARIABLE")
        raise ConfigError(f"{where}: role {role} is played by runtime {runtime}, which needs a key of family "
                          f"{family!r}, and the plan's [secrets] has no {family!r} entry",
                          path=plan_path, field=f"secrets.{family}",
                          hint=f'add [secrets] {family} = {{ file = "/path/to/key" }} (a 0600 file of yours) '
                               f'or {family} = {{ env = "{variable}" }} (read from the controller\'s environment)')


def _refuse_key_in_remote_sandbox(plan: Plan, frozen: list[FrozenCandidate], plan_path: Path) -> None:
    """ConfigError naming candidate, role, provider and runtime when a solver session would hold
    its model key inside a remote sandbox and the plan does not accept that for the provider; and
    when the plan accepts it for a provider no such session uses (a setting with no effect)."""
    from sweep.runtimes.preflight import key_in_remote_sandbox
    uses = key_in_remote_sandbox([fc.candidate for fc in frozen])
    for where, role, runtime, provider in uses:
        settings = next((s for n, s in plan.providers.items() if n == provider), None)
        if settings is None or not settings.agent_key_in_sandbox:
            raise ConfigError(f"{where}: role {role} is played by runtime {runtime} on provider {provider}: its "
                              "model key would sit inside the remote sandbox, where no relay meters or hides it "
                              "(the relay cannot be reached from a remote sandbox)",
                              path=plan_path, field=f"providers.{provider}.agent_key_in_sandbox",
                              hint=f"set [providers.{provider}] agent_key_in_sandbox = true to accept that "
                                   "knowingly (every report then says so; the cost is self-reported), or give the "
                                   "candidate provider = \"local\"")
    used = {provider for *_, provider in uses}
    for name, settings in plan.providers.items():
        if settings.agent_key_in_sandbox and name not in used:
            raise ConfigError(f"agent_key_in_sandbox is set for {name}, but no candidate runs an agent solver "
                              f"on {name}, so no session would hold a key there", path=plan_path,
                              field=f"providers.{name}.agent_key_in_sandbox", hint="remove it")


def init_campaign(plan_path: Path, campaign_dir: Path) -> InitResult:
    plan_path = Path(plan_path).resolve()
    campaign_dir = Path(campaign_dir).resolve()
    if campaign_dir.exists() and not campaign_dir.is_dir():
        raise ConfigError("not a campaign directory (it is a file)", path=campaign_dir,
                          hint="give --campaign a new directory")
    plan = load_plan(plan_path)
    frozen = resolve_candidates(plan, plan_path)
    commits = check_local_sources(frozen, plan_path)
    from sweep.priors import load_priors
    priors = load_priors(plan.prior_verified, plan_path)     # each re-validated: a changed one is an error
    warnings = preflight_scheduler(plan, frozen, plan_path)
    sha = plan_sha256(plan)
    if plan.environment is not None:      # every path absolute and checked, frozen as resolved
        plan = plan.model_copy(update={"environment": resolve_environment(plan.environment, plan_path,
                                                                          campaign_dir)})
    if plan.secrets:      # paths frozen absolute, each file checked (0600, yours) before anything is written
        from sweep.credentials import resolve_plan_secrets
        plan = plan.model_copy(update={"secrets": resolve_plan_secrets(plan.secrets, plan_path)})
    _refuse_missing_keys(plan, frozen, plan_path)     # a runtime's key named now, not parked on a 401 later
    _refuse_key_in_remote_sandbox(plan, frozen, plan_path)    # no key in a remote sandbox by default
    # the agent CLIs the plan uses: installed, runnable inside the sandbox, options valid; a missing
    # binary or a bad argv is a config error now, never an attempt or an "outage" park later
    from sweep.runtimes.preflight import check_agent_runtimes
    for finding in check_agent_runtimes(plan, [fc.candidate for fc in frozen]):
        if finding.level == "error":
            raise ConfigError(finding.message, path=plan_path, field=finding.where.split(" ")[0],
                              hint="`sweep doctor` checks every agent CLI of a campaign")
    existing = campaign_dir / CAMPAIGN_FILE
    if existing.exists():
        current = load_campaign(campaign_dir)
        if current.plan_sha256 != sha:
            raise ConfigError("this directory already holds a campaign made from a different plan; "
                              "a campaign's plan is frozen", path=existing,
                              hint="use a new --campaign directory for the changed plan")
        written = _write_runs(campaign_dir, plan, frozen, _duplicates(priors, frozen, commits))
        # (completes a crashed init, else no-op)
        return InitResult(current, False, written, warnings)
    if campaign_dir.exists() and any(p.name not in {ROLES_DIR, RUNS_DIR, *PLAN_INPUTS}
                                     for p in campaign_dir.iterdir()):
        raise ConfigError("directory is not empty and is not a sweep campaign", path=campaign_dir,
                          hint="choose a new directory")
    toml_plan, json_plan = PLAN_INPUTS
    plan_copy = campaign_dir / (json_plan if plan_path.suffix.lower() == ".json" else toml_plan)
    programs, ready_warnings = check_test_commands(plan, frozen)
    warnings += ready_warnings
    campaign = CampaignFile(campaign_id=hashlib.sha256(f"{campaign_dir}\0{sha}\0{time.time()}".encode())
                            .hexdigest()[:8], plan_sha256=sha, plan_file=plan_copy.name,
                            created_at=time.time(), sweep_version=__version__,
                            candidate_count=len(frozen), test_programs=programs, priors=priors,
                            settings=PlanSettings.model_validate(plan.model_dump(exclude={"candidates"})))
    # Rendered (and proven to read back) before anything is created: a plan whose settings TOML
    # cannot hold is refused with nothing written, not after the runs exist.
    campaign_text = _campaign_text(campaign, plan_path)
    make_private_dir(campaign_dir)
    _copy_roles(campaign_dir)
    written = _write_new_runs(campaign_dir, plan, frozen, _duplicates(priors, frozen, commits))
    write_atomic(plan_copy, plan_path.read_bytes())
    _sync_filesystem(campaign_dir)       # every run durable before campaign.toml says they exist
    write_atomic(CampaignPaths(campaign_dir).campaign_file, campaign_text)
    return InitResult(campaign, True, written, warnings)


def _copy_roles(campaign_dir: Path) -> None:
    target = make_private_dir(CampaignPaths(campaign_dir).roles)
    for entry in resources.files("roles").iterdir():
        if entry.name.endswith(".toml"):
            write_atomic(target / entry.name, entry.read_bytes())


def role_cost_caps(campaign_dir: Path) -> dict[str, float | None]:
    """Each pipeline role's budget.cost_cap_usd from the campaign's manifests (None if unreadable)."""
    from roles import load_manifest
    caps: dict[str, float | None] = {}
    for role in PIPELINE_ROLES:
        try:
            caps[role] = load_manifest(CampaignPaths(campaign_dir).role_manifest(role)).budget.cost_cap_usd
        except (ConfigError, OSError):
            caps[role] = None
    return caps


def largest_session_reservation(caps: dict[str, float | None], options) -> float:
    """The most one session of this candidate reserves (an agent session reserves its role's cost
    cap when the plan sets no worker_reservation_usd): the tick never grants a run an allocation
    that could not pay for it."""
    from sweep.runtimes.base import session_reservation
    return max([options.worker_reservation_usd] + [
        session_reservation(getattr(options.runtimes, role), caps.get(role), options.worker_reservation_usd)
        for role in PIPELINE_ROLES])


def _duplicates(priors: list, frozen: list[FrozenCandidate], commits: dict[int, tuple[str, str]]) -> dict[str, str]:
    """run id -> why it is a duplicate of a prior (the same GitHub PR, or the same commits)."""
    from sweep.priors import duplicate_of
    out = {}
    for fc in frozen:
        prior = duplicate_of(priors, fc.pr_key, commits.get(fc.panel_index)) if priors else None
        if prior is not None:
            out[fc.run_id] = f"the same PR as the verified prior {prior.entry} ({prior.kind} {prior.path})"
    return out


def _initial_record(plan: Plan, fc: FrozenCandidate, reservation_usd: float, duplicate: str | None = None) -> RunRecord:
    """A queued run; a duplicate of a verified prior is written ended `blocked: duplicate` instead,
    so that no tick admits it."""
    opts = fc.candidate.options
    record = RunRecord(run_id=fc.run_id, panel_index=fc.panel_index, gpus=opts.gpus, provider=opts.provider,
                       lane="gpu" if opts.gpus else "cpu", max_attempts=plan.max_attempts,
                       max_interruptions=plan.max_interruptions, cap_usd=opts.max_spend_usd,
                       reservation_usd=reservation_usd)
    if duplicate is None:
        return record
    return record.model_copy(update={"state": RunState.ended, "outcome": Outcome.blocked,
                                     "reason": EndReason.duplicate.value, "cause": "duplicate",
                                     "cause_detail": duplicate[:300]})


def _write_runs(campaign_dir: Path, plan: Plan, frozen: list[FrozenCandidate], duplicates: dict[str, str]) -> int:
    """Complete the runs of a campaign whose campaign.toml exists: only a missing state.json is
    written (a run that exists may have moved on since), each write durable on its own."""
    written = 0
    caps = role_cost_caps(campaign_dir)
    for fc in frozen:
        rdir = create_run_dir(campaign_dir, fc.run_id)
        cand_path = rdir / CANDIDATE_FILE
        prior = read_model(cand_path, FrozenCandidate)
        if prior.value is None or prior.value != fc:
            write_model_atomic(cand_path, fc)
        if load_record(rdir).missing:
            save_record(rdir, _initial_record(plan, fc, largest_session_reservation(caps, fc.candidate.options),
                                              duplicates.get(fc.run_id)))
            written += 1
    return written


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _write_new_runs(campaign_dir: Path, plan: Plan, frozen: list[FrozenCandidate], duplicates: dict[str, str]) -> int:
    """Write every run of a campaign that has no campaign.toml yet, WITHOUT a per-file fsync.

    Nothing reads a run before campaign.toml exists, and campaign.toml is written only after one
    syncfs(2) of the whole campaign filesystem (`_sync_filesystem`): so a crash before it leaves
    files that may be torn or missing, in a directory no verb treats as a campaign, and the next
    `init` repairs every run that is not exactly what it should be. A new run directory is filled
    with plain exclusive creates (no temp file, no rename, plain strings: at 100,000 runs pathlib
    and fsync were most of init's time); a run directory that already exists (a crashed init's)
    is checked and repaired file by file.
    """
    root = os.fspath(campaign_dir / RUNS_DIR)
    os.makedirs(root, mode=DIR_MODE, exist_ok=True)
    os.chmod(root, DIR_MODE)
    umask_ok = _owner_bits_survive_umask()
    caps = role_cost_caps(campaign_dir)
    reservations: dict[int, float] = {}     # candidates share a few option objects (resolve_candidates)
    written = 0
    for fc in frozen:
        opts = fc.candidate.options
        reservation = reservations.get(id(opts))
        if reservation is None:
            reservation = reservations[id(opts)] = largest_session_reservation(caps, opts)
        validate_run_id(fc.run_id)
        rdir = f"{root}/{fc.run_id}"
        try:
            os.mkdir(rdir, DIR_MODE)
        except FileExistsError:
            written += _repair_run(Path(rdir), plan, fc, reservation, duplicates.get(fc.run_id))
            continue
        if not umask_ok:
            os.chmod(rdir, DIR_MODE)
        _create(f"{rdir}/{CANDIDATE_FILE}", dump_model(fc))
        record = _initial_record(plan, fc, reservation, duplicates.get(fc.run_id))
        record.check_invariants()
        _create(f"{rdir}/{STATE_FILE}", dump_model(record))
        written += 1
    return written


def _repair_run(rdir: Path, plan: Plan, fc: FrozenCandidate, reservation_usd: float, duplicate: str | None) -> int:
    """A run directory left by a crashed init (no campaign.toml, so nothing else touched it):
    rewrite what is missing, torn or different. Returns 1 if state.json was (re)written."""
    create_run_dir(rdir.parent.parent, fc.run_id)
    prior = read_model(rdir / CANDIDATE_FILE, FrozenCandidate)
    if prior.value is None or prior.value != fc:
        write_atomic(rdir / CANDIDATE_FILE, dump_model(fc))
    want = _initial_record(plan, fc, reservation_usd, duplicate)
    have = load_record(rdir).value
    if have is not None and have.model_dump(exclude={"created", "updated"}) == \
            want.model_dump(exclude={"created", "updated"}):
        return 0
    want.check_invariants()
    write_atomic(rdir / STATE_FILE, dump_model(want))
    return 1


def _create(path: str, data: bytes) -> None:
    fd = os.open(path, _NEW_FILE, FILE_MODE)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def _owner_bits_survive_umask() -> bool:
    mask = os.umask(0o077)
    os.umask(mask)
    return not (mask & 0o700)


def _sync_filesystem(directory: Path) -> None:
    """Make every write so far durable in one call: syncfs(2) on the campaign's filesystem (Linux),
    else sync(2). Both return after the data and metadata are on stable storage."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.syncfs(fd) == 0:
                return
        except (OSError, AttributeError):
            pass
        os.sync()
    finally:
        os.close(fd)


def _campaign_text(campaign: CampaignFile, plan_path: Path) -> bytes:
    """campaign.toml's bytes, parsed back and re-validated here so that what `init` writes is a
    campaign every verb can load (a key or value TOML cannot hold is refused, naming the field)."""
    from sweep.tomlw import TomlValueError, dumps_checked
    header = ("# Frozen by `sweep init`: the plan settings this campaign runs with.\n"
              "# Do not edit: change the plan and use a new campaign directory.\n")
    try:
        text = header + dumps_checked(campaign.model_dump(mode="json"))
    except TomlValueError as exc:
        field = exc.field.removeprefix("settings.") or None
        raise ConfigError(f"cannot be stored in {CAMPAIGN_FILE}: {exc.reason}", path=plan_path,
                          field=field) from None
    try:
        back = CampaignFile.model_validate(tomllib.loads(text))
    except (ValueError, ValidationError) as exc:
        raise ConfigError(f"{CAMPAIGN_FILE} would not read back: {exc}", path=plan_path) from None
    if back != campaign:
        raise ConfigError(f"the plan's settings do not survive a round trip through {CAMPAIGN_FILE} "
                          "(a null value inside a table, or a value TOML cannot hold)", path=plan_path)
    return text.encode()


@dataclass(frozen=True)
class Campaign:
    """A loaded campaign: its directory and its frozen campaign.toml, handed around as one value
    (the two used to travel as a pair, in varying order). "campaign" on the command line is the
    directory; `Campaign.load` is how code turns it into this."""

    dir: Path
    file: CampaignFile

    @classmethod
    def load(cls, campaign_dir: str | os.PathLike[str]) -> Campaign:
        campaign_dir = Path(campaign_dir).resolve()
        return cls(campaign_dir, load_campaign(campaign_dir))

    @property
    def settings(self) -> PlanSettings:
        return self.file.settings

    @property
    def paths(self) -> CampaignPaths:
        """Where each campaign-level file lives (runstate/paths.py)."""
        return CampaignPaths(self.dir)

    def run(self, run_id: str) -> RunPaths:
        return RunPaths(self.dir, run_id)

    def scheduler(self) -> Scheduler:
        """The scheduler backend the plan chose, for this campaign's jobs (name prefix filter)."""
        from sweep.scheduler import make_scheduler
        return make_scheduler(self.file.settings.scheduler, self.dir, self.file.job_prefix)


def load_campaign(campaign_dir: Path) -> CampaignFile:
    """Read campaign.toml; a missing or invalid file makes the campaign unusable (ConfigError)."""
    path = Path(campaign_dir) / CAMPAIGN_FILE
    try:
        raw = read_bytes(path, MAX_RECORD_BYTES)    # a FIFO or a link to /dev/zero: refused, not read
    except NotADirectoryError:
        raw = None
    except OSError as exc:     # campaign.toml a directory, a FIFO, unreadable, ...
        raise ConfigError(f"campaign.toml cannot be read: {exc.strerror or exc}", path=path) from None
    if raw is None:
        raise ConfigError("not a sweep campaign (no campaign.toml)", path=Path(campaign_dir),
                          hint="create one with `sweep init PLAN --campaign DIR`")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
        return CampaignFile.model_validate(data)
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, ValidationError):
            field, msg = _pydantic_message(exc)
            raise ConfigError(msg, path=path, field=field) from None
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None


def load_candidate(rdir: Path) -> FrozenCandidate:
    loaded = read_model(Path(rdir) / CANDIDATE_FILE, FrozenCandidate)
    if loaded.value is None:
        raise ConfigError(f"candidate file {loaded.problem}", path=loaded.path)
    return loaded.value


def find_campaign(option: str | os.PathLike | None) -> Path:
    """--campaign, else $SWEEP_CAMPAIGN, else the current directory.

    A path that is not a directory is refused here, in one line (exit 2), so that no verb ever
    reaches a traceback by treating a file as a campaign."""
    chosen = option or os.environ.get(ENV_CAMPAIGN) or "."
    path = Path(chosen).resolve()
    if path.exists() and not path.is_dir():
        raise ConfigError("not a campaign directory (it is a file)", path=path,
                          hint="pass the directory `sweep init` created, e.g. --campaign DIR")
    return path
