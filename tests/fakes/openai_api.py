"""A FAKE OpenAI Responses API (SSE streaming), for driving the real `codex` CLI in tests.

`POST /<route>/v1/responses` with `stream: true` is answered with `response.created`,
`response.output_item.done` (a message or a function call) and `response.completed` (with token
usage) events. As in anthropic_api.py, the step is computed from the request itself: the number of
function-call outputs already in its `input`, so no per-session state is kept. Steps:
`call(name, arguments)` (a function call of one of the tools the request offers), `say(text)`
(a final message). A script may fail every request (`error=(status, code, message)`) or stall.
Each request's log names the thread codex says it belongs to (its `session-id` header).
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from tests.fakes.sse_server import FakeSSEServer, Handler, key_digest, sse


@dataclass
class Script:
    steps: list[dict] = field(default_factory=list)
    error: tuple[int, str, str] | None = None
    stall: bool = False
    usage: dict = field(default_factory=lambda: {"input_tokens": 2000, "output_tokens": 300})
    dynamic: Callable[[dict, int], dict] | None = None


def call(name: str, arguments: dict, namespace: str | None = None) -> dict:
    """A function call; `namespace` for a tool codex offers inside a namespace (an MCP server's
    tools come as the namespace `mcp__<server>`)."""
    return {"kind": "call", "name": name, "arguments": arguments, "namespace": namespace}


def say(message: str) -> dict:
    return {"kind": "text", "text": message}


def _sse(data: dict) -> bytes:
    return sse(data["type"], data)


class FakeOpenAI(FakeSSEServer):
    def url(self, route: str) -> str:
        return f"{self.origin}/{route}/v1"

    def not_found(self, h: Handler, what: str) -> None:
        h.send_json(404, {"error": {"message": f"not here: {what}", "type": "invalid_request_error"}})

    def handle(self, h: Handler, body: dict) -> None:
        parts = h.path.split("?", 1)[0].strip("/").split("/")
        route = parts[0]
        items = body.get("input") or []
        step = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output")
        tools = [t.get("name") or t.get("type") for t in body.get("tools") or [] if isinstance(t, dict)]
        record = {"route": route, "path": h.path, "step": step, "tools": tools, "input": items,
                  "raw_tools": [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "namespace"],
                  "instructions": body.get("instructions"), "text": body.get("text"), "model": body.get("model"),
                  "usage": None, "auth": bool(h.headers.get("Authorization")), "auth_sha256": key_digest(h.headers.get("Authorization")),
                  "at": time.time(), "session_id": h.headers.get("session-id")}   # codex's thread, resumed or not
        self.log(record)
        script = self.scripts.get(route)
        if script is None:
            return h.send_json(404, {"error": {"message": f"no script for {route}", "type": "invalid_request_error"}})
        if script.stall:
            return self.stall()
        if script.error is not None:
            status, code, message = script.error
            return h.send_json(status, {"error": {"message": message, "type": code, "code": code}})
        if script.dynamic is not None:
            answer = script.dynamic(record, step)
        elif step < len(script.steps):
            answer = script.steps[step]
        else:
            answer = say("done")
        record["usage"] = dict(script.usage)      # what this answer bills (tests compare the metered cost)
        self._stream(h, body, answer, script.usage)

    def _stream(self, h: Handler, body: dict, answer: dict, usage: dict) -> None:
        rid = f"resp_{uuid.uuid4().hex[:16]}"
        if answer["kind"] == "text":
            item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": answer["text"], "annotations": []}]}
        else:
            item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:12]}", "status": "completed",
                    "call_id": f"call_{uuid.uuid4().hex[:12]}", "name": answer["name"],
                    "arguments": json.dumps(answer["arguments"])}
            if answer.get("namespace"):
                item["namespace"] = answer["namespace"]
        response = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "in_progress",
                    "model": body.get("model") or "gpt-5", "output": []}
        done = {**response, "status": "completed", "output": [item], "usage": {
            "input_tokens": usage["input_tokens"], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["output_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["input_tokens"] + usage["output_tokens"]}}
        out = [_sse({"type": "response.created", "response": response}),
               _sse({"type": "response.output_item.added", "output_index": 0, "item": item}),
               _sse({"type": "response.output_item.done", "output_index": 0, "item": item}),
               _sse({"type": "response.completed", "response": done})]
        h.send_events(out)
