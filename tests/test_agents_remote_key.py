"""An agent solver on a remote provider holds its model key: the REAL claude CLI runs in the task's
image in the remote sandbox (the FAKE Daytona API of tests/fakes/daytona_api.py in container mode,
over the real SDK), with its family's key in the environment, since the credential and metering
relay cannot be reached from there. By default that is refused (`sweep init`, and the session
itself); with `[providers.<name>] agent_key_in_sandbox = true` the session runs and every report
says the key was inside that sandbox and the cost is self-reported."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from runstate import run_dir
from runstate.errors import ConfigError
from sweep.harbor.samples import make_pr_repo
from sweep.runtimes import SessionRequest, run_session
from sweep.runtimes.facts import facts_of
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, needs_claude, shipped
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, local_plan


def _outward_address() -> str | None:
    """This host's address that is not loopback (a remote sandbox's allow list refuses loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))      # no packet is sent: only the route is looked up
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


OUTWARD = _outward_address()
needs_outward = pytest.mark.skipif(OUTWARD is None, reason="no non-loopback address on this host")


def _plan(tmp_path: Path, solver: str = "claude-code", provider: str = "daytona", providers: dict | None = None,
          solver_options: dict | None = None, where: str = "pr-0") -> Path:
    src = make_pr_repo(tmp_path / "repos", "verified", name=where)
    options = {"provider": provider, "runtimes": {"solver": solver}}
    if solver_options:
        options["runtime_options"] = {"solver": solver_options}
    plan = local_plan([candidate(where, src, **options)], secrets=ENV_SECRETS,
                      providers=providers if providers is not None else {provider: {"api_url": "http://127.0.0.1:9"}})
    return write_plan(tmp_path / "plan.json", plan)


def _init(tmp_path: Path, plan: Path):
    return sweep("init", str(plan), "--campaign", str(tmp_path / "c"), check=False,
                 env={"ANTHROPIC_API_KEY": FAKE_KEY, "OPENAI_API_KEY": FAKE_KEY})


@pytest.mark.parametrize("solver,provider,options", [
    ("claude-code", "daytona", None),
    ("codex", "modal", None),
    ("command", "daytona", {"argv": ["my-agent", "{model_base_url}"], "network": "api", "protocol": "anthropic"}),
])
def test_init_refuses_an_agent_solver_that_would_hold_its_key_in_a_remote_sandbox(tmp_path, solver, provider, options):
    r = _init(tmp_path, _plan(tmp_path, solver, provider, solver_options=options))
    assert r.returncode == 2, r.stderr
    for says in ("candidates.0.runtimes.solver", f"runtime {solver}", f"provider {provider}",
                 "inside the remote sandbox, where no relay meters or hides it",
                 f"providers.{provider}.agent_key_in_sandbox"):
        assert says in r.stderr, (says, r.stderr)
    assert not (tmp_path / "c" / "campaign.toml").exists()


def test_the_opt_in_must_be_a_bool_and_must_concern_some_session(tmp_path):
    r = _init(tmp_path / "a", _plan(tmp_path / "a", providers={"daytona": {"api_url": "http://127.0.0.1:9",
                                                                         "agent_key_in_sandbox": "yes"}}))
    assert r.returncode == 2 and "agent_key_in_sandbox" in r.stderr and "true or false" in r.stderr, r.stderr
    # a command solver without a protocol speaks no model API sweep knows: the setting would do nothing
    plan = _plan(tmp_path / "b", "command", solver_options={"argv": ["true"]},
                 providers={"daytona": {"api_url": "http://127.0.0.1:9", "agent_key_in_sandbox": True}})
    r = _init(tmp_path / "b", plan)
    assert r.returncode == 2 and "providers.daytona.agent_key_in_sandbox" in r.stderr, r.stderr
    assert "no candidate runs an agent solver on daytona" in r.stderr


# ---- with the remote fakes ------------------------------------------------------------------

@pytest.fixture
def daytona():
    pytest.importorskip("daytona")
    from tests.fakes.daytona_api import FakeDaytona
    f = FakeDaytona(container=True).start()
    yield f
    f.stop()


def _runner(tmp_path: Path, fake, *, opted_in: bool):
    from sweep.providers import get_sandbox_provider
    from sweep.providers.container import ContainerRunner
    key = tmp_path / "daytona.key"
    key.write_text(fake.api_key + "\n")
    env = tmp_path / "environment"
    env.mkdir(exist_ok=True)
    (env / "Dockerfile").write_text("FROM python:3.12-slim\n")
    sandboxes = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=str(key))
    return ContainerRunner(sandboxes, environment_dir=env, run_dir=tmp_path / "run", campaign_id="c", run_id="r",
                           job_id="1", role="solver", attempt=1, agent_cli=facts_of("claude-code").cli.npm_spec,
                           agent_key_in_sandbox=opted_in)


