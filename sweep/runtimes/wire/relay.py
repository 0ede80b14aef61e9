"""The credential and metering relay of one agent session (see docs/agents.md, docs/security.md).

The CLI inside the sandbox speaks plain HTTP to the relay (through the sandbox's one `api`
endpoint, a unix socket on this side); the relay, in the controller's process:
- refuses the request when the session's metered cost has reached its limit (an HTTP 400 in the
  protocol's own error shape; the session then ends `max_budget`);
- drops every credential header the CLI sent (it only holds a placeholder), adds the real one
  (`x-api-key` or `Authorization: Bearer`), and sends the request over TLS to the real endpoint,
  the certificate checked against the system bundle or the plan's `ca_file`;
- streams the response back unchanged (re-chunked) while reading its usage (usage.py), and records
  one line per request in `wire.jsonl`: status, model, tokens, cost at the plan's prices.
The key exists only in this process. A response still streaming when the CLI goes away is read
to its end (bounded by CLOSE_GRACE_S at the session's end), so its usage is counted.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import secrets as _secrets
import shutil
import socket
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from sweep.runtimes.wire.prices import cost_usd, price_for
from sweep.runtimes.wire.usage import Usage, UsageReader

SANDBOX_NAME = "sweep-model-api"     # what the CLI connects to inside the sandbox
SANDBOX_PORT = 80
PLACEHOLDER = "sweep-relay-holds-the-key"   # for a CLI that insists on a key variable  # noqa: S105
MAX_REQUEST_LINE = 8 << 10
MAX_HEADERS = 64 << 10
MAX_BODY = 64 << 20
MAX_RECORDS = 10_000                 # wire.jsonl lines kept per session (the totals count all)
CLOSE_GRACE_S = 10.0
UPSTREAM_TIMEOUT_S = 600.0
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "trailers",
        "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"}
_CREDENTIAL_HEADERS = {"authorization", "x-api-key", "api-key", "openai-api-key", "anthropic-api-key", "cookie"}
GENERATING_PATHS = ("/messages", "/responses", "/chat/completions", "/completions")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._~/%:@!$&'()*+,;=?-]{0,1000}$")


@dataclass(frozen=True)
class Credential:
    variable: str                    # the family's variable it stands for, e.g. ANTHROPIC_API_KEY
    value: str

    def header(self) -> tuple[str, str]:
        if self.variable == "ANTHROPIC_API_KEY":
            return "x-api-key", self.value
        return "Authorization", f"Bearer {self.value}"


@dataclass(frozen=True)
class WireEndpoint:
    """What the runtime hands its CLI: the base URL to use, the sandbox endpoint entry that makes it
    reachable (None when the session is not sandboxed) and the placeholder key."""
    base_url: str
    endpoint: str | None
    placeholder: str = PLACEHOLDER


@dataclass
class Request:
    n: int
    method: str
    path: str
    at: float
    status: int | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    refused: str | None = None
    error: str | None = None
    oversized: int = 0
    duration_s: float = 0.0

    @property
    def generates(self) -> bool:
        """A request the endpoint bills: one asking a model for output."""
        path = self.path.split("?", 1)[0].rstrip("/")
        return self.method == "POST" and path.endswith(GENERATING_PATHS)

    def record(self) -> dict:
        u = self.usage
        out: dict = {"n": self.n, "at": round(self.at, 3), "method": self.method, "path": self.path,
                     "status": self.status, "duration_s": round(self.duration_s, 3)}
        if u is not None:
            out.update({"model": u.model, "input_tokens": u.fresh_input, "cached_input_tokens": u.cached_input,
                        "cache_write_tokens": u.cache_write, "output_tokens": u.output,
                        "usage_complete": u.complete})
        out["cost_usd"] = self.cost_usd
        for key in ("refused", "error"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.oversized:
            out["oversized_lines"] = self.oversized
        return out


@dataclass
class WireRelay:
    protocol: str                    # "anthropic" | "openai"
    upstream: str                    # the real base URL (scheme://host:port/path)
    credential: Credential | None
    log_path: Path                   # <session>/wire.jsonl
    prices: dict | None = None
    limit_usd: float | None = None   # refuse further requests once metered cost reaches this
    ca_file: str | None = None
    requests: list[Request] = field(default_factory=list)
    budget_cut: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _socks: list[socket.socket] = field(default_factory=list)
    _closed: threading.Event = field(default_factory=threading.Event)
    _dir: str | None = None
    _token: str = ""

    # ---- lifetime ----------------------------------------------------------------------------

    def start(self, *, sandboxed: bool) -> WireEndpoint:
        """Listen: on a unix socket in a private directory (the sandbox's endpoint is mapped onto it),
        or, for an unsandboxed session, on a loopback port with a per-session path token."""
        parts = urlsplit(self.upstream)
        path = parts.path.rstrip("/")
        if sandboxed:
            self._dir = tempfile.mkdtemp(prefix="sweep-wire-")
            sock_path = os.path.join(self._dir, "wire.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(sock_path)
            endpoint = WireEndpoint(base_url=f"http://{SANDBOX_NAME}:{SANDBOX_PORT}{path}",
                                    endpoint=f"{SANDBOX_NAME}:{SANDBOX_PORT}=unix:{sock_path}")
        else:
            self._token = _secrets.token_hex(16)
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind(("127.0.0.1", 0))
            port = listener.getsockname()[1]
            endpoint = WireEndpoint(base_url=f"http://127.0.0.1:{port}/{self._token}{path}", endpoint=None)
        listener.listen(64)
        listener.settimeout(0.2)
        self._socks.append(listener)
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True, name="sweep-wire")
        thread.start()
        return endpoint

    def close(self) -> None:
        """Stop accepting; let responses in flight finish (up to CLOSE_GRACE_S), then cut them."""
        self._closed.set()
        deadline = time.monotonic() + CLOSE_GRACE_S
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            for sock in self._socks:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    sock.close()
                except OSError:
                    pass
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    # ---- what it saw -------------------------------------------------------------------------

    @property
    def metered_usd(self) -> float:
        with self._lock:
            return sum(r.cost_usd or 0.0 for r in self.requests)

    def summary(self) -> dict:
        """The session's wire record: totals by model, the metered cost, and whether it is complete
        (every answered request's usage read and priced); `unmetered` says which were not."""
        with self._lock:
            requests = list(self.requests)
        by_model: dict[str, dict] = {}
        unmetered = []
        for r in requests:
            if r.refused or r.status is None or not 200 <= r.status < 300:
                if r.status is None and not r.refused:
                    unmetered.append({"n": r.n, "why": r.error or "no response"})
                continue
            u = r.usage or Usage()
            if not u.seen and not r.generates:
                continue        # a probe (HEAD, GET, count_tokens): free, nothing to meter
            if not u.seen:
                unmetered.append({"n": r.n, "why": "no usage in the response"})
            elif r.cost_usd is None:
                unmetered.append({"n": r.n, "why": f"model {u.model!r} has no price"})
            elif not u.complete:
                unmetered.append({"n": r.n, "why": "the response ended before its final usage"})
            row = by_model.setdefault(u.model or "?", {"requests": 0, "input_tokens": 0, "cached_input_tokens": 0,
                                                       "cache_write_tokens": 0, "output_tokens": 0, "cost_usd": 0.0})
            row["requests"] += 1
            row["input_tokens"] += u.fresh_input
            row["cached_input_tokens"] += u.cached_input
            row["cache_write_tokens"] += u.cache_write
            row["output_tokens"] += u.output
            row["cost_usd"] = round(row["cost_usd"] + (r.cost_usd or 0.0), 9)
        metered = round(sum(r.cost_usd or 0.0 for r in requests), 9)
        return {"protocol": self.protocol, "upstream": self.upstream, "requests": len(requests),
                "refused": sum(1 for r in requests if r.refused), "by_model": by_model,
                "metered_cost_usd": metered, "complete": not unmetered, "unmetered": unmetered[:20],
                "limit_usd": self.limit_usd, "budget_cut": self.budget_cut,
                "credential": self.credential.variable if self.credential else None}

    # ---- serving -----------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._socks.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True, name="sweep-wire-conn")
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        try:
            while not self._closed.is_set():
                head = _read_head(reader)
                if head is None:
                    return
                method, target, headers = head
                body = _read_body(reader, headers, conn)
                if body is None:
                    _send_plain(conn, 400, b"bad request body")
                    return
                if not self._one(conn, method, target, headers, body):
                    return
        except OSError:
            return
        finally:
            try:
                reader.close()
                conn.close()
            except OSError:
                pass

    def _one(self, conn: socket.socket, method: str, target: str, headers: list[tuple[str, str]],
             body: bytes) -> bool:
        """Answer one request; False when the connection must close."""
        if self._token:
            prefix = f"/{self._token}"
            if not (target == prefix or target.startswith(prefix + "/")):
                _send_plain(conn, 404, b"not here")
                return False
            target = target[len(prefix):] or "/"
        with self._lock:
            req = Request(n=len(self.requests) + 1, method=method[:16],
                          path=target[:200] if _SAFE_PATH.match(target) else "<unprintable path>", at=time.time())
            self.requests.append(req)
        started = time.monotonic()
        if self._refuse_over_budget(conn, req):
            return True
        keep = not any(k.lower() == "connection" and v.lower() == "close" for k, v in headers)
        try:
            upstream = self._connect()
        except (OSError, ssl.SSLError) as exc:
            # the endpoint cannot be reached: the CLI sees its connection close unanswered, as it
            # would going direct (its own "cannot connect" handling and sweep's classes apply)
            req.error = f"upstream: {type(exc).__name__}: {exc}"[:300]
            self._log(req)
            return False
        with self._lock:
            if upstream.sock is not None:
                self._socks.append(upstream.sock)     # close() can cut a response that never ends
        try:
            resp = self._forward(upstream, method, target, headers, body)
        except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
            req.error = f"upstream: {type(exc).__name__}: {exc}"[:300]
            upstream.close()
            _send_plain(conn, 502, b"sweep relay: the model endpoint failed")
            self._log(req)
            return False
        req.status = resp.status
        content_type = resp.getheader("Content-Type") or ""
        reader = UsageReader(self.protocol, event_stream="text/event-stream" in content_type)
        bodyless = method == "HEAD" or resp.status in (204, 304)
        client_ok = _send_head(conn, resp, bodyless)
        try:
            client_ok = _pump(conn, resp, reader, req, client_ok=client_ok, bodyless=bodyless)
        finally:
            upstream.close()
        self._meter(req, reader)
        req.duration_s = time.monotonic() - started
        self._log(req)
        return client_ok and keep and not self._closed.is_set()

    def _refuse_over_budget(self, conn: socket.socket, req: Request) -> bool:
        """Answer the request with the protocol's error, unforwarded, once the session's metered
        spend reached its limit; False (nothing sent) while it is under."""
        spent = self.metered_usd
        if self.limit_usd is None or spent < self.limit_usd:
            return False
        self.budget_cut = True
        req.refused = "budget"
        req.status = 400
        message = (f"sweep: this session's budget is spent ({spent:.4f} USD metered, limit "
                   f"{self.limit_usd:g} USD); no further request is forwarded")
        _send_json(conn, 400, _budget_error(self.protocol, message))
        self._log(req)
        return True

    def _forward(self, upstream: http.client.HTTPConnection, method: str, target: str,
                 headers: list[tuple[str, str]], body: bytes) -> http.client.HTTPResponse:
        """Send the request on to the endpoint: the CLI's headers less hop-by-hop and credential
        ones, sweep's own credential instead, the body unencoded; the endpoint's response."""
        base = urlsplit(self.upstream)
        upstream.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        upstream.putheader("Host", base.netloc)
        upstream.putheader("Accept-Encoding", "identity")
        for name, value in headers:
            low = name.lower()
            if low in _HOP or low in _CREDENTIAL_HEADERS:
                continue
            upstream.putheader(name, value)
        if self.credential is not None:
            upstream.putheader(*self.credential.header())
        upstream.putheader("Content-Length", str(len(body)))
        upstream.endheaders(body)
        return upstream.getresponse()

    def _meter(self, req: Request, reader: UsageReader) -> None:
        """The usage read from the response, priced when the model has a price."""
        usage = reader.finish()
        req.usage, req.oversized = usage, reader.oversized
        price = price_for(usage.model, self.prices)
        if usage.seen and price is not None:
            req.cost_usd = cost_usd(price, fresh_input=usage.fresh_input, cached_input=usage.cached_input,
                                    cache_write=usage.cache_write, output=usage.output)

    def _connect(self) -> http.client.HTTPConnection:
        parts = urlsplit(self.upstream)
        host = parts.hostname or ""
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca_file)
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, parts.port or 443, timeout=UPSTREAM_TIMEOUT_S, context=context)
        else:
            conn = http.client.HTTPConnection(host, parts.port or 80, timeout=UPSTREAM_TIMEOUT_S)
        conn.connect()
        return conn

    def _log(self, req: Request) -> None:
        if req.n > MAX_RECORDS:
            return
        line = json.dumps(req.record(), sort_keys=True).encode() + b"\n"
        with self._lock:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)


