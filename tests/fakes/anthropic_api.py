"""A FAKE Anthropic Messages API (SSE streaming), for driving the real `claude` CLI in tests.

It speaks the wire protocol the CLI speaks (`POST /v1/messages` with `stream: true`, answered as
`message_start` / `content_block_*` / `message_delta` / `message_stop` server-sent events), so the
real binary runs unmodified against it: only `ANTHROPIC_BASE_URL` points here.

Scripting: each role gets a route (a path prefix, `http://127.0.0.1:PORT/<route>`), and each route
a `Script`. The step a request is at is the number of assistant messages already in its
conversation, so the server keeps no per-session state and a retried request gets the same
answer. Steps:
- `tool_calls([...])`: one assistant message with those `tool_use` blocks (the CLI runs them and
  comes back with the results, which is the next step);
- `text("...")`: a final text answer (`end_turn`);
- `structured({...})`: a call of the `StructuredOutput` tool claude adds for `--json-schema`.
A script may instead fail every request: `error(status, type, message)` (429, 529, 500, 401,
billing, ...), or `stall=True` (the request is accepted and never answered).
Requests without tools (the CLI's own side requests) get a short text answer.
Every request is logged (`requests`) without its headers' secret values, for assertions, with the
session id the CLI names in its `X-Claude-Code-Session-Id` header (a resumed session keeps its id).
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from tests.fakes.sse_server import FakeSSEServer, Handler, key_digest, sse

MODEL = "claude-sonnet-4-5"


@dataclass
class Script:
    steps: list[dict] = field(default_factory=list)
    error: tuple[int, str, str] | None = None      # (HTTP status, error type, message) for every request
    stall: bool = False                             # accept the request, answer nothing
    usage: dict = field(default_factory=lambda: {"input_tokens": 2000, "output_tokens": 300})
    # steps may also be computed from the request (e.g. paths from the working directory)
    dynamic: Callable[[dict, int], dict] | None = None


def tool_calls(calls: list[tuple[str, dict]]) -> dict:
    return {"kind": "tools", "calls": calls}


def text(message: str) -> dict:
    return {"kind": "text", "text": message}


def structured(obj: dict) -> dict:
    return {"kind": "tools", "calls": [("StructuredOutput", obj)]}


def error(status: int, kind: str, message: str) -> tuple[int, str, str]:
    return (status, kind, message)


def working_directory(body: dict) -> str | None:
    """The session's working directory as the CLI states it in its system prompt."""
    system = body.get("system")
    texts = [system] if isinstance(system, str) else [b.get("text", "") for b in system or [] if isinstance(b, dict)]
    for chunk in texts:
        for line in chunk.splitlines():
            line = line.strip().lstrip("- ")
            if line.startswith(("Working directory:", "Primary working directory:")):
                return line.split(":", 1)[1].strip()
    return None


class FakeAnthropic(FakeSSEServer):
    def not_found(self, h: Handler, what: str) -> None:
        h.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": what}})

    def main_requests(self, route: str) -> list[dict]:
        return [r for r in self.requests if r["route"] == route and r["tools"]]

    # ---- serving ---------------------------------------------------------------------------

    def handle(self, h: Handler, body: dict) -> None:
        parts = h.path.split("?", 1)[0].strip("/").split("/")
        route = parts[0] if parts and parts[0] not in ("v1", "") else ""
        endpoint = "/".join(parts[1:] if route else parts)
        tools = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        messages = body.get("messages") or []
        step = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        record = {"route": route, "endpoint": endpoint, "tools": tools, "step": step, "at": time.time(),
                  "model": body.get("model"), "api_key_set": bool(h.headers.get("x-api-key")),
                  "api_key_sha256": key_digest(h.headers.get("x-api-key")), "usage": None,
                  "messages": messages, "system": body.get("system"), "cwd": working_directory(body),
                  "session_id": h.headers.get("X-Claude-Code-Session-Id")}    # the CLI's session, resumed or not
        self.log(record)
        if endpoint.endswith("count_tokens"):
            return h.send_json(200, {"input_tokens": 100})
        if not endpoint.endswith("messages"):
            return h.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": endpoint}})
        script = self.scripts.get(route)
        if script is None:
            return h.send_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                            "message": f"no script for route {route!r}"}})
        if script.stall and tools:
            return self.stall()
        if script.error is not None:
            status, kind, message = script.error
            return h.send_json(status, {"type": "error", "error": {"type": kind, "message": message}})
        if not tools:
            record["usage"] = {"input_tokens": 10, "output_tokens": 2}
            return self._stream(h, body, {"kind": "text", "text": "ok"}, record["usage"])
        if script.dynamic is not None:
            answer = script.dynamic(record, step)
        elif step < len(script.steps):
            answer = script.steps[step]
        else:
            answer = text("done")
        record["usage"] = dict(script.usage)      # what this answer bills (tests compare the metered cost)
        self._stream(h, body, answer, script.usage)

    def _stream(self, h: Handler, body: dict, answer: dict, usage: dict) -> None:
        model = body.get("model") or MODEL
        out = [sse("message_start", {"type": "message_start", "message": {
            "id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})]
        if answer["kind"] == "text":
            out += [sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}}),
                    sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "text_delta", "text": answer["text"]}}),
                    sse("content_block_stop", {"type": "content_block_stop", "index": 0})]
            stop = "end_turn"
        else:
            for i, (name, args) in enumerate(answer["calls"]):
                out += [sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                            "type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": name, "input": {}}}),
                        sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                            "type": "input_json_delta", "partial_json": json.dumps(args)}}),
                        sse("content_block_stop", {"type": "content_block_stop", "index": i})]
            stop = "tool_use"
        out += [sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                       "usage": {"output_tokens": usage["output_tokens"]}}),
                sse("message_stop", {"type": "message_stop"})]
        h.send_events(out)


def serve_forever_cli() -> None:   # pragma: no cover - manual use: python tests/fakes/anthropic_api.py
    fake = FakeAnthropic()
    fake.script("ok", Script(steps=[text("hello from the fake")]))
    print(fake.url("ok"), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":   # pragma: no cover
    serve_forever_cli()
