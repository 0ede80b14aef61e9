"""Stream parsers and classifiers over streams recorded from the real CLIs (tests/fixtures/streams),
plus the usage sanity bounds every runtime's figures go through. Fast: no CLI, no server."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from sweep.runtimes.base import sane_cost, sane_turns
from sweep.runtimes.claude_code import ClaudeStream, classify_stream

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "streams"


@dataclass
class Outcome:
    rc: int | None = 1
    timed_out: bool = False
    stopped: str | None = None
    stderr_tail: str = ""
    stdout_tail: str = ""


def claude(case: str) -> ClaudeStream:
    stream = ClaudeStream()
    for line in (FIXTURES / "claude-2.1.197" / f"{case}.jsonl").read_bytes().splitlines():
        stream.feed_line(line)
    return stream


@pytest.mark.parametrize("case,ok,cls,reason", [
    ("solver_ok", True, None, None),
    ("reviewer_ok", True, None, None),
    ("api_429", False, "throttle", "api_error"),
    ("api_529", False, "throttle", "api_error"),
    ("api_500", False, "outage", "api_error"),
    ("api_401", False, "config", "api_error"),
    ("api_400_billing", False, "config", "api_error"),
    ("connection_refused", False, "outage", "api_error"),
    ("max_turns", False, "failure", "max_turns"),
    ("max_budget", False, "failure", "max_budget"),
])
def test_claude_streams_classify(case, ok, cls, reason):
    parsed = classify_stream(claude(case), Outcome(rc=0 if ok else 1))
    assert parsed.ok is ok
    assert parsed.failure_class == cls
    assert parsed.reason == reason


def test_claude_stream_provenance():
    stream = claude("solver_ok")
    prov = stream.provenance()
    assert prov["cli_version"] == "2.1.197" and prov["session_id"] and prov["model"]
    assert prov["num_turns"] == 2 and prov["total_cost_usd"] > 0
    assert prov["usage"]["input_tokens"] > 0


def test_reviewer_structured_output_comes_from_the_result_event():
    parsed = classify_stream(claude("reviewer_ok"), Outcome(rc=0))
    assert parsed.output["verdict"] == "accept"


def test_a_max_turns_run_whose_tools_printed_503_is_still_a_failure():
    stream = claude("max_turns")
    assert "503 Service Unavailable" in (FIXTURES / "claude-2.1.197" / "max_turns.jsonl").read_text()
    assert classify_stream(stream, Outcome()).failure_class == "failure"


def test_agent_text_imitating_an_api_error_is_not_an_error():
    # a successful session whose final text says "API Error: 429" is a success
    lines = (FIXTURES / "claude-2.1.197" / "solver_ok.jsonl").read_text().replace(
        '"result":"fixed add"', '"result":"API Error: 429 rate_limit_error"')
    stream = ClaudeStream()
    for line in lines.splitlines():
        stream.feed_line(line)
    assert classify_stream(stream, Outcome(rc=0)).ok


def test_no_events_at_all_is_a_cli_config_problem():
    parsed = classify_stream(ClaudeStream(), Outcome(rc=1, stderr_tail="error: unknown option '--bogus'\n"))
    assert parsed.failure_class == "config" and parsed.reason == "cli_failed"
    assert "unknown option" in parsed.evidence


def test_a_stall_is_an_outage_and_a_walltime_kill_is_not():
    assert classify_stream(claude("solver_ok"), Outcome(stopped="stalled")).failure_class == "outage"
    partial = ClaudeStream()
    partial.feed_line('{"type":"system","subtype":"init","session_id":"s"}')
    assert classify_stream(partial, Outcome(rc=None, timed_out=True)).failure_class == "failure"


def test_garbage_lines_are_counted_not_fatal():
    stream = ClaudeStream()
    for line in (b"not json", b"[1,2]", b"\xff\xfe", b'{"type":"result","subtype":"success","is_error":false,'
                 b'"num_turns":1,"total_cost_usd":0.01,"session_id":"abc"}'):
        stream.feed_line(line)
    assert stream.bad_lines == 3
    assert classify_stream(stream, Outcome(rc=0)).ok


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -1.0, 1e308, "0.1", True])
def test_forged_costs_are_refused(value):
    cost, anomaly = sane_cost(value, 5.0)
    assert cost is None and anomaly


def test_sane_costs_pass():
    assert sane_cost(0.0, 5.0) == (0.0, None)
    assert sane_cost(5.4, 5.0) == (5.4, None)        # one turn over the cap is possible
    assert sane_cost(None, 5.0) == (None, None)
    assert sane_turns(3, 80) == (3, None)
    assert sane_turns(-1, 80)[0] is None and sane_turns(10**9, 80)[0] is None


def codex(case: str):
    from sweep.runtimes.codex import CodexStream
    stream = CodexStream(prices={"input_per_mtok": 1.25, "output_per_mtok": 10.0})
    for line in (FIXTURES / "codex-0.171.0" / f"{case}.jsonl").read_bytes().splitlines():
        stream.feed_line(line)
    return stream


@pytest.mark.parametrize("case,rc,cls", [
    ("solver_ok", 0, None),
    ("api_429_rate_limit_exceeded", 1, "throttle"),
    ("api_429_insufficient_quota", 1, "config"),
    ("api_503_server_error", 1, "outage"),
    ("api_500_server_error", 1, "outage"),
    ("api_401_invalid_api_key", 1, "config"),
])
def test_codex_streams_classify(case, rc, cls):
    from sweep.runtimes.codex import classify_codex
    parsed = classify_codex(codex(case), Outcome(rc=rc), None)
    assert parsed.failure_class == cls and parsed.ok is (cls is None)


def test_codex_usage_is_priced_and_steps_counted():
    stream = codex("solver_ok")
    assert stream.thread_id and stream.steps == 2
    assert stream.cost_usd == pytest.approx((4000 * 1.25 + 600 * 10.0) / 1e6)


def test_codex_watch_stops_on_reconnects_turns_and_cost():
    from sweep.runtimes.codex import CodexWatch
    refused = (FIXTURES / "codex-0.171.0" / "connection_refused.jsonl").read_bytes()
    assert CodexWatch(None, None, None).feed(refused).startswith("unreachable")
    ok = (FIXTURES / "codex-0.171.0" / "solver_ok.jsonl").read_bytes()
    assert CodexWatch(1, None, None).feed(ok).startswith("max_turns")
    assert CodexWatch(None, 0.001, {"input_per_mtok": 1.25, "output_per_mtok": 10.0}).feed(ok).startswith("max_budget")
    assert CodexWatch(80, 5.0, {"input_per_mtok": 1.25, "output_per_mtok": 10.0}).feed(ok) is None


def test_a_walltime_kill_is_an_outage_only_while_the_cli_retries_the_api():
    busy = ClaudeStream()
    busy.feed_line('{"type":"system","subtype":"init","session_id":"s"}')
    busy.feed_line('{"type":"user","message":{"content":[{"type":"tool_result",'
                   '"content":"API Error: 503 Service Unavailable"}]}}')
    assert classify_stream(busy, Outcome(rc=None, timed_out=True)).failure_class == "failure"
    retrying = ClaudeStream()
    retrying.feed_line('{"type":"system","subtype":"init","session_id":"s"}')
    retrying.feed_line('{"type":"system","subtype":"api_retry","attempt":1,"error_status":"529","error":"overloaded"}')
    assert classify_stream(retrying, Outcome(rc=None, timed_out=True)).failure_class == "throttle"


def test_claude_reporting_zero_cost_for_spent_tokens_is_unknown_cost():
    lines = (FIXTURES / "claude-2.1.197" / "solver_ok.jsonl").read_text()
    import re
    lines = re.sub(r'"total_cost_usd":[0-9.e-]+', '"total_cost_usd":0', lines)
    stream = ClaudeStream()
    for line in lines.splitlines():
        stream.feed_line(line)
    parsed = classify_stream(stream, Outcome(rc=0))
    assert parsed.ok and parsed.cost_usd is None
