"""Network per session: `none`, `api` (configured endpoints only) or `host` (loud opt-in).

- `none`: a new network namespace holding only its own loopback. Nothing of the host is reachable:
  not its interfaces, not its loopback services, not its abstract unix sockets (those belong to a
  network namespace).
- `api`: the same empty namespace, plus one TCP relay per configured endpoint. Inside the sandbox a
  small relay (sandbox_relay.py, started before the session's program) listens on a loopback
  address and port; each connection is carried over a unix socket (bound into the sandbox at
  /run/sweep-net) to a relay thread in the provider, which connects to the endpoint's target on the
  host side. The session can therefore reach exactly the configured host:port pairs and nothing
  else: no DNS, no other port, no other host service. TLS passes through untouched (the relay
  copies bytes), so certificates are checked end to end by the client.
- `host`: the host's network namespace, unrestricted. Only when both the role's manifest and the
  runtime options ask for it, and reported on every session.

An endpoint is written `HOST:PORT` (the sandbox connects to HOST:PORT, the relay to the same) or
`NAME:PORT=HOST:PORT` (the sandbox connects to NAME:PORT, the relay to HOST:PORT; e.g. a name the
agent expects, mapped to a local fake server), or `NAME:PORT=unix:/PATH` (the relay connects to a
unix socket of the caller's: the metering relay of an agent CLI, sweep/runtimes/wire). Inside the sandbox a name is mapped to its own
loopback address in a generated /etc/hosts; `localhost` and 127.x.y.z literals listen as given.
"""
from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from runstate.errors import ConfigError
from sweep.providers.local.sandbox_relay import pump as _pump   # one copy loop for both halves

NETWORK_MODES = ("none", "api", "host")
RELAY_SCRIPT = Path(__file__).resolve().parent / "sandbox_relay.py"
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
CONNECT_TIMEOUT_S = 15.0


def network_mode(value: object) -> str:
    """The mode for an ExecSpec/option value: a mode name, or a bool (False = none, True = api)."""
    if isinstance(value, bool):
        return "api" if value else "none"
    if value in NETWORK_MODES:
        return str(value)
    raise ConfigError(f"unknown network mode {value!r}; use one of {', '.join(NETWORK_MODES)}",
                      field="network")


def network_rank(mode: str) -> int:
    return NETWORK_MODES.index(mode)


@dataclass(frozen=True)
class Endpoint:
    name: str          # what the sandbox connects to
    port: int
    target_host: str   # what the provider connects to on the host side
    target_port: int
    listen_ip: str = ""
    target_unix: str = ""  # instead of target_host:port: a unix socket of the caller's (a metering relay)

    @property
    def text(self) -> str:
        inner = f"{self.name}:{self.port}"
        outer = f"unix:{self.target_unix}" if self.target_unix else f"{self.target_host}:{self.target_port}"
        return inner if inner == outer else f"{inner}={outer}"


def _host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"endpoint {what} {text!r} is not HOST:PORT (a port 1-65535)", field="endpoints")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _NAME_RE.match(host):
            raise ConfigError(f"endpoint {what} {text!r}: {host!r} is not a host name or address",
                              field="endpoints") from None
    return host, int(port)


def parse_endpoints(entries: list[str] | tuple[str, ...]) -> list[Endpoint]:
    """Endpoints with their in-sandbox listen address; a ConfigError names the bad entry."""
    out: list[Endpoint] = []
    taken: set[tuple[str, int]] = set()
    names: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, str):
            raise ConfigError(f"endpoint {entry!r} is not a string", field="endpoints")
        inner, sep, outer = entry.partition("=")
        name, port = _host_port(inner.strip(), "")
        target_unix = ""
        if sep and outer.strip().startswith("unix:"):
            target_unix = outer.strip()[len("unix:"):]
            if not os.path.isabs(target_unix):
                raise ConfigError(f"endpoint {entry!r}: a unix target must be an absolute path", field="endpoints")
            target_host, target_port = "", 0
        else:
            target_host, target_port = _host_port(outer.strip(), "target") if sep else (name, port)
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            address = None
        if address is not None:
            if not (address.version == 4 and address.is_loopback):
                raise ConfigError(f"endpoint {entry!r}: inside the sandbox only a name or a 127.x.y.z "
                                  "address can be listened on; write NAME:PORT=HOST:PORT instead",
                                  field="endpoints")
            listen = name
        elif name == "localhost":
            listen = "127.0.0.1"
        else:
            listen = names.setdefault(name, f"127.0.1.{len(names) + 1}")
            if len(names) > 250:
                raise ConfigError("at most 250 endpoint names", field="endpoints")
        if (listen, port) in taken:
            raise ConfigError(f"endpoint {entry!r} is listed twice", field="endpoints")
        taken.add((listen, port))
        out.append(Endpoint(name, port, target_host, target_port, listen, target_unix))
    return out


def hosts_file(endpoints: list[Endpoint]) -> bytes:
    lines = ["127.0.0.1 localhost", "::1 localhost"]
    seen = set()
    for ep in endpoints:
        if ep.listen_ip.startswith("127.0.1.") and ep.name not in seen:
            seen.add(ep.name)
            lines.append(f"{ep.listen_ip} {ep.name}")
    return ("\n".join(lines) + "\n").encode()


class HostRelay:
    """The provider's half of `api` networking: one listening unix socket per endpoint in a private
    0700 directory (bound into the sandbox), each connection relayed to the endpoint's target."""

    def __init__(self, endpoints: list[Endpoint]) -> None:
        self.endpoints = endpoints
        self.dir = Path(tempfile.mkdtemp(prefix="sweep-net-"))
        os.chmod(self.dir, 0o755)   # noqa: S103 - the sandbox (possibly another uid) must traverse it
        self._closed = threading.Event()
        self._listeners: list[socket.socket] = []
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def socket_name(self, i: int) -> str:
        return f"e{i}.sock"

    def start(self) -> None:
        for i, ep in enumerate(self.endpoints):
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(self.dir / self.socket_name(i)))
            listener.listen(64)
            listener.settimeout(0.2)
            self._listeners.append(listener)
            threading.Thread(target=self._accept, args=(listener, ep), daemon=True,
                             name=f"sweep-relay-{i}").start()

    def _accept(self, listener: socket.socket, ep: Endpoint) -> None:
        while not self._closed.is_set():
            try:
                inner, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(inner, ep), daemon=True).start()

    def _serve(self, inner: socket.socket, ep: Endpoint) -> None:
        try:
            if ep.target_unix:
                outer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                outer.settimeout(CONNECT_TIMEOUT_S)
                outer.connect(ep.target_unix)
            else:
                outer = socket.create_connection((ep.target_host, ep.target_port), timeout=CONNECT_TIMEOUT_S)
        except OSError:
            inner.close()
            return
        outer.settimeout(None)
        inner.settimeout(None)
        with self._lock:
            if self._closed.is_set():
                inner.close()
                outer.close()
                return
            self._conns += [inner, outer]
        back = threading.Thread(target=_pump, args=(outer, inner), daemon=True)
        back.start()
        _pump(inner, outer)
        back.join()
        inner.close()
        outer.close()

    def sandbox_args(self, sandbox_dir: str) -> list[str]:
        """The in-sandbox relay's --listen arguments."""
        return [f"--listen={ep.listen_ip}:{ep.port}={sandbox_dir}/{self.socket_name(i)}"
                for i, ep in enumerate(self.endpoints)]

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for sock in self._listeners + self._conns:
                try:
                    sock.shutdown(socket.SHUT_RDWR)   # wakes a thread blocked in recv
                except OSError:
                    pass
                try:
                    sock.close()
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)
