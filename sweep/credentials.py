"""The plan's `[secrets]`: which credential each key family uses, and who may see it.

    [secrets]
    anthropic = { file = "~/.config/sweep/anthropic.key" }        # read at each session's launch
    openai = { env = "MY_OPENAI_KEY", variable = "OPENAI_API_KEY" }  # from the controller's environment
    github = { file = "/home/me/.config/sweep/github.token" }       # intake's token (no session sees it)

A secret is referenced by a path or a variable name; its value is never written into
campaign.toml, state, events, logs or any session record (sweep/redact.py scrubs it from every
stored text). Rules enforced here:
- a secret file must be a regular file owned by the user running sweep with no group or other
  permission bits (0600 or 0400); anything else is refused at `sweep init` and again before every
  session, with an error naming the plan field and the file;
- a session gets only its own role's key family, and only when its runtime talks to a model API:
  oracle and nop sessions, gates and trials get no secret and none of the family's variables;
- the controller registers every value it can read with the redactor when it starts, so a value
  that reaches a transcript, evidence or a bundle by any route is found and redacted.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from roles.spec import KEY_FAMILY_ENV
from runstate.errors import ConfigError
from sweep.execution import FromEnv

# Variables of a key family that configure an endpoint rather than authenticate: with a
# `[secrets]` entry for the family, only these still pass from the controller's environment.
NON_SECRET_VARS = frozenset({"ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"})
DEFAULT_VARIABLE = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
GITHUB_TOKEN_VARS = ("GITHUB_TOKEN",)


def secret_file_problem(path: Path) -> str | None:
    """Why `path` may not hold a secret, or None when it may."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"the secret file {path} does not exist"
    except OSError as exc:
        return f"cannot stat the secret file {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return f"the secret file {path} is not a regular file"
    if st.st_uid != os.getuid():
        return (f"the secret file {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}): "
                "a secret file must be yours alone")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (f"the secret file {path} has mode {mode:04o}: group and others can read or change it "
                f"(run `chmod 600 {path}`)")
    return None


def resolve_plan_secrets(secrets: dict, plan_path: Path) -> dict:
    """At `sweep init`: file paths made absolute (relative = to the plan, `~` expanded) and checked."""
    resolved = {}
    for family, source in secrets.items():
        if source.file is not None:
            path = Path(os.path.expanduser(source.file))
            if not path.is_absolute():
                path = Path(plan_path).parent / path
            path = Path(os.path.abspath(path))
            problem = secret_file_problem(path)
            if problem:
                raise ConfigError(problem, path=plan_path, field=f"secrets.{family}.file")
            source = source.model_copy(update={"file": str(path)})
        resolved[family] = source
    return resolved


def session_secrets(settings, family: str) -> dict[str, Path | FromEnv]:
    """The secret of key family `family` for one session: {variable in the child: source}.

    Empty when the plan has no entry for the family (the session then gets the family's variables
    from the controller's environment, as before `[secrets]` existed). Raises ConfigError naming
    the plan field and the file when the file is no longer acceptable.
    """
    source = (getattr(settings, "secrets", None) or {}).get(family)
    if source is None or family not in DEFAULT_VARIABLE:
        return {}
    variable = source.variable or DEFAULT_VARIABLE[family]
    if source.file is not None:
        problem = secret_file_problem(Path(source.file))
        if problem:
            raise ConfigError(problem, path=source.file, field=f"secrets.{family}.file")
        return {variable: Path(source.file)}
    if not os.environ.get(source.env):
        raise ConfigError(f"the environment variable {source.env} is not set in the controller's environment",
                          field=f"secrets.{family}.env",
                          hint="export it where the tick runs (scrontab) so controller jobs inherit it")
    return {variable: FromEnv(source.env)}


def passthrough_for(allowlist: tuple[str, ...], has_plan_secret: bool) -> tuple[str, ...]:
    """The family's variables copied from the controller's environment into a session."""
    if has_plan_secret:
        return tuple(name for name in allowlist if name in NON_SECRET_VARS)
    return allowlist


def github_token_source(settings) -> tuple[str | None, str | None]:
    """(token file, token environment variable) from the plan's `secrets.github`, if any."""
    source = (getattr(settings, "secrets", None) or {}).get("github")
    if source is None:
        return None, None
    return source.file, source.env


def known_values(settings) -> list[str]:
    """Every secret value this process can read: the plan's, the key families' variables in the
    environment, the GitHub token. Unreadable ones are skipped (the session that needs them fails
    with its own clear error)."""
    values: list[str] = []
    for source in (getattr(settings, "secrets", None) or {}).values():
        try:
            if source.file is not None:
                if secret_file_problem(Path(source.file)) is None:
                    values.append(Path(source.file).read_text(encoding="utf-8").rstrip("\r\n"))
            elif os.environ.get(source.env):
                values.append(os.environ[source.env])
        except (OSError, UnicodeDecodeError):
            continue
    for names in KEY_FAMILY_ENV.values():
        values += [os.environ[n] for n in names if n not in NON_SECRET_VARS and os.environ.get(n)]
    values += [os.environ[n] for n in GITHUB_TOKEN_VARS if os.environ.get(n)]
    token_file = os.environ.get("SWEEP_GITHUB_TOKEN_FILE")
    if token_file:
        try:
            values.append(Path(token_file).read_text(encoding="utf-8").strip())
        except (OSError, UnicodeDecodeError):
            pass
    return [v for v in values if v]


def register_known_secrets(settings) -> int:
    """Make every readable secret known to the redactor of this process; returns how many."""
    from sweep.redact import register
    values = known_values(settings)
    register(values)
    return len(values)


__all__ = ["secret_file_problem", "resolve_plan_secrets", "session_secrets", "passthrough_for",
           "github_token_source", "known_values", "register_known_secrets",
           "NON_SECRET_VARS", "DEFAULT_VARIABLE"]
