"""Failure classification from text: outage, throttle, config or an ordinary failure.

Used when a runtime has no structured error event to read (the `command` runtime always; the agent
CLIs as a fallback; see docs/agents.md). The classes decide cooldowns:
throttle (the provider refuses us: 5 min), outage (the provider is down: 45 min), config (keys or
billing: stop and tell a human), failure (the task or agent: an ordinary failed attempt).

The patterns are deliberately specific (`API Error: 503`, `503 Service Unavailable`), not bare
numbers: a test suite printing "500 passed" must never park a role for 45 minutes.
"""
from __future__ import annotations

import re

_CONFIG = [re.compile(p, re.I) for p in (
    r"\b(401|403)\b[^\n]{0,40}(unauthori[sz]ed|forbidden)", r"\bunauthori[sz]ed\b", r"authentication[_ ]failed",
    r"invalid (x-)?api[ _-]?key", r"incorrect api key", r"insufficient_quota", r"quota exceeded",
    r"credit balance is too low", r"billing_error", r"api error: 40[13]\b",
    r"cannot be used with root/sudo privileges",
)]
_THROTTLE = [re.compile(p, re.I) for p in (
    r"\b429\b[^\n]{0,40}too many requests", r"too many requests", r"rate[ _-]?limit(ed|_error)?\b",
    r"api error: 429\b", r"\(429\)", r"status(?: code)?[ :=]+429\b",
    r"api error: 529\b", r"\b529\b[^\n]{0,20}overloaded", r"overloaded_error", r"\boverloaded\b",
)]
_OUTAGE = [re.compile(p, re.I) for p in (
    r"api error: 5\d\d\b", r"\b5\d\d (internal server error|bad gateway|service unavailable|gateway timeout)",
    r"status(?: code)?[ :=]+50[0234]\b", r"service unavailable", r"bad gateway", r"gateway timeout",
    r"high demand", r"connection refused", r"econnrefused", r"unable to connect to api",
    r"request timed out", r"stream disconnected", r"reconnecting\.\.\.", r"temporary failure in name resolution",
    r"network is unreachable", r"could not resolve host",
)]
TAIL_CHARS = 8000


def classify_text(text: str) -> tuple[str, str]:
    """(class, the matching line) for a failed session's output; "failure" when nothing matches."""
    tail = text[-TAIL_CHARS:]
    for cls, patterns in (("config", _CONFIG), ("throttle", _THROTTLE), ("outage", _OUTAGE)):
        for rx in patterns:
            m = rx.search(tail)
            if m:
                start = tail.rfind("\n", 0, m.start()) + 1
                end = tail.find("\n", m.end())
                return cls, tail[start:end if end != -1 else len(tail)].strip()[:300]
    return "failure", ""
