"""Readiness: the test command run once, before anything is paid, in the job's own environment.

A test command the job environment cannot run (a program that is not on the declared PATH, a
`python3` without pytest, a runner whose per-test results sweep cannot read) used to cost every run
an author session and then end it `gates_failed`. So the test command is tried first, the way the
gates will run it: sweep builds its own bundle of the PR (the mechanical author's, whose verifier is
the harness the gates use), with the PR's test changes left out, and runs it once on the base
checkout through the same provider, with the same environment, sandbox and bounds as a gate trial.
Only the repository the plan names runs, never the PR's own test code: a hostile PR cannot make
the check fail and stop the campaign's author role. In order:

- `test_command_not_found`: the program is not in the job environment (`command -v` in the
  sandbox), or it is a Python whose module (`-m pytest`) is not importable there;
- `no_tests_collected`: the runner ran on the base but reported no test;
- `no_per_test_results`: no per-test result could be read from what the runner wrote.

`sweep init` runs it for a few distinct test commands and warns; the controller runs it once per
run, before the author's first session, and parks the run with the cause when it fails (a
configuration error of the role `author`: nothing was spent, and the role's cooldown keeps the other
runs from trying the same broken environment).
"""
from __future__ import annotations

import re
import shlex
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any
from pathlib import Path

from sweep.execution import ExecSpec, Limits, Provider

CAUSES = ("test_command_not_found", "no_tests_collected", "no_per_test_results")
READINESS_TIMEOUT_S = 600.0
_NOT_FOUND_RE = re.compile(r"(?:^|: )([^\s:]+): (?:command )?not found", re.MULTILINE)


