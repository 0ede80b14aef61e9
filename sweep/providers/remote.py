"""What the remote providers (daytona, modal) share: reading a key, recording where it is, and
turning an SDK exception into a classified SandboxError. The SDKs themselves stay in their
provider's module (imported lazily); nothing here imports one.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from sweep.providers.base import SandboxError


def read_key(file: str | os.PathLike[str] | None, env: str, what: str) -> str:
    """A credential from its file (when given) or the named environment variable, read once at
    construction. A missing or empty one is a `config` error naming the file or the variable,
    never the value."""
    if file is not None:
        try:
            value = Path(file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SandboxError(f"cannot read the {what}: {exc.strerror or exc}", error_class="config",
                               path=file) from None
    else:
        value = os.environ.get(env, "").strip()
    if not value:
        raise SandboxError(f"no {what} (set {env} or give its file)", error_class="config", field="provider")
    return value


def key_location(prefix: str, file: str | os.PathLike[str] | None, env: str) -> dict[str, str]:
    """Where a credential is, for a receipt (so `sweep reconcile` reaches the same account): the
    file's path or the variable's name, never the secret."""
    return {f"{prefix}_file": str(file)} if file is not None else {f"{prefix}_env": env}


class ClassifiedCalls:
    """`_call(what, fn, ...)`: run one SDK call; an exception of the SDK's base class becomes a
    SandboxError classified by the provider's `classify` (outage | throttle | config | failure)."""

    name: str
    sdk_error: type[BaseException] | tuple[type[BaseException], ...] = ()

    def classify(self, exc: BaseException) -> str:
        raise NotImplementedError

    def evidence(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {str(exc)[:300]}"

    def _error(self, what: str, exc: BaseException) -> SandboxError:
        return SandboxError(f"{self.name}: {what}: {str(exc)[:300]}", error_class=self.classify(exc),
                            evidence=self.evidence(exc))

    def _call(self, what: str, fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except self.sdk_error as exc:
            raise self._error(what, exc) from None
