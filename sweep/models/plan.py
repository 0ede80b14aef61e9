"""The campaign plan: what `sweep init` reads (TOML or JSON) and freezes into campaign.toml.

User-facing models forbid unknown keys (a typo is an error naming the field, not a silently ignored
setting). The frozen campaign file is read back with the same models, so what the tick and the
controller see is exactly what `init` validated.
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runstate.causes import DEFAULT_BREAKER_CAUSES
from runstate.models import PIPELINE_ROLES, RUN_ID_RE
from sweep.models.environment import JobEnvironment
from sweep.models.lanes import SchedulerSettings

GITHUB_PR_RE = re.compile(r"^https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/pull/(\d+)/?$")


def github_pr(url: str) -> tuple[str, str, str]:
    """(owner, repo, number) of a GitHub pull request URL; ValueError for anything else."""
    m = GITHUB_PR_RE.match(url)
    if m is None:
        raise ValueError(f"{url!r} is not a GitHub pull request URL (expected https://github.com/OWNER/REPO/pull/NUMBER)")
    owner, repo, number = m.groups()
    return owner, repo, number
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")     # a campaign's or an evaluation's name
GIT_REF_RE = re.compile(r"^[A-Za-z0-9._/@^~+-]{1,200}$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EscalationSettings(Strict):
    """The reviewer's escalation: when a review's answer is refused again after its correction
    round (an invalid output, a blocking finding whose citation is not in the bundle, an accept
    that leaves a surviving mutant or a required focus unjudged), one more review by this runtime
    and its options (e.g. a stronger model) with every refusal so far, before the attempt fails."""
    runtime: str
    runtime_options: dict[str, Any] = Field(default_factory=dict)


class QualitySettings(Strict):
    repair: bool = True                 # gate/review failures go back to the author
    max_repairs: int = Field(default=2, ge=0, le=20)
    run_rollout: bool = True            # blind solver rollouts after review
    rollouts: int = Field(default=1, ge=0, le=64)
    gate_repeats: int = Field(default=2, ge=1, le=10)   # reference=1 / empty=0, each repeated
    max_probes: int = Field(default=3, ge=0, le=100)
    max_spend_usd: float | None = Field(default=None, ge=0)
    # wrong solutions derived from the reference patch (sweep/quality/mutants.py), each run as a
    # probe after the gates; 0 runs none. "enforce": a surviving mutant keeps the run from
    # `verified` (the oracle reviewer ends it weak_tests; an agent reviewer must judge it
    # equivalent or ask for a repair); "report": survivors are only recorded and shown
    max_mutants: int = Field(default=12, ge=0, le=500)
    mutants: Literal["enforce", "report"] = "enforce"
    # how many surviving mutants of one bundle an agent reviewer's `equivalent` claims may excuse
    # (model output may tighten a mechanical check, never loosen it, beyond what the plan allows):
    # over the bound every claim is recorded but no claimed mutant is excused (the run needs a
    # repair, else ends weak_tests); a return_constant mutant is never excused (sweep/quality/review.py)
    max_equivalent_mutants: int = Field(default=0, ge=0, le=500)
    # rollouts that all scored 0 (a solve rate of 0) keep the run from `verified` unless this is
    # true: the plan then says rollouts are evidence only (e.g. a solver known to be weak)
    allow_unsolved: bool = False
    escalation: EscalationSettings | None = None     # see EscalationSettings; None: a failed attempt


class RuntimeChoice(Strict):
    author: str = "oracle"
    reviewer: str = "oracle"
    solver: str = "oracle"


class CandidateOptions(Strict):
    """How one candidate is worked on (the plan's `defaults`, overridden per candidate key by key).

    `runtime_options` gives a role's session runtime its options, keyed by role, e.g. for the
    `command` runtime (see sweep/runtimes/command.py for its keys):

        [defaults.runtimes]
        author = "command"
        [defaults.runtime_options.author]
        argv = ["my-agent", "--prompt", "{prompt_file}", "--tools", "{tools}", ...]

    Only the shape is checked here (a role name -> a table with string keys): whether the options
    suit the runtime depends on `runtimes`, which a candidate may set separately from the
    defaults, so the runtime itself checks them before each session starts, before anything is
    written or paid for. A role missing from the table gets no options (what oracle and nop take).
    """

    provider: Literal["local", "modal", "daytona"] = "local"
    runtimes: RuntimeChoice = Field(default_factory=RuntimeChoice)
    runtime_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    gpus: int = Field(default=0, ge=0, le=64)
    max_spend_usd: float | None = Field(default=None, ge=0)        # this candidate's cap
    worker_reservation_usd: float = Field(default=0.0, ge=0)       # reserved per paid session
    test_command: str | None = None     # how the task's tests run (from the plan: trusted)
    # where in the repository the test command runs (relative), instead of `cd DIR && ...`
    test_workdir: str | None = None
    # which runner module reads the tests' per-test results (sweep/harbor/runners); None: detected
    # from test_command. Needed for tools no command reveals (tap, junit); checked at init
    test_runner: str | None = None
    quality: QualitySettings = Field(default_factory=QualitySettings)

    @field_validator("test_command")
    @classmethod
    def _check_test_command(cls, v: str | None) -> str | None:
        if v is not None:
            check_test_command(v)
        return v

    @field_validator("test_workdir")
    @classmethod
    def _check_test_workdir(cls, v: str | None) -> str | None:
        if v is not None:
            check_test_workdir(v)
        return v

    @field_validator("runtime_options")
    @classmethod
    def _check_runtime_options(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for role in v:
            if role not in PIPELINE_ROLES:
                raise ValueError(f"runtime_options has an entry for {role!r}, which is not a role "
                                 f"(roles: {', '.join(PIPELINE_ROLES)})")
        return v

    def merged_over(self, base: "CandidateOptions", explicitly_set: set[str]) -> "CandidateOptions":
        """These options over `base`, key by key at every level: a candidate that sets only
        `runtimes.solver` keeps the defaults' author and reviewer, and one that sets
        `runtime_options.solver.model` keeps the solver's other options and every other role's.
        Only where a candidate gives a role another runtime than the defaults do that role's
        default options go (they were written for the other CLI)."""
        data = base.model_dump()
        mine = self.model_dump(exclude_unset=True)
        for key in explicitly_set:
            if key == "runtime_options":
                continue
            data[key] = _deep_merge(data[key], mine[key]) if isinstance(data[key], dict) else mine[key]
        runtimes = data["runtimes"]
        options = {role: dict(table) for role, table in base.runtime_options.items()
                   if runtimes.get(role) == getattr(base.runtimes, role)}
        for role, table in mine.get("runtime_options", {}).items():
            options[role] = _deep_merge(options.get(role, {}), table)
        data["runtime_options"] = options
        return CandidateOptions.model_validate(data)


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


SHELL_OPERATORS = ("&&", "||", ";", "|", "&", ">", ">>", "<", "<<", "2>", "2>&1", "&>")
_ASSIGNMENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def check_test_command(command: str) -> list[str]:
    """The test command's argv. It is run as one program with its arguments, never by a shell, so
    a shell operator would be passed to the program as an argument: refused, with the way to say
    the same thing (a `test_workdir`, the `[environment]` variables)."""
    import shlex
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"{command!r} does not parse as a command line: {exc}") from None
    if not argv:
        raise ValueError("the test command is empty")
    if any("\n" in a or "\r" in a for a in argv):
        raise ValueError("the test command has an argument with a line break")
    if argv[0] == "cd" or any(a in SHELL_OPERATORS or a.endswith(";") for a in argv) \
            or any(("$(" in a or "`" in a) for a in argv):
        hint = ""
        if argv[0] == "cd" and len(argv) >= 3:
            rest = argv[3:] if argv[2] in ("&&", ";") else argv[2:]
            hint = f": write test_workdir = {argv[1].rstrip(';')!r} and test_command = {shlex.join(rest)!r}"
        raise ValueError(f"{command!r} uses the shell, but the test command runs as one program with its "
                         "arguments, without a shell (no &&, ;, |, redirections, `cd`, $(...)); run it in a "
                         "subdirectory with test_workdir" + hint)
    if _ASSIGNMENT_RE.match(argv[0]):
        raise ValueError(f"{command!r} starts with a variable assignment, which needs a shell: declare the "
                         "variable in [environment.toolchains.NAME] variables instead")
    return argv


def check_test_workdir(workdir: str) -> None:
    parts = workdir.split("/")
    if workdir.startswith("/") or ".." in parts or not workdir.strip() or any(c in workdir for c in "\n\r\0"):
        raise ValueError(f"{workdir!r}: test_workdir is a directory inside the repository, relative, "
                         "without '..'")


SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class PreparedProbe(Strict):
    """A probe the plan brings (sweep/quality/probes.py): the same shape as a reviewer's, bound to
    the sha256 of the bundle it was written for (`bundle_sha256` as the run's evidence names it).
    A probe whose bundle the run does not build is refused before any paid work."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    kind: Literal["wrong_solution", "valid_alternative"]
    focus: str = Field(default="", max_length=300)
    rationale: str = Field(default="", max_length=2000)
    patch: str = Field(min_length=1, max_length=1 << 20)
    bundle_sha256: str

    @field_validator("bundle_sha256")
    @classmethod
    def _check_sha(cls, v: str) -> str:
        if not SHA256_RE.match(v):
            raise ValueError(f"{v!r} is not a bundle sha256 (64 lowercase hex digits, as evidence/gates-r0001.json "
                             "and `sweep export`'s metadata name it)")
        return v

    @field_validator("patch")
    @classmethod
    def _check_patch(cls, v: str) -> str:
        if not v.strip() or "\n+++ " not in "\n" + v:
            raise ValueError("patch must be a unified diff of the base repository (with ---/+++ file lines)")
        return v


class Candidate(Strict):
    """One PR: a GitHub PR `url`, or a local git `repo` with `base` and `head` refs."""

    id: str | None = None               # explicit run id; derived from the source otherwise
    url: str | None = None
    repo: str | None = None
    base: str | None = None
    head: str | None = None
    title: str | None = None
    body: str | None = None
    options: CandidateOptions = Field(default_factory=CandidateOptions)
    # probes this PR's task must pass (wrong solutions scored 0, valid alternatives 1), bound to the
    # bundle sha256 they were written for; at most options.quality.max_probes (checked at init)
    prepared_probes: list[PreparedProbe] = Field(default_factory=list)
    # no accept until each of these focus strings has a wrong-solution probe (prepared or proposed
    # by the reviewer) that ran on the current bundle
    required_probe_focus: list[str] = Field(default_factory=list, max_length=20)

    @field_validator("prepared_probes")
    @classmethod
    def _unique_probe_names(cls, v: list[PreparedProbe]) -> list[PreparedProbe]:
        seen: set[str] = set()
        for i, probe in enumerate(v):
            if probe.name in seen:
                raise ValueError(f"prepared_probes[{i}].name {probe.name!r} repeats an earlier probe's name")
            seen.add(probe.name)
        return v

    @field_validator("required_probe_focus")
    @classmethod
    def _check_focus(cls, v: list[str]) -> list[str]:
        for i, focus in enumerate(v):
            if not focus.strip() or len(focus) > 300:
                raise ValueError(f"required_probe_focus[{i}] must be a focus of 1-300 characters")
            if focus in v[:i]:
                raise ValueError(f"required_probe_focus[{i}] {focus!r} repeats an earlier entry")
        return v

    @field_validator("id")
    @classmethod
    def _check_id(cls, v: str | None) -> str | None:
        if v is not None and not RUN_ID_RE.match(v):
            raise ValueError(f"{v!r} is not a valid run id: lowercase letters, digits, '.', '_', '-', "
                             "at most 128, not starting with '.'")
        return v

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str | None) -> str | None:
        if v is not None and not GITHUB_PR_RE.match(v):
            raise ValueError(f"{v!r} is not a GitHub pull request URL "
                             "(expected https://github.com/OWNER/REPO/pull/NUMBER)")
        return v

    @field_validator("base", "head")
    @classmethod
    def _check_ref(cls, v: str | None) -> str | None:
        if v is not None and (not GIT_REF_RE.match(v) or v.startswith("-")):
            raise ValueError(f"{v!r} is not a git ref sweep accepts (letters, digits, ._/@^~+-, "
                             "not starting with '-')")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> "Candidate":
        if self.url and self.repo:
            raise ValueError("give either url (a GitHub PR) or repo (a local git repository), not both")
        if not self.url and not self.repo:
            raise ValueError("a candidate needs a source: url = GitHub PR, or repo + base + head")
        if self.repo and not (self.base and self.head):
            raise ValueError("a local repo candidate needs both base and head refs")
        return self

    def derived_id(self) -> str:
        if self.id:
            return self.id
        if self.url:
            owner, repo, number = github_pr(self.url)
            raw = f"{owner}-{repo}-{number}"
        else:
            path, _, head = self.local_source()
            name = path.rstrip("/").rsplit("/", 1)[-1]
            raw = f"{name}-{head}"
        slug = re.sub(r"[^a-z0-9._-]+", "-", raw.lower()).strip("-.")
        return slug[:128] or "run"

    def pr_key(self) -> str:
        """A stable name of the PR, for duplicate detection against prior_verified."""
        if self.url:
            owner, repo, number = github_pr(self.url)
            return f"{owner}/{repo}#{number}".lower()
        return f"{self.repo}@{self.base}..{self.head}"

    def local_source(self) -> tuple[str, str, str]:
        """(repo, base, head) of a local-repository candidate; ValueError for a URL candidate (the
        validator guarantees the three together, but `model_copy` does not re-validate)."""
        if not (self.repo and self.base and self.head):
            raise ValueError("a local repo candidate needs repo, base and head")
        return self.repo, self.base, self.head


SECRET_FAMILIES = ("anthropic", "openai", "github")     # the RoleSpec key families, and intake's GitHub


def check_secret_families(secrets: dict, families: tuple[str, ...], what: str) -> dict:
    """A plan's `[secrets]`: each entry names one of `families` (`what` says which kind in the
    error), and its `variable`, when set, is one of that family's key variables."""
    from roles.spec import KEY_FAMILY_ENV
    for family, source in secrets.items():
        if family not in families:
            raise ValueError(f"secrets has an entry for {family!r}, which is not {what} "
                             f"(families: {', '.join(families)})")
        if source.variable is not None:
            allowed = [n for n in KEY_FAMILY_ENV.get(family, ()) if not n.endswith("_BASE_URL")]
            if source.variable not in allowed:
                raise ValueError(f"secrets.{family}.variable must be one of {allowed or 'nothing'} "
                                 f"(got {source.variable!r})")
    return secrets
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class SecretSource(Strict):
    """Where one key family's secret comes from: `file` (0600, yours) or `env` (a variable name of
    the controller's environment); `variable` is the name the session sees it under. See
    sweep/credentials.py. Only the reference is stored, never the value."""

    file: str | None = None
    env: str | None = None
    variable: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "SecretSource":
        if (self.file is None) == (self.env is None):
            raise ValueError("give exactly one of file (a path to a 0600 file) or env (a variable name)")
        if self.file is not None and not self.file.strip():
            raise ValueError("file is empty")
        for name in (self.env, self.variable):
            if name is not None and not _ENV_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return self


class TickSettings(Strict):
    interval_minutes: int = Field(default=1, ge=1, le=59)
    lease_ttl_s: float = Field(default=1800, ge=30)       # liveness unknown -> stale after this
    submit_grace_s: float = Field(default=120, ge=0)      # a tick-held lease younger than this is left alone
    max_runtime_s: float = Field(default=300, ge=10)      # a tick kills itself past this (frees the lock)
    controller_command: list[str] | None = None           # default: the frozen runtime's controller
    heartbeat_s: float = Field(default=60, ge=1)
    # an sbatch that got no answer may still have queued its job: its lease (and token) are kept
    # this long, while each tick looks for the token in the queue, before it counts as not submitted
    uncertain_submit_s: float = Field(default=600, ge=0)
    ghost_grace_s: float = Field(default=120, ge=0)       # an unrecognised job of ours lives this long before scancel
    lane_backoff_s: float = Field(default=30, ge=0)       # first back-off of a lane whose sbatch was refused
    lane_backoff_max_s: float = Field(default=1800, ge=0)  # the back-off doubles per refusal up to this
    # while orphaned remote sandboxes stop admission, each tick reconciles them itself for at most
    # this long (and never more than a third of max_runtime_s); 0 = only `sweep reconcile` does
    reconcile_budget_s: float = Field(default=30, ge=0)


class ScrontabSettings(Strict):
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    time: str = "00:05:00"
    mem: str = "2G"            # a tick holds every record in memory: ~6 KB a run (620 MB at 100k runs)

    @field_validator("mem")
    @classmethod
    def _check_mem(cls, v: str) -> str:
        if not re.fullmatch(r"\d+[KMGTkmgt]?", v):
            raise ValueError(f"{v!r} is not a Slurm memory size: a number with an optional K, M, G or T")
        return v

    @field_validator("partition", "qos", "account")
    @classmethod
    def _check(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9._,-]+", v):
            raise ValueError(f"{v!r} is not a valid Slurm name")
        return v


class LimitSettings(Strict):
    """Resource bounds of every role session and trial (docs/security.md says what enforces each).
    A trial's walltime comes from its task.toml (verifier/agent timeout_sec), capped by sweep's."""
    memory_mb: int | None = Field(default=8192, ge=64)
    processes: int | None = Field(default=512, ge=8)
    file_mb: int | None = Field(default=4096, ge=1)            # one file
    workspace_mb: int | None = Field(default=4096, ge=1)       # everything writable, apparent size
    transcript_kb: int | None = Field(default=8192, ge=16)     # kept per stream: head + tail
    tmp_mb: int = Field(default=1024, ge=16)                   # the private /tmp
    # the PR's diff in the author's prompt: a file summary, then at most this much of the diff
    prompt_diff_kb: int = Field(default=200, ge=1, le=1 << 20)

    def for_role(self, overrides: dict[str, int]) -> "LimitSettings":
        """These bounds with a role manifest's `[limits]` keys (roles/spec.py RoleLimits) in place."""
        return self.model_copy(update=overrides) if overrides else self

    def to_limits(self):
        from sweep.execution import Limits
        mb = 1 << 20
        return Limits(memory_bytes=self.memory_mb and self.memory_mb * mb, processes=self.processes,
                      file_bytes=self.file_mb and self.file_mb * mb,
                      workspace_bytes=self.workspace_mb and self.workspace_mb * mb,
                      transcript_bytes=self.transcript_kb and self.transcript_kb * 1024,
                      tmp_bytes=self.tmp_mb * mb)


class BreakerSettings(Strict):
    """The circuit breaker (runstate/breaker.py): `after` distinct runs of one lane in a row ending or
    failing with one of `causes` stop admission until `sweep undrain --ack CAUSE`; 0 turns it off."""

    after: int = Field(default=5, ge=0, le=100_000)
    causes: list[str] = Field(default_factory=lambda: list(DEFAULT_BREAKER_CAUSES))

    @field_validator("causes")
    @classmethod
    def _known_causes(cls, v: list[str]) -> list[str]:
        from runstate.causes import CAUSES
        unknown = [c for c in v if c not in CAUSES]
        if unknown:
            raise ValueError(f"unknown cause {unknown[0]!r} (the vocabulary is in docs/controller.md: "
                             f"{', '.join(sorted(CAUSES))})")
        return v


class ProviderSettings(BaseModel):
    """[providers.<name>]: the remote provider's own constructor options (strings: docs/providers.md),
    plus sweep's one trusted-operator setting for it.

    `agent_key_in_sandbox`: an agent solver session on this provider (claude-code, codex, or a
    `command` naming a `protocol`) runs its CLI in the task's image in the REMOTE sandbox with its
    family's key in the environment, since the credential and metering relay cannot be reached
    from there. `sweep init` refuses such a session unless this is true; with it every report
    (status, report.md, the HTML report, the session's result.json) says the key was inside that
    sandbox and the cost is self-reported (sweep/runtimes/preflight.py `key_in_remote_sandbox`)."""
    model_config = ConfigDict(extra="allow", frozen=True)
    agent_key_in_sandbox: bool = False

    @field_validator("agent_key_in_sandbox", mode="before")
    @classmethod
    def _a_real_bool(cls, v: Any) -> Any:
        if not isinstance(v, bool):
            raise ValueError("agent_key_in_sandbox must be true or false")
        return v

    @model_validator(mode="after")
    def _options_are_strings(self) -> ProviderSettings:
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, str):
                raise ValueError(f"{key}: a provider option is a string (a key is named by its file or variable)")
        return self

    def options(self) -> dict[str, str]:
        """What the provider's constructor takes (sweep's own setting left out)."""
        return {k: str(v) for k, v in (self.model_extra or {}).items()}


