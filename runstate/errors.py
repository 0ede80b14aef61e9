"""The one error hierarchy of sweep.

It lives in runstate (the lowest layer) so that runstate, roles and sweep all raise the same
types without runstate importing anything from above it. The CLI turns any SweepError into one
line that names the file and the field, and a non-zero exit code; a traceback is a bug.
"""
from __future__ import annotations

from pathlib import Path


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