def _budget_error(protocol: str, message: str) -> dict:
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "code": "sweep_budget_spent"}}


def _read_head(reader) -> tuple[str, str, list[tuple[str, str]]] | None:
    line = reader.readline(MAX_REQUEST_LINE + 1)
    while line in (b"\r\n", b"\n"):
        line = reader.readline(MAX_REQUEST_LINE + 1)
    if not line or len(line) > MAX_REQUEST_LINE:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers: list[tuple[str, str]] = []
    size = 0
    while True:
        raw = reader.readline(MAX_HEADERS + 1)
        size += len(raw)
        if not raw or size > MAX_HEADERS or len(headers) > 200:
            return None
        if raw in (b"\r\n", b"\n"):
            break
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep or not name.strip() or any(c in name for c in " \t"):
            return None
        headers.append((name.strip(), value.strip()))
    return parts[0], parts[1], headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _read_body(reader, headers: list[tuple[str, str]], conn: socket.socket) -> bytes | None:
    if (_header(headers, "expect") or "").lower() == "100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in (_header(headers, "transfer-encoding") or "").lower():
        out = bytearray()
        while True:
            size_line = reader.readline(1024)
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                return None
            if size == 0:
                while reader.readline(MAX_HEADERS) not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            if len(out) + size > MAX_BODY:
                return None
            out += reader.read(size)
            reader.readline(16)
    length = _header(headers, "content-length")
    if length is None:
        return b""
    if not length.isdigit() or int(length) > MAX_BODY:
        return None
    data = reader.read(int(length))
    return data if len(data) == int(length) else None


