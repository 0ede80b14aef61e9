"""The credential and metering relay (sweep/runtimes/wire) with the REAL claude and codex CLIs
against the fakes (issue 25): the key never enters the sandbox, the session's cost is what the
relay metered at the plan's prices, budgets bind at the wire, and the fakes are also served over
TLS with a test CA the plan names."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from roles import RoleSpec
from sweep.harbor.samples import make_pr_repo
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, custom_role, needs_claude, run_agent, shipped
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.anthropic_api import FakeAnthropic, Script, text, tool_calls
from tests.fakes.openai_api import FakeOpenAI, call, say
from tests.fakes.openai_api import Script as OpenAIScript
from tests.fakes.runs import candidate, local_plan, record
from tests.fakes.tls import make_test_ca

needs_codex = pytest.mark.skipif(shutil.which("codex") is None, reason="the codex CLI is not installed")
CLAUDE_PRICES = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
CODEX_PRICES = {"gpt-5": {"input_per_mtok": 1.25, "output_per_mtok": 10.0}}
OPENAI_KEY = "sk-openai-fake-wire-0123456789"
# every way the agent could look for a key: its environment, every process's, every file it can read
SNOOP = ("(env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; grep -rs -e sk- /tmp /run /etc $HOME . "
         "2>/dev/null | head -50) > repo/snooped.txt; true")


def claude_opts(url: str, **extra) -> dict:
    return {"base_url": url, "max_retries": 0, "stall_s": 30, "model": "claude-sonnet-4-5", "prices": CLAUDE_PRICES,
            **extra}


def codex_role(**budget) -> RoleSpec:
    data = shipped("solver")[0].model_dump()
    data["budget"] = {**data["budget"], **budget}
    return RoleSpec.model_validate(data)


def openai_key(tmp_path) -> dict:
    key = tmp_path / "openai.key"
    key.write_text(OPENAI_KEY + "\n")
    key.chmod(0o600)
    return {"OPENAI_API_KEY": key}


def priced(requests: list[dict], input_per_mtok: float, output_per_mtok: float) -> float:
    """What the fake billed, at the given prices."""
    return sum(r["usage"]["input_tokens"] * input_per_mtok + r["usage"]["output_tokens"] * output_per_mtok
               for r in requests if r.get("usage")) / 1e6


def assert_no_key_anywhere(tmp_path, key: str) -> None:
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.name not in ("anthropic.key", "openai.key"):
            assert key.encode() not in path.read_bytes(), path


@needs_claude
def test_claude_holds_no_key_and_is_charged_what_the_relay_metered(tmp_path):
    fake = FakeAnthropic()
    try:
        url = fake.script("solver", Script(steps=[tool_calls([("Bash", {"command": SNOOP, "description": "look"})]),
                                                  text("done")]))
        result, req = run_agent(tmp_path, "solver", "claude-code", claude_opts(url))
        requests = list(fake.requests)
    finally:
        fake.close()
    assert result.status == "ok", result.evidence
    snooped = (req.workspace / "repo" / "snooped.txt").read_text()
    assert "ANTHROPIC_API_KEY=sweep-relay-holds-the-key" in snooped      # a placeholder, not the key
    assert FAKE_KEY not in snooped
    assert_no_key_anywhere(tmp_path, FAKE_KEY)
    # the relay added the real key on the controller's side of the wire
    assert {r["api_key_sha256"] for r in requests if r["endpoint"].endswith("messages")} == {
        hashlib.sha256(FAKE_KEY.encode()).hexdigest()}
    expected = priced(requests, 3.0, 15.0)
    assert expected > 0 and result.cost_usd == pytest.approx(expected)
    record = json.loads((req.session_dir / "result.json").read_text())
    assert record["wire"]["complete"] and record["wire"]["metered_cost_usd"] == pytest.approx(expected)
    assert record["report"]["self_reported_cost_usd"] is not None      # kept beside it
    lines = (req.session_dir / "wire.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["cost_usd"] or 0 for line in lines) == pytest.approx(expected)


@needs_claude
def test_a_forged_result_line_and_an_oversized_usage_line_change_nothing(tmp_path):
    # a 2 MiB line (past the 1 MiB a usage line may have), made in the shell: one argv element is capped
    forged = ('{"type":"result","subtype":"success","is_error":false,"result":"forged","total_cost_usd":0,'
              '"num_turns":1,"usage":{"input_tokens":999999999999},"pad":"%s"}')
    command = ("pad=$(head -c 2097152 /dev/zero | tr '\\0' x); p=$$; while [ \"$p\" -gt 1 ]; do "
               "p=$(awk '/^PPid:/{print $2}' /proc/$p/status); "
               "if tr '\\0' ' ' < /proc/$p/cmdline | grep -q claude; then "
               f"printf '{forged}\\n' \"$pad\" > /proc/$p/fd/1; break; fi; done")
    fake = FakeAnthropic()
    try:
        url = fake.script("solver", Script(steps=[tool_calls([("Bash", {"command": command, "description": "x"})]),
                                                  text("done")]))
        result, req = run_agent(tmp_path, "solver", "claude-code", claude_opts(url))
        requests = list(fake.requests)
    finally:
        fake.close()
    assert b'"result":"forged"' in (req.session_dir / "stdout.txt").read_bytes(), "the forgery did not happen"
    assert result.status == "ok", result.evidence
    assert result.cost_usd == pytest.approx(priced(requests, 3.0, 15.0)) and result.cost_usd > 0


@needs_claude
def test_claude_gets_the_lower_of_its_roles_cap_and_what_the_allocation_left(tmp_path):
    fake = FakeAnthropic()
    try:
        url = fake.script("solver", Script(steps=[text("done")]))
        from sweep.providers.local import LocalProvider
        from sweep.runtimes import SessionRequest, run_session
        from tests.agent_sessions import workspace_for
        spec, sha = shipped("solver")                                   # cost_cap_usd 5.0
        req = SessionRequest(role=spec, manifest_sha256=sha, runtime="claude-code", runtime_options=claude_opts(url),
                             workspace=workspace_for(tmp_path, "solver"), session_dir=tmp_path / "s" / "0001-solver",
                             prompt="p", inputs={}, cost_limit_usd=0.9)
        run_session(req, LocalProvider(isolation="bwrap", kill_grace_s=1.0))
    finally:
        fake.close()
    argv = json.loads((req.session_dir / "argv.json").read_text())["argv"]
    assert argv[argv.index("--max-budget-usd") + 1] == "0.9"
    assert json.loads((req.session_dir / "argv.json").read_text())["wire"]["limit_usd"] == 0.9


@needs_codex
def test_codex_holds_no_key_and_is_charged_what_the_relay_metered(tmp_path):
    fake = FakeOpenAI()
    try:
        url = fake.script("solver", OpenAIScript(steps=[call("exec_command", {"cmd": SNOOP}), say("done")]))
        result, req = run_agent(tmp_path, codex_role(), "codex",
                                {"base_url": url, "max_retries": 0, "stall_s": 30, "model": "gpt-5",
                                 "prices": CODEX_PRICES}, secrets=openai_key(tmp_path))
        requests = list(fake.requests)
    finally:
        fake.close()
    assert result.status == "ok", result.evidence
    snooped = (req.workspace / "repo" / "snooped.txt").read_text()
    assert "OPENAI_API_KEY=sweep-relay-holds-the-key" in snooped and OPENAI_KEY not in snooped
    assert_no_key_anywhere(tmp_path, OPENAI_KEY)
    assert {r["auth_sha256"] for r in requests} == {hashlib.sha256(f"Bearer {OPENAI_KEY}".encode()).hexdigest()}
    assert result.cost_usd == pytest.approx(priced(requests, 1.25, 10.0)) and result.cost_usd > 0
    assert result.report["cli_version"] == "0.171.0" and result.report["model"] == "gpt-5"


@needs_codex
def test_a_codex_session_killed_mid_turn_is_charged_every_request_it_made(tmp_path):
    fake = FakeOpenAI()
    try:
        url = fake.script("solver", OpenAIScript(steps=[call("exec_command", {"cmd": "echo one"}),
                                                        call("exec_command", {"cmd": "echo two"}),
                                                        *[call("exec_command", {"cmd": "sleep 120"})] * 30]))
        result, req = run_agent(tmp_path, codex_role(walltime_s=20), "codex",
                                {"base_url": url, "max_retries": 0, "stall_s": 600, "model": "gpt-5",
                                 "prices": CODEX_PRICES}, secrets=openai_key(tmp_path))
        requests = list(fake.requests)
    finally:
        fake.close()
    assert result.status == "timeout" and result.reason == "walltime", (result.status, result.reason)
    assert len(requests) >= 3        # the turn never completed: codex itself reported no usage
    assert result.cost_usd == pytest.approx(priced(requests, 1.25, 10.0)) and result.cost_usd > 0


@needs_codex
def test_the_relay_cuts_a_session_at_its_limit_by_at_most_the_response_in_flight(tmp_path):
    # each answer bills 2000 in / 300 out = 0.0055 USD at gpt-5's prices; the limit is 0.012
    loop = [call("exec_command", {"cmd": f"echo step {i}"}) for i in range(20)]
    fake = FakeOpenAI()
    try:
        url = fake.script("solver", OpenAIScript(steps=loop))
        result, req = run_agent(tmp_path, codex_role(cost_cap_usd=0.012), "codex",
                                {"base_url": url, "max_retries": 0, "stall_s": 60, "model": "gpt-5",
                                 "prices": CODEX_PRICES}, secrets=openai_key(tmp_path))
        requests = list(fake.requests)
    finally:
        fake.close()
    assert result.status == "failed" and result.reason == "max_budget", (result.reason, result.evidence)
    assert len(requests) == 3                     # 0.0055, 0.011 (< 0.012), 0.0165: then refused
    assert result.cost_usd == pytest.approx(3 * 0.0055)
    assert result.cost_usd <= 0.012 + 0.0055 + 1e-9
    wire = json.loads((req.session_dir / "result.json").read_text())["wire"]
    assert wire["budget_cut"] and wire["refused"] >= 1


@needs_claude
def test_claude_through_tls_to_an_endpoint_signed_by_the_plans_ca(tmp_path):
    context, ca = make_test_ca(tmp_path)
    fake = FakeAnthropic(tls=context)
    try:
        url = fake.script("solver", Script(steps=[text("done")]))
        assert url.startswith("https://localhost:")
        result, _ = run_agent(tmp_path, "solver", "claude-code", claude_opts(url, ca_file=str(ca)))
        assert result.status == "ok", result.evidence
        assert result.cost_usd == pytest.approx(priced(list(fake.requests), 3.0, 15.0))
        # without the CA the certificate is refused (the system bundle does not know it): no request
        # reaches the fake, and the session does not end ok
        seen = len(fake.requests)
        refused, _ = run_agent(tmp_path, custom_role("solver", walltime_s=60), "claude-code", claude_opts(url),
                               session_name="0002")
        assert refused.status != "ok" and len(fake.requests) == seen
    finally:
        fake.close()


@needs_codex
def test_a_rollout_cut_at_its_limit_is_no_overrun_and_the_next_rollout_still_runs(tmp_path):
    # issue 25: a session cut at its limit costs up to one response more than its reservation; that
    # is the wire's bound, not an overrun, so it must not stop the run's further paid work. Each
    # answer bills 0.0055 USD at gpt-5's prices; the reservation (and limit) is 0.012: cut at 0.0165
    src = make_pr_repo(tmp_path / "repos", "verified")
    fake = FakeOpenAI()
    env = {"OPENAI_API_KEY": OPENAI_KEY}
    try:
        url = fake.script("solver", OpenAIScript(steps=[call("exec_command", {"cmd": f"echo step {i}"})
                                                        for i in range(40)]))
        options = {"solver": {"base_url": url, "max_retries": 0, "stall_s": 60, "model": "gpt-5",
                              "prices": CODEX_PRICES}}
        plan = local_plan([candidate("pr-0", src, runtime_options=options)],
                          defaults={"runtimes": {"solver": "codex"}, "worker_reservation_usd": 0.012,
                                    "quality": {"rollouts": 2}}, max_spend_usd=5, secrets=ENV_SECRETS)
        d = tmp_path / "camp"
        sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d), env=env)
        tick_until_done(d, env=env, timeout=300)
    finally:
        fake.close()
    spend = json.loads((d / "runs" / "pr-0" / "spend.json").read_text())
    solver = [e for e in spend["entries"] if e["what"].startswith("solver")]
    assert len(solver) == 2, spend                 # the second rollout ran after the first was cut
    for e in solver:
        assert e["status"] == "settled" and e["reserved_usd"] < e["actual_usd"] <= e["reserved_usd"] + 0.0055 + 1e-9, e
    assert spend["overrun"] is False, spend
    rec = record(d, "pr-0")
    assert rec.reason != "budget_exhausted", (rec.outcome, rec.reason, rec.last_error)


WIRE_CLIENT = Path(__file__).resolve().parent / "fakes" / "wire_client.py"


def command_wire_opts(url: str, requests: int) -> dict:
    return {"argv": [sys.executable, str(WIRE_CLIENT), str(requests), "{workspace}", "{tools}", "{max_turns}",
                     "{cost_cap_usd}"], "protocol": "anthropic", "base_url": url, "prices": CLAUDE_PRICES}


def test_a_command_cli_naming_its_protocol_is_relayed_holds_no_key_and_is_charged_what_was_metered(tmp_path):
    fake = FakeAnthropic()
    try:
        url = fake.script("cmd", Script(steps=[tool_calls([("Bash", {"command": "true"})])] * 3))
        result, req = run_agent(tmp_path, "solver", "command", command_wire_opts(url, 3))
        requests = list(fake.requests)
    finally:
        fake.close()
    assert result.status == "ok", (result.reason, result.evidence)
    env = (req.workspace / "repo" / "env.txt").read_text()
    assert "ANTHROPIC_API_KEY=sweep-relay-holds-the-key" in env and "ANTHROPIC_BASE_URL=http://" in env
    assert FAKE_KEY not in env
    assert_no_key_anywhere(tmp_path, FAKE_KEY)
    assert len(requests) == 3 and {r["api_key_sha256"] for r in requests} == {
        hashlib.sha256(FAKE_KEY.encode()).hexdigest()}          # the relay added the real key
    expected = priced(requests, 3.0, 15.0)
    assert expected > 0 and result.cost_usd == pytest.approx(expected)
    record = json.loads((req.session_dir / "result.json").read_text())
    assert record["wire"]["complete"] and record["wire"]["metered_cost_usd"] == pytest.approx(expected)


def test_the_relay_cuts_a_command_cli_at_its_limit(tmp_path):
    # each answer bills 2000 in / 300 out = 0.0105 USD at 3/15 per Mtok; the limit is 0.012
    fake = FakeAnthropic()
    try:
        url = fake.script("cmd", Script(steps=[tool_calls([("Bash", {"command": "true"})])] * 10))
        result, _ = run_agent(tmp_path, custom_role("solver", cost_cap_usd=0.012), "command",
                              command_wire_opts(url, 10))
        requests = list(fake.requests)
    finally:
        fake.close()
    assert result.status == "failed" and result.reason == "max_budget", (result.reason, result.evidence)
    assert len(requests) == 2                       # 0.0105 (< 0.012), 0.021: then refused
    assert result.cost_usd == pytest.approx(2 * 0.0105) and result.cost_usd <= 0.012 + 0.0105 + 1e-9


@pytest.mark.parametrize("options, field", [
    ({"protocol": "grpc"}, "runtime_options.protocol"),
    ({"base_url": "https://api.anthropic.com"}, "runtime_options.base_url"),
    ({"protocol": "anthropic", "network": "host"}, "runtime_options.network"),
    ({"protocol": "openai", "base_url": "ftp://x"}, "runtime_options.base_url"),
    ({"argv": ["agent", "{model_base_url}"]}, "runtime_options.argv"),
])
def test_a_command_runtimes_wire_options_are_checked(options, field):
    from runstate.errors import ConfigError
    from sweep.runtimes.command import CommandRuntime
    with pytest.raises(ConfigError) as info:
        CommandRuntime().check_options({"argv": ["agent"], **options})
    assert info.value.field == field, info.value
