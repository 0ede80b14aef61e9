"""Token usage read from a model API's response as it streams by (JSON or server-sent events).

Protocols: `anthropic` (Messages: `message_start` carries the input and cache counts, each
`message_delta` the cumulative output; a JSON answer carries `usage` whole) and `openai` (the
Responses API: `response.completed` / `.incomplete` / `.failed` carry `response.usage`; Chat
Completions: the chunk or answer with `usage`, `prompt_tokens` / `completion_tokens`). Counts are
normalised: `fresh_input` excludes cached input (OpenAI's `input_tokens` includes it, Anthropic's
does not).

Bounded: an SSE line longer than MAX_LINE, or a JSON body longer than MAX_JSON, is not parsed
(counted in `oversized`); the bytes still reach the CLI. A count that is not a non-negative integer
below MAX_TOKENS is ignored. The endpoint is the relay's peer, not the agent: the agent cannot
write into these bytes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

MAX_LINE = 1 << 20
MAX_JSON = 16 << 20
MAX_TOKENS = 10**9


@dataclass
class Usage:
    model: str | None = None
    fresh_input: int = 0
    cached_input: int = 0
    cache_write: int = 0
    output: int = 0
    seen: bool = False            # a usage object was read at all
    complete: bool = False        # the response's final usage was read (not only its start)


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_TOKENS:
        return None
    return value


def _obj(value: object) -> dict:
    return value if isinstance(value, dict) else {}


@dataclass
class UsageReader:
    protocol: str                 # "anthropic" | "openai"
    event_stream: bool            # text/event-stream, else one JSON body
    usage: Usage = field(default_factory=Usage)
    oversized: int = 0
    _buffer: bytearray = field(default_factory=bytearray)
    _skipping: bool = False       # inside an oversized SSE line: drop until its end

    def feed(self, data: bytes) -> None:
        if not self.event_stream:
            if len(self._buffer) + len(data) > MAX_JSON:
                if not self._skipping:
                    self.oversized += 1
                self._skipping = True
                self._buffer.clear()
            elif not self._skipping:
                self._buffer += data
            return
        self._buffer += data
        while True:
            cut = self._buffer.find(b"\n")
            if cut < 0:
                if len(self._buffer) > MAX_LINE:
                    if not self._skipping:
                        self.oversized += 1
                    self._skipping = True
                    self._buffer.clear()
                return
            line = bytes(self._buffer[:cut])
            del self._buffer[:cut + 1]
            if self._skipping:
                self._skipping = False
                continue
            if len(line) > MAX_LINE:
                self.oversized += 1
                continue
            if line.startswith(b"data:"):
                self._event(line[5:].strip())

    def finish(self) -> Usage:
        if not self.event_stream and not self._skipping and self._buffer:
            try:
                body = json.loads(bytes(self._buffer))
            except ValueError:
                body = None
            if isinstance(body, dict):
                self._read(body, final=True)
        elif self.event_stream and self._buffer and not self._skipping and self._buffer.startswith(b"data:"):
            self._event(bytes(self._buffer[5:]).strip())
        self._buffer.clear()
        return self.usage

    def _event(self, payload: bytes) -> None:
        try:
            event = json.loads(payload)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if self.protocol == "anthropic":
            if kind == "message_start":
                self._read(_obj(event.get("message")), final=False)
            elif kind == "message_delta":
                self._read({"usage": event.get("usage")}, final=True, delta=True)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self._read(_obj(event.get("response")), final=True)
        elif "usage" in event and event.get("usage") is not None:     # a Chat Completions chunk
            self._read(event, final=True)
        elif kind is None and isinstance(event.get("model"), str) and self.usage.model is None:
            self.usage.model = event["model"][:128]

    def _read(self, body: dict, *, final: bool, delta: bool = False) -> None:
        u = self.usage
        model = body.get("model")
        if isinstance(model, str) and model:
            u.model = model[:128]
        usage = _obj(body.get("usage"))
        if not usage:
            return
        u.seen = True
        u.complete = u.complete or final
        if self.protocol == "anthropic":
            for key, attr in (("input_tokens", "fresh_input"), ("cache_read_input_tokens", "cached_input"),
                              ("cache_creation_input_tokens", "cache_write"), ("output_tokens", "output")):
                value = _count(usage.get(key))
                # message_delta's counts are cumulative: the latest (largest) is the response's
                if value is not None and (not delta or value >= getattr(u, attr)):
                    setattr(u, attr, value)
            return
        inp = _count(usage.get("input_tokens", usage.get("prompt_tokens")))
        out = _count(usage.get("output_tokens", usage.get("completion_tokens")))
        details = _obj(usage.get("input_tokens_details") or usage.get("prompt_tokens_details"))
        cached = _count(details.get("cached_tokens")) or 0
        if inp is not None:
            u.cached_input = min(cached, inp)
            u.fresh_input = inp - u.cached_input
        if out is not None:
            u.output = out
