"""A FAKE remote MCP server on a free 127.0.0.1 port, for driving the real agent CLIs over HTTP.

It speaks both remote transports of MCP with the same two tools as the stdio fake
(tests/fakes/mcp_server.py: `write_marker`, `forbidden`), writing its markers into MARKER_DIR:
- streamable HTTP (`type = "http"`): JSON-RPC POSTed to /mcp, each answer a JSON body,
  notifications 202, a GET (the optional server-to-client stream) 405;
- the older HTTP+SSE transport (`type = "sse"`): GET /sse opens an event stream whose first
  event names the endpoint to POST messages to (/messages?session=N); answers come as events.
Every request is logged (`requests`: method, path, headers), so a test can tell what reached it.
"""
from __future__ import annotations

import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.fakes.mcp_server import answer


class FakeRemoteMCP:
    def __init__(self, marker_dir: Path) -> None:
        self.marker_dir = marker_dir
        self.requests: list[dict] = []
        self.streams: dict[str, queue.Queue] = {}
        self._lock = threading.Lock()
        fake = self

        class Handler(_Handler):
            pass
        Handler.fake = fake
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def sse_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/sse"

    def log(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests.append({"method": handler.command, "path": handler.path,
                                  "headers": {k.lower(): v for k, v in handler.headers.items()}})

    def tool_calls(self) -> int:
        return sum(1 for r in self.requests if r.get("rpc") == "tools/call")

    def close(self) -> None:
        for q in list(self.streams.values()):
            q.put(None)
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeRemoteMCP

    def log_message(self, *args) -> None:   # quiet
        pass

    def _send(self, status: int, body: bytes = b"", ctype: str = "application/json") -> None:
        self.send_response(status)
        if body:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.fake.log(self)
        if not self.path.startswith("/sse"):
            self._send(405)
            return
        session = str(len(self.fake.streams) + 1)
        q: queue.Queue = queue.Queue()
        self.fake.streams[session] = q
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.close_connection = True
        try:
            self.wfile.write(f"event: endpoint\ndata: /messages?session={session}\n\n".encode())
            self.wfile.flush()
            while (item := q.get()) is not None:
                self.wfile.write(b"event: message\ndata: " + json.dumps(item).encode() + b"\n\n")
                self.wfile.flush()
        except OSError:
            pass

    def do_DELETE(self) -> None:
        self.fake.log(self)
        self._send(200)

    def do_POST(self) -> None:
        self.fake.log(self)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            msg = json.loads(raw or b"{}")
        except ValueError:
            self._send(400)
            return
        messages = msg if isinstance(msg, list) else [msg]
        with self.fake._lock:
            self.fake.requests[-1]["rpc"] = ",".join(str(m.get("method")) for m in messages if isinstance(m, dict))
        replies = [r for m in messages if isinstance(m, dict) and (r := answer(self.fake.marker_dir, m)) is not None]
        if self.path.startswith("/messages"):
            stream = self.fake.streams.get(self.path.rpartition("=")[2])
            if stream is None:
                self._send(404)
                return
            for reply in replies:
                stream.put(reply)
            self._send(202)
            return
        if not self.path.startswith("/mcp"):
            self._send(404)
            return
        if not replies:
            self._send(202)
            return
        out = replies if isinstance(msg, list) else replies[0]
        self._send(200, json.dumps(out).encode())
