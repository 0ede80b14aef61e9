"""The HTTP plumbing the FAKE model servers share (anthropic_api.py, openai_api.py): a threaded
server on a free 127.0.0.1 port, per-role scripts, a request log, JSON answers and one-shot
server-sent-event streams. Each fake only says how its API answers a request (`handle`)."""
from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeSSEServer

    def log_message(self, *args) -> None:   # quiet
        pass

    def do_GET(self) -> None:   # the CLIs may probe; nothing here is needed
        self.fake.not_found(self, self.path)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        self.fake.handle(self, body if isinstance(body, dict) else {})

    def send_json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, events: list[bytes]) -> None:
        """A complete SSE stream in one write, then the connection closes (no keep-alive state)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(b"".join(events))
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True


def key_digest(value: str | None) -> str | None:
    """What a request's credential header was, without keeping it: its sha256."""
    import hashlib
    return hashlib.sha256(value.encode()).hexdigest() if value else None


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class FakeSSEServer:
    """Subclasses implement `handle(h, body)` and `not_found(h, what)`; `url(route)` may add a suffix."""

    def __init__(self, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> None:
        """`tls`: a server context (tests/fakes/tls.py) to serve HTTPS as `localhost` instead of HTTP;
        `host`: the address to listen on (a remote sandbox's allow list refuses loopback ones)."""
        self.scripts: dict[str, Any] = {}
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        handler = type("BoundHandler", (Handler,), {"fake": self})
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.origin = f"http://{host}:{self.port}"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self.origin = f"https://localhost:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, route: str) -> str:
        return f"{self.origin}/{route}"

    def script(self, route: str, script: Any) -> str:
        self.scripts[route] = script
        return self.url(route)

    def log(self, record: dict) -> None:
        with self._lock:
            self.requests.append(record)

    def stall(self) -> None:
        """Accept a request and never answer it (until the server closes)."""
        self._stop.wait(3600)

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def handle(self, h: Handler, body: dict) -> None:   # pragma: no cover - abstract
        raise NotImplementedError

    def not_found(self, h: Handler, what: str) -> None:   # pragma: no cover - abstract
        raise NotImplementedError