@dataclass
class Readiness:
    ok: bool
    cause: str | None = None          # one of CAUSES when not ok
    detail: str = ""
    program: str | None = None        # the test command's program as resolved in the sandbox ("" = not found)
    tests: int | None = None          # per-test results read from the run
    duration_s: float = 0.0
    skipped: str | None = None        # why nothing was run (the PR cannot be built into a bundle)

    def as_json(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        if self.skipped:
            return f"not checked: {self.skipped}"
        if self.ok:
            return f"ok: {self.program} ran, {self.tests} test(s) with per-test results ({self.duration_s:.1f} s)"
        return f"{self.cause}: {self.detail}"


def resolve_program(provider: Provider, program: str, cwd: Path) -> str:
    """Where `program` is found inside the provider's sandbox ("" if nowhere): `command -v` run by
    /bin/sh in the sandbox, the name passed as an argument (never part of the shell text)."""
    spec = ExecSpec(argv=["/bin/sh", "-c", 'command -v -- "$1"', "sh", program], cwd=cwd, timeout_s=60,
                    network="none")
    result = provider.run(spec)
    if result.rc != 0:
        return ""
    lines = result.stdout_tail.strip().splitlines()
    return lines[-1] if lines else ""


def module_missing(provider: Provider, python: str, module: str, cwd: Path) -> bool:
    """True when `python -m module` cannot import the module in the sandbox (asked without running
    any test code: importlib's find_spec on the name)."""
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"
    # run where the tests run (a module of the repository itself is found there), with the
    # environment's PYTHONPATH: the same sys.path as `python -m module` would have
    result = provider.run(ExecSpec(argv=[python, "-c", probe, module.split(".")[0]], cwd=cwd, timeout_s=60,
                                   network="none"))
    return result.rc == 3


def check_bundle(bundle: Path, provider: Provider, work: Path, *, limits: Limits | None = None,
                 timeout_s: float = READINESS_TIMEOUT_S, env: dict[str, str] | None = None) -> Readiness:
    """Run `bundle`'s empty solution once and judge it (see the module docstring)."""
    from sweep.harbor import layout
    from sweep.harbor.trial import run_trial
    started = time.monotonic()
    argv = [a for a in (bundle / layout.TEST_COMMAND).read_text().splitlines() if a]
    program = argv[0] if argv else ""
    where = "the job environment"

    def done(ok: bool, cause: str | None, detail: str, tests: int | None = None, resolved: str = "") -> Readiness:
        return Readiness(ok, cause, detail, program=resolved, tests=tests, duration_s=time.monotonic() - started)

    if "/" in program and not program.startswith("/"):
        resolved = program          # a program of the repository itself (./gradlew): found by running it
    else:
        resolved = resolve_program(provider, program, bundle) if program else ""
    if not resolved:
        path = _sandbox_path(provider)
        return done(False, "test_command_not_found",
                    f"{program!r} is not found in {where}" + (f" (PATH={path})" if path else ""))
    unknown = _unknown_runner(bundle, argv)
    if unknown:
        # nothing to run: whatever the command prints, no runner module would read it
        return done(False, "no_per_test_results", unknown, resolved=resolved)
    tests_dir = bundle / layout.ENV_REPO
    if (bundle / layout.TEST_WORKDIR).is_file():
        tests_dir = tests_dir / (bundle / layout.TEST_WORKDIR).read_text().strip()
    if len(argv) >= 3 and argv[1] == "-m" and tests_dir.is_dir() and \
            module_missing(provider, resolved, argv[2], tests_dir):
        return done(False, "test_command_not_found", f"{program} ({resolved}) has no {argv[2]} in {where}",
                    resolved=resolved)
    trial = run_trial(bundle, "empty", provider=provider, workdir=work, timeout_s=timeout_s,
                      env=env or {}, limits=limits)
    logs = Path(trial.workdir or work) / "logs" / "verifier"
    output = _read_tail(logs / "test-output.txt")
    not_found = _NOT_FOUND_RE.search(output)
    if not_found and not_found.group(1).rsplit("/", 1)[-1] == program.rsplit("/", 1)[-1]:
        return done(False, "test_command_not_found", f"{program!r} is not found in {where}", resolved="")
    if trial.reward is None and not output:
        return done(False, "no_per_test_results", f"the test command produced no result: {trial.detail[:300]}",
                    resolved=resolved)
    # the runner's per-test results as the gates take them: from the harness when the trial has
    # one (what the runner printed and reported), else the JUnit report test.sh asked for
    results = getattr(trial, "results", None)
    problem = getattr(trial, "results_problem", None)
    if results is None:
        return done(False, "no_per_test_results",
                    f"{shlex.join(argv)} ran but gave no per-test results ({problem}); "
                    f"last output: {_last_line(output)}", resolved=resolved)
    if not results:
        return done(False, "no_tests_collected", f"{shlex.join(argv)} ran on the base checkout but collected no "
                                                 f"test; last output: {_last_line(output)}", tests=0,
                    resolved=resolved)
    return done(True, None, "", tests=len(results), resolved=resolved)


def _unknown_runner(bundle: Path, argv: list[str]) -> str:
    """Why no runner module reads `argv`'s results (the bundle's runner.txt names the plan's
    `test_runner` when it has one), or "": the runner package's message, naming the program and
    the supported runners."""
    from sweep.harbor.harness import RUNNER_FILE
    from sweep.harbor.runners import UnknownRunner, runner_for
    try:
        named = (bundle / RUNNER_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        named = ""
    try:
        runner_for(argv, named or None)
    except UnknownRunner as exc:
        return str(exc)
    return ""


def check_source(source: dict, provider: Provider, scratch: Path, *, limits: Limits | None = None,
                 timeout_s: float = READINESS_TIMEOUT_S) -> Readiness:
    """Build sweep's own bundle of the PR `source` (the mechanical author's input) under `scratch`
    and check it. A PR that cannot become a bundle at all is not this check's business (the author
    phase ends it with the reason): the result is then `skipped`."""
    from sweep.harbor.pr_bundle import AuthorRefusal, build_bundle_from_git
    from sweep.harbor import layout
    bundle = scratch / "bundle"
    try:
        build_bundle_from_git(source, bundle)
    except AuthorRefusal as exc:
        return Readiness(True, skipped=f"sweep's own bundle of the PR could not be built ({exc.reason})")
    # the base checkout as it is: none of the PR's test files installed, none deleted
    for name in (layout.TEST_FILES, layout.DELETED_TEST_FILES):
        (bundle / name).write_text("")
    return check_bundle(bundle, provider, scratch / "trial", limits=limits, timeout_s=timeout_s)


def check_local_candidate(repo: str, base: str, head: str, test_command: str, provider: Provider, *,
                          test_workdir: str | None = None, test_runner: str | None = None,
                          limits: Limits | None = None, timeout_s: float = READINESS_TIMEOUT_S) -> Readiness:
    """`check_source` for a local repository candidate given by refs (what `sweep init` has)."""
    from sweep.git import GitFailed, run_git
    try:
        base_sha = run_git(["rev-parse", "--verify", "--end-of-options", base + "^{commit}"], repo=repo,
                           timeout=60).decode().strip()
        head_sha = run_git(["rev-parse", "--verify", "--end-of-options", head + "^{commit}"], repo=repo,
                           timeout=60).decode().strip()
    except GitFailed as exc:
        return Readiness(True, skipped=f"git could not read the refs: {exc.message[-200:]}")
    scratch = Path(tempfile.mkdtemp(prefix="sweep-readiness-"))
    try:
        source = {"kind": "git", "repo": repo, "base": base_sha, "head": head_sha, "title": "", "body": "",
                  "test_command": test_command}
        if test_workdir:
            source["test_workdir"] = test_workdir
        if test_runner:
            source["test_runner"] = test_runner       # the plan's, as the controller's check has it
        return check_source(source, provider, scratch, limits=limits, timeout_s=timeout_s)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _sandbox_path(provider: Provider) -> str:
    declared = getattr(provider, "environment", None)
    return getattr(declared, "path_text", "") if declared is not None else ""


def _read_tail(path: Path, limit: int = 64 << 10) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _last_line(output: str) -> str:
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "(none)"


# ---- `sweep doctor`: what a session and a trial see, here and under scrontab ------------------

def login_path(timeout_s: float = 20.0) -> str:
    """The PATH a scrontab job starts with: a login shell's, from an empty environment (`env -i`
    with HOME, USER and LOGNAME only, then `bash -l`), as cron-like starters give it."""
    import os
    import pwd
    import subprocess
    try:
        user = pwd.getpwuid(os.getuid())
        env = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name}
    except KeyError:
        env = {"HOME": os.environ.get("HOME", "/")}
    try:
        done = subprocess.run(["env", "-i", *[f"{k}={v}" for k, v in env.items()], "bash", "-lc",
                               'printf "%s" "$PATH"'], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


@dataclass
class DoctorLine:
    level: str          # ok | warn | error | info
    where: str
    message: str


def environment_report(settings, candidates, *, run_checks: bool = True) -> list[DoctorLine]:
    """What sessions and trials see (PATH, each declared toolchain, each test command's program
    resolved in the sandbox), and the readiness check in the job environment and in a
    scrontab-like login environment, naming any difference."""
    import os

    from runstate.errors import ConfigError, ProviderError
    from sweep.execution import SandboxEnvironment
    from sweep.providers import get_provider
    from sweep.providers.local import child_path
    out: list[DoctorLine] = []
    declared = settings.environment
    here_path = child_path(os.environ.get("PATH"))
    scron_path = login_path()
    if declared is None:
        out.append(DoctorLine("warn", "environment", "not declared: sessions and trials get the PATH of whatever "
                                                     "runs `sweep tick`; declare [environment] (docs/campaign.md)"))
        job_path = here_path
    else:
        job_path = declared.sandbox().path_text
        for name, tc in declared.toolchains.items():
            missing = [b for b in (*tc.bind, *([tc.prefix] if tc.prefix else [])) if not os.path.isdir(b)]
            text = (f"path {':'.join(tc.path) or '-'}; bind {', '.join(tc.bind) or '-'}"
                    + (f"; prefix {tc.prefix}" if tc.prefix else "")
                    + (f"; variables {', '.join(sorted(tc.variables))}" if tc.variables else ""))
            out.append(DoctorLine("error" if missing else "ok", f"environment.toolchains.{name}",
                                  text + (f" (missing on this host: {', '.join(missing)})" if missing else "")))
        if declared.inherit:
            out.append(DoctorLine("info", "environment.inherit", ", ".join(declared.inherit)))
    out.append(DoctorLine("info", "PATH (session, trial)", job_path))
    if declared is None:
        out.append(DoctorLine("info", "PATH (scrontab tick)", scron_path or "(the login shell gave none)"))
    commands: dict[tuple[str, str | None, str | None], Any] = {}
    for cand in candidates:
        key = (cand.options.test_command or "python3 -m unittest -q", cand.options.test_workdir,
               cand.options.test_runner)
        if key not in commands and cand.repo and cand.options.provider == "local":
            commands[key] = cand
    if not commands or not run_checks:
        return out
    envs = {"job environment": SandboxEnvironment(path=tuple(job_path.split(":")), binds=declared.binds,
                                                  variables=tuple(sorted(declared.variables.items())))
            if declared is not None else None}
    if declared is None and scron_path and scron_path != here_path:
        envs["scrontab-like login environment"] = SandboxEnvironment(path=tuple(scron_path.split(":")))
    results: dict[str, dict[tuple[str, str | None, str | None], Readiness]] = {}
    for label, env in envs.items():
        try:
            provider = get_provider("local", isolation=settings.isolation, environment=env)
        except (ConfigError, ProviderError) as exc:
            out.append(DoctorLine("error", label, f"no sandbox: {exc}"))
            continue
        results[label] = {}
        for n, ((command, workdir, runner), cand) in enumerate(commands.items()):
            if n >= 3:
                break
            repo, base, head = cand.local_source()
            ready = check_local_candidate(repo, base, head, command, provider, test_workdir=workdir,
                                          test_runner=runner, limits=settings.limits.to_limits())
            results[label][(command, workdir, runner)] = ready
            out.append(DoctorLine("ok" if ready.ok else "error", f"test command {command!r} ({label})",
                                  f"program {ready.program or '(not found)'}; readiness {ready.line()}"))
    if len(results) == 2:
        shell, scron = results.values()
        for key, ready in shell.items():
            other = scron.get(key)
            if other is not None and (other.program != ready.program or other.ok != ready.ok):
                out.append(DoctorLine("error", f"test command {key[0]!r}",
                                      f"resolves to {ready.program or '(nothing)'} from this shell but to "
                                      f"{other.program or '(nothing)'} under scrontab (login PATH {scron_path})"
                                      + ("" if other.ok else f", where readiness fails: {other.line()}")
                                      + "; declare [environment] so both get the same"))
    return out