def _pump(conn: socket.socket, resp: http.client.HTTPResponse, reader: UsageReader, req: Request, *,
          client_ok: bool, bodyless: bool) -> bool:
    """Copy the response body to the CLI in chunks while the reader meters it; a CLI that went
    away stops the copying, not the reading (its usage is still counted). Whether the CLI got it all."""
    try:
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            reader.feed(chunk)
            if client_ok and not bodyless:
                try:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                except OSError:
                    client_ok = False     # the CLI went away: read on, so the usage is counted
        if client_ok and not bodyless:
            conn.sendall(b"0\r\n\r\n")
    except (OSError, http.client.HTTPException) as exc:
        req.error = f"response cut: {type(exc).__name__}"[:300]
        client_ok = False
    return client_ok


def _send_head(conn: socket.socket, resp: http.client.HTTPResponse, bodyless: bool) -> bool:
    lines = [f"HTTP/1.1 {resp.status} {resp.reason}"]
    for name, value in resp.getheaders():
        if name.lower() in _HOP or name.lower() == "set-cookie":
            continue
        lines.append(f"{name}: {value}")
    lines.append("Content-Length: 0" if bodyless else "Transfer-Encoding: chunked")
    try:
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace"))
        return True
    except OSError:
        return False


def _send_json(conn: socket.socket, status: int, obj: dict) -> None:
    data = json.dumps(obj).encode()
    reason = http.client.responses.get(status, "")
    conn.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)


def _send_plain(conn: socket.socket, status: int, text: bytes) -> None:
    reason = http.client.responses.get(status, "")
    try:
        conn.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                     f"Content-Length: {len(text)}\r\n\r\n".encode() + text)
    except OSError:
        pass