class PlanSettings(Strict):
    """Everything in a plan except the candidates: what campaign.toml freezes and the tick reads."""

    name: str
    target_verified: int = Field(ge=1)
    max_parallel: int = Field(default=2, ge=1, le=100_000)
    max_gpu_parallel: int = Field(default=2, ge=0, le=100_000)
    max_spend_usd: float | None = Field(default=None, ge=0)
    max_attempts: int = Field(default=3, ge=1, le=100)
    # A run parked this many times for the same role (outage, throttle, config) counts an attempt,
    # so no run can hold a role's queue forever on parks alone (e.g. a PR that makes the CLI fail
    # the same way every time).
    parks_per_attempt: int = Field(default=3, ge=1, le=100)
    # preemptions, time limits and node failures re-queue a run without an attempt, up to this many
    max_interruptions: int = Field(default=10, ge=1, le=10_000)
    # directories of tasks verified before (a run directory or an exported task: sweep/priors.py)
    prior_verified: list[str] = Field(default_factory=list)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    defaults: CandidateOptions = Field(default_factory=CandidateOptions)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    tick: TickSettings = Field(default_factory=TickSettings)
    scrontab: ScrontabSettings = Field(default_factory=ScrontabSettings)
    # "bwrap": every session and trial in the sandbox, or nothing runs (docs/security.md);
    # "none": knowingly unsandboxed, written on every session, in report.md and in `sweep status`.
    isolation: Literal["bwrap", "none"] = "bwrap"
    limits: LimitSettings = Field(default_factory=LimitSettings)
    # How to reach each remote provider a candidate's `provider` may name: the provider's own
    # options (docs/providers.md), e.g. [providers.daytona] api_url, api_key_file (a key is named by
    # its file or variable, never written here).
    # `agent_key_in_sandbox` (ProviderSettings) is sweep's, not the provider's.
    providers: dict[Literal["daytona", "modal"], ProviderSettings] = Field(default_factory=dict)

    @field_validator("isolation", mode="before")
    @classmethod
    def _no_auto_isolation(cls, v: Any) -> Any:
        if v == "auto":
            raise ValueError("isolation 'auto' was removed (it fell back to running unsandboxed): use "
                             "\"bwrap\" (required sandbox, the default) or \"none\" (knowingly unsandboxed)")
        return v

    secrets: dict[str, SecretSource] = Field(default_factory=dict)
    # The toolchains controllers, sessions and trials see (sweep/models/environment.py); None =
    # undeclared: controllers inherit the tick's environment, sandboxes its PATH (the old way).
    environment: JobEnvironment | None = None

    @field_validator("secrets")
    @classmethod
    def _check_secrets(cls, v: dict[str, SecretSource]) -> dict[str, SecretSource]:
        return check_secret_families(v, SECRET_FAMILIES, "a key family")

    @field_validator("prior_verified")
    @classmethod
    def _priors_are_directories(cls, v: list[str]) -> list[str]:
        for i, entry in enumerate(v):
            if "://" in entry or re.fullmatch(r"[\w.-]+/[\w.-]+#\d+", entry.strip()):
                raise ValueError(f"entry {i} ({entry!r}) is a PR name: prior_verified names the directory of "
                                 "a task verified before (a campaign's runs/ID or an exported task), whose "
                                 "evidence init re-validates")
        return v

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError(f"{v!r}: a campaign name is 1-64 letters, digits, '.', '_', '-'")
        return v


