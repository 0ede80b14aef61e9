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


def resolve_allow_list(endpoints: list[str] | tuple[str, ...], *, provider: str,
                       families: tuple[int, ...]) -> tuple[str, ...]:
    """Network `api` on a remote provider: the configured endpoints' hosts resolved NOW (at create
    time) to their addresses, as /32 (IPv4) or /128 (IPv6) CIDRs, sorted and de-duplicated.
    `families` are the IP versions the provider's allow list can express (Daytona: 4; Modal: 4, 6).

    A `config` SandboxError names the endpoint, never a silent full egress: an entry that is not
    HOST:PORT, the NAME:PORT=HOST:PORT mapping form (no relay runs remotely: the sandbox would
    connect to NAME itself), a loopback address or `localhost` (the sandbox's own, not ours), a
    host that does not resolve, or one with no address of a family the provider can express.
    An empty list of endpoints is an empty allow list: the caller blocks all network instead."""
    import ipaddress
    import socket

    from sweep.providers.local.network import _host_port
    out: set[str] = set()
    for entry in endpoints:
        if not isinstance(entry, str) or "=" in entry:
            raise SandboxError(f"{provider}: endpoint {entry!r}: the NAME:PORT=HOST:PORT form maps a name to "
                               "a host-side target through the local relay, which remote sandboxes do not have; "
                               "give the endpoint's real HOST:PORT", error_class="config", field="endpoints")
        try:
            host, port = _host_port(entry.strip(), "")
        except Exception as exc:          # a ConfigError naming the entry
            raise SandboxError(f"{provider}: {exc}", error_class="config", field="endpoints") from None
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise SandboxError(f"{provider}: endpoint {entry!r}: the host {host!r} does not resolve "
                               f"({exc}); network 'api' needs its addresses for the provider's allow list",
                               error_class="config", field="endpoints") from None
        addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
        if host == "localhost" or any(a.is_loopback for a in addresses):
            raise SandboxError(f"{provider}: endpoint {entry!r} is a loopback address: from a remote sandbox it "
                               "is the sandbox's own, not this host's", error_class="config", field="endpoints")
        usable = {a for a in addresses if a.version in families}
        if not usable:
            raise SandboxError(f"{provider}: endpoint {entry!r}: {host!r} has no "
                               f"{' or '.join(f'IPv{f}' for f in families)} address (got "
                               f"{', '.join(sorted(map(str, addresses)))}); the provider's allow list cannot "
                               "express it", error_class="config", field="endpoints")
        out.update(f"{a}/{a.max_prefixlen}" for a in usable)
    return tuple(sorted(out, key=lambda c: (ipaddress.ip_network(c).version, ipaddress.ip_network(c))))
