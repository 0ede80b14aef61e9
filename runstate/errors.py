"""The one error hierarchy of sweep.

It lives in runstate (the lowest layer) so that runstate, roles and sweep all raise the same
types without runstate importing anything from above it. The CLI turns any SweepError into one
line that names the file and the field, and a non-zero exit code; a traceback is a bug.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol


class SweepError(Exception):
    """A problem the user can act on. `path` and `field` say where; `hint` says what to do."""

    exit_code = 1

    def __init__(self, message: str, *, path: str | Path | None = None, field: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.field = field
        self.hint = hint

    def __str__(self) -> str:
        where = ""
        if self.path and self.field:
            where = f"{self.path}: {self.field}: "
        elif self.path:
            where = f"{self.path}: "
        elif self.field:
            where = f"{self.field}: "
        text = where + self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class ConfigError(SweepError):
    """A plan, settings file or manifest is invalid. Nothing was written."""

    exit_code = 2


class StateError(SweepError):
    """A record would break an invariant of the run state machine; refused before it reached disk."""


class LeaseError(SweepError):
    """A lease operation was refused (not the holder, already held, ...)."""


class SchedulerError(SweepError):
    """The scheduler refused or failed a call (sbatch, scancel); carries the scheduler's own message."""


class SubmissionUncertain(SchedulerError):
    """A submission whose outcome is unknown (timeout, socket error, no answer): the job may exist.

    Never treated as a refusal: the caller keeps the lease and its token, so the next tick can find
    the job by its name in the queue (see docs/tick.md, "Submission outcomes")."""


class ProviderError(SweepError):
    """A sandbox provider failed or cannot honour a request."""


class _HasErrors(Protocol):
    """A pydantic ValidationError, as far as the formatter needs one."""

    def errors(self) -> Sequence[Mapping[str, Any]]: ...


def _error_field(err: Mapping[str, Any], top: str) -> str:
    return ".".join(str(p) for p in err.get("loc", ())) or top


def _error_text(err: Mapping[str, Any], unknown: str) -> str:
    if err.get("type") == "extra_forbidden":
        return unknown
    if err.get("type") == "missing":
        return "required field is missing"
    return str(err.get("msg", "invalid")).removeprefix("Value error, ")


def validation_problem(exc: _HasErrors, *, top: str = "(top level)",
                       unknown: str = "unknown field (check the spelling)",
                       first: tuple[str, str] | None = None) -> tuple[str, str]:
    """(dotted field, message) of a pydantic ValidationError's first error, plus how many more.

    The one formatter of validation errors: plans, campaign.toml and role manifests (ConfigError's
    field + message) and run-state files (`describe_validation_error`). Duck-typed on `.errors()`
    so this module stays free of pydantic for `sweep --help`. `first` replaces the first error's
    (field, message), e.g. with those a validator's own exception carries."""
    errors = exc.errors()
    field, msg = first or (_error_field(errors[0], top), _error_text(errors[0], unknown))
    more = len(errors) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return field, msg


def describe_validation_error(exc: _HasErrors, limit: int = 3) -> str:
    """'field.sub: message' for the first few errors: what a reader reports after the file name."""
    errors = exc.errors()
    parts = [f"{_error_field(e, '(top level)')}: {_error_text(e, 'unknown field')}" for e in errors[:limit]]
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)