class Plan(PlanSettings):
    candidates: list[Candidate] = Field(min_length=1)


class PriorTask(Strict):
    """One validated `prior_verified` entry (sweep/priors.py), as frozen in campaign.toml (strings
    only: TOML has no null)."""

    entry: str              # as the plan wrote it
    path: str               # resolved, absolute
    kind: str               # "run" or "task"
    pr_key: str             # owner/repo#N for a GitHub PR, else ""
    base: str               # the commits it was verified for ("" if unknown)
    head: str
    digest: str             # bundle_sha256 (run) or the Harbor digest (task)


class CampaignFile(Strict):
    """campaign.toml: the frozen plan settings plus what `init` decided.

    The candidates are frozen one per run (runs/<id>/candidate.json) so that the file every tick
    reads stays small at 100,000 runs.
    """

    campaign_id: str                    # 8 hex chars; job names are "sw.<campaign_id>.<token>.<run id>"
    plan_sha256: str                    # of the normalised plan: `init` with the same plan is a no-op
    plan_file: str                      # the verbatim copy kept next to campaign.toml
    created_at: float
    sweep_version: str
    candidate_count: int
    settings: PlanSettings
    # each distinct test command's program as `init` resolved it in the job environment ("" = not found)
    test_programs: dict[str, str] = Field(default_factory=dict)
    # the plan's prior_verified, each validated by init (sweep/priors.py): they count toward target_verified
    priors: list[PriorTask] = Field(default_factory=list)

    @property
    def job_prefix(self) -> str:
        return f"sw.{self.campaign_id}."

    @property
    def tick_job_name(self) -> str:
        return f"sweep-tick.{self.campaign_id}"


class FrozenCandidate(BaseModel):
    """runs/<id>/candidate.json: one candidate as `init` froze it (options merged over defaults)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    panel_index: int
    pr_key: str
    candidate: Candidate