def _request(tmp_path: Path, base_url: str, name: str) -> SessionRequest:
    spec, sha = shipped("solver")
    ws = tmp_path / "run" / f"ws-{name}"
    (ws / "repo").mkdir(parents=True)
    (ws / "repo" / "code.py").write_text("def add(a, b):\n    return a - b\n")
    keyfile = tmp_path / "anthropic.key"
    keyfile.write_text(FAKE_KEY + "\n")
    keyfile.chmod(0o600)
    return SessionRequest(role=spec, manifest_sha256=sha, runtime="claude-code",
                          runtime_options={"base_url": base_url, "max_retries": 0, "stall_s": 60,
                                           "model": "claude-sonnet-4-5"},
                          workspace=ws, session_dir=tmp_path / "run" / "sessions" / f"{name}-solver",
                          prompt="do the task", inputs={}, secrets={"ANTHROPIC_API_KEY": keyfile})


@needs_claude
@needs_outward
def test_a_remote_claude_session_is_refused_without_the_opt_in_and_runs_with_it_saying_so(tmp_path, daytona):
    from tests.fakes.anthropic_api import FakeAnthropic, Script, text
    fake = FakeAnthropic(host=OUTWARD)
    try:
        url = fake.script("solver", Script(steps=[text("done")]))
        with pytest.raises(ConfigError) as err:
            run_session(_request(tmp_path, url, "0001"), _runner(tmp_path, daytona, opted_in=False))
        assert err.value.field == "providers.daytona.agent_key_in_sandbox", err.value
        assert not fake.requests and not daytona.execs, "a session ran without the opt-in"
        req = _request(tmp_path, url, "0002")
        result = run_session(req, _runner(tmp_path, daytona, opted_in=True))
        assert result.status == "ok", result.evidence
        assert any(r["api_key_sha256"] for r in fake.requests), "the CLI reached the model without a key"
        record = json.loads((req.session_dir / "result.json").read_text())
        assert record["isolation"] == "container" and record["wire"] is None
        assert "key was inside the remote daytona sandbox" in record["key_in_sandbox"]
        assert "self-reported" in record["key_in_sandbox"]
    finally:
        fake.close()


@needs_claude
@needs_outward
def test_a_campaign_opted_in_runs_its_remote_claude_solver_and_every_report_says_so(tmp_path, daytona):
    from tests.fakes.anthropic_api import FakeAnthropic, Script, text
    fake = FakeAnthropic(host=OUTWARD)
    try:
        url = fake.script("solver", Script(steps=[text("done")] * 8))
        key = tmp_path / "daytona.key"
        key.write_text(daytona.api_key + "\n")
        providers = {"daytona": {"api_url": daytona.api_url, "api_key_file": str(key), "agent_key_in_sandbox": True}}
        plan = _plan(tmp_path, providers=providers,
                     solver_options={"base_url": url, "max_retries": 0, "stall_s": 60, "model": "claude-sonnet-4-5"})
        r = _init(tmp_path, plan)
        assert r.returncode == 0, r.stderr
        assert "agent_key_in_sandbox = true: agent solver sessions on daytona will hold their model KEY" in r.stderr
        d = tmp_path / "c"
        tick_until_done(d, timeout=300, env={"ANTHROPIC_API_KEY": FAKE_KEY})
        assert any(r["api_key_sha256"] for r in fake.requests), "the remote solver never reached the model"
        results = [json.loads(p.read_text()) for p in (run_dir(d, "pr-0") / "sessions").glob("*-solver/result.json")]
        assert results and all("key was inside the remote daytona sandbox" in x["key_in_sandbox"] for x in results)
        status = sweep("status", "--campaign", str(d), check=False)
        assert "KEY IN SANDBOX: agent solver sessions on daytona" in status.stdout, status.stdout
        assert json.loads(sweep("status", "--json", "--campaign", str(d)).stdout)["key_in_sandbox"] == ["daytona"]
        show = sweep("show", "pr-0", "--campaign", str(d), check=False)
        assert "KEY IN SANDBOX (cost self-reported)" in show.stdout, show.stdout
        report = (run_dir(d, "pr-0") / "report.md").read_text()
        assert "**KEY IN SANDBOX**: the solver (claude-code) ran on daytona" in report, report
        html = tmp_path / "report.html"
        sweep("report", "--campaign", str(d), "--out", str(html))
        assert "KEY IN SANDBOX: agent solver sessions on daytona" in html.read_text()
    finally:
        fake.close()
