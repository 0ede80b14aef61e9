"""Whole campaigns played by the REAL agent CLIs against fake model servers: every role's session
goes through the controller, the sandbox, the audit and the budget, and the run ends verified.

The fake author writes the task bundle through the CLI's tools, the fake reviewer returns its
verdict through claude's structured output, the fake solver edits the repository. Keys reach the
sessions from the controller's environment (the plan's [secrets] names the family's variables).
"""
from __future__ import annotations

import json
import shutil

import pytest

from runstate import run_dir
from runstate.models import Outcome, RunState
from sweep.harbor.samples import make_pr_repo
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, needs_claude
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.agent_scripts import author_script, reviewer_script, solver_script
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.runs import candidate, local_plan, record

ENV = {"ANTHROPIC_API_KEY": FAKE_KEY}


@pytest.fixture
def fake():
    server = FakeAnthropic()
    yield server
    server.close()


def claude_options(fake: FakeAnthropic, role: str) -> dict:
    return {"base_url": fake.url(role), "max_retries": 0, "stall_s": 60, "model": "claude-sonnet-4-5"}


def sessions(d, run_id: str) -> list[dict]:
    root = run_dir(d, run_id) / "sessions"
    return [json.loads((p / "result.json").read_text()) for p in sorted(root.iterdir()) if (p / "result.json").exists()]


@needs_claude
def test_a_campaign_played_by_claude_ends_verified_with_settled_costs(tmp_path, fake):
    src = make_pr_repo(tmp_path / "repos", "verified")
    fake.script("author", author_script(src))
    fake.script("reviewer", reviewer_script())
    fake.script("solver", solver_script(src))
    runtimes = {"author": "claude-code", "reviewer": "claude-code", "solver": "claude-code"}
    options = {role: claude_options(fake, role) for role in runtimes}
    plan = local_plan([candidate("pr-0", src, runtime_options=options)],
                      defaults={"runtimes": runtimes, "quality": {"max_repairs": 0}}, max_spend_usd=50,
                      secrets=ENV_SECRETS)
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d), env=ENV)
    tick_until_done(d, env=ENV, timeout=300)

    rec = record(d, "pr-0")
    assert rec.state is RunState.ended and rec.outcome is Outcome.verified, (rec, rec.last_error)
    done = sessions(d, "pr-0")
    # the second reviewer session is the rollout review, after the solver
    assert [s["role"] for s in done] == ["author", "reviewer", "solver", "reviewer"]
    for s in done:
        assert s["status"] == "ok" and s["runtime"] == "claude-code"
        assert s["cost_usd"] > 0 and s["turns"] >= 1 and s["session_id"]
        assert s["report"]["cli_version"] == "2.1.197"
    # the solver's rollout scored 1: its edit of the repository was real
    solve = json.loads((run_dir(d, "pr-0") / "evidence" / "solve-r0001.json").read_text())
    assert [r["reward"] for r in solve["rollouts"]] == [1.0]
    # spend.json: every session reserved its role's cap and settled at the parsed cost
    spend = json.loads((run_dir(d, "pr-0") / "spend.json").read_text())
    entries = spend["entries"]
    assert [e["status"] for e in entries] == ["settled"] * 4
    assert [e["reserved_usd"] for e in entries] == [5.0, 1.5, 5.0, 1.5]
    assert [round(e["actual_usd"], 6) for e in entries] == [round(s["cost_usd"], 6) for s in done]
    assert abs(rec.spent_usd - sum(s["cost_usd"] for s in done)) < 1e-9
    # the key never reached a file of the campaign
    for path in d.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path


CODEX_PRICES = {"input_per_mtok": 1.25, "output_per_mtok": 10.0}
OPENAI_KEY = "sk-openai-fake-0123456789"
needs_codex = pytest.mark.skipif(shutil.which("codex") is None,
                                 reason="the codex CLI is not installed (.ci/run installs it)")


def codex_solver_plan(tmp_path, fake, openai, **settings) -> dict:
    settings.setdefault("secrets", ENV_SECRETS)
    """author and reviewer claude, solver codex, each scripted to play its role well."""
    from tests.fakes.agent_scripts import codex_solver_script
    src = make_pr_repo(tmp_path / "repos", "verified")
    fake.script("author", author_script(src))
    fake.script("reviewer", reviewer_script())
    openai.script("solver", codex_solver_script(src))
    runtimes = {"author": "claude-code", "reviewer": "claude-code", "solver": "codex"}
    options = {"author": claude_options(fake, "author"), "reviewer": claude_options(fake, "reviewer"),
               "solver": {"base_url": openai.url("solver"), "max_retries": 0, "stall_s": 60,
                          "model": "gpt-5", "prices": CODEX_PRICES}}
    return local_plan([candidate("pr-0", src, runtime_options=options)],
                      defaults={"runtimes": runtimes, "quality": {"max_repairs": 0}}, max_spend_usd=50, **settings)


def assert_codex_solver_campaign_verified(d) -> dict:
    rec = record(d, "pr-0")
    assert rec.outcome is Outcome.verified, (rec, rec.last_error)
    done = sessions(d, "pr-0")
    assert [(s["role"], s["runtime"], s["status"]) for s in done] == [
        ("author", "claude-code", "ok"), ("reviewer", "claude-code", "ok"), ("solver", "codex", "ok"),
        ("reviewer", "claude-code", "ok")]          # the last: the rollout review
    solver = done[2]
    assert solver["session_id"] and solver["cost_usd"] > 0 and solver["turns"] >= 1
    solve = json.loads((run_dir(d, "pr-0") / "evidence" / "solve-r0001.json").read_text())
    assert [r["reward"] for r in solve["rollouts"]] == [1.0]
    spend = json.loads((run_dir(d, "pr-0") / "spend.json").read_text())
    assert [e["status"] for e in spend["entries"]] == ["settled"] * 4
    assert spend["entries"][2]["actual_usd"] == pytest.approx(solver["cost_usd"])
    # every session is charged what the relay metered on the wire
    assert all(s["wire"]["complete"] and s["cost_usd"] == pytest.approx(s["wire"]["metered_cost_usd"]) for s in done)
    assert sum(e["actual_usd"] for e in spend["entries"]) == pytest.approx(sum(s["cost_usd"] for s in done))
    for path in d.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert FAKE_KEY.encode() not in data and OPENAI_KEY.encode() not in data, path
    return solver


@needs_claude
@needs_codex
def test_one_campaign_gives_one_candidate_a_claude_solver_and_another_a_codex_one(tmp_path, fake):
    """The shipped manifests, unedited: the key family follows the runtime, per candidate."""
    from tests.fakes.openai_api import FakeOpenAI
    openai = FakeOpenAI()
    try:
        plan = codex_solver_plan(tmp_path, fake, openai)
        src = make_pr_repo(tmp_path / "repos-claude", "verified")
        fake.script("author-1", author_script(src))
        fake.script("solver-1", solver_script(src))
        plan["candidates"].append(candidate("pr-1", src, runtimes={"solver": "claude-code"}, runtime_options={
            "author": claude_options(fake, "author-1"), "reviewer": claude_options(fake, "reviewer"),
            "solver": claude_options(fake, "solver-1")}))
        d = tmp_path / "camp"
        sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d),
              env={**ENV, "OPENAI_API_KEY": OPENAI_KEY})
        tick_until_done(d, env={**ENV, "OPENAI_API_KEY": OPENAI_KEY}, timeout=400)
        assert_codex_solver_campaign_verified(d)
        rec = record(d, "pr-1")
        assert rec.outcome is Outcome.verified, (rec, rec.last_error)
        assert [(s["role"], s["runtime"], s["status"]) for s in sessions(d, "pr-1")] == [
            ("author", "claude-code", "ok"), ("reviewer", "claude-code", "ok"), ("solver", "claude-code", "ok"),
            ("reviewer", "claude-code", "ok")]
        assert fake.main_requests("solver-1") and openai.requests
    finally:
        openai.close()


@needs_claude
@pytest.mark.slurm
def test_a_claude_campaign_through_sbatch_on_the_test_cluster_ends_verified(slurm_cluster, tmp_path, fake):
    src = make_pr_repo(tmp_path / "repos", "verified")
    fake.script("author", author_script(src))
    fake.script("reviewer", reviewer_script())
    fake.script("solver", solver_script(src))
    key = tmp_path / "anthropic.key"
    key.write_text(FAKE_KEY + "\n")
    key.chmod(0o600)
    runtimes = {"author": "claude-code", "reviewer": "claude-code", "solver": "claude-code"}
    options = {role: claude_options(fake, role) for role in runtimes}
    plan = local_plan([candidate("pr-0", src, runtime_options=options)],
                      defaults={"runtimes": runtimes, "quality": {"max_repairs": 0}}, max_spend_usd=50,
                      secrets={"anthropic": {"file": str(key)}})
    plan["scheduler"] = {"backend": "slurm", "lanes": {"cpu": {"partition": "cpu", "time": "10"},
                                                       "gpu": {"partition": "gpu", "time": "10"}}}
    env = {"SLURM_CONF": str(slurm_cluster.conf)}       # the key comes from [secrets], not the environment
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d), env=env)
    tick_until_done(d, env=env, timeout=300, pause=0.5)
    rec = record(d, "pr-0")
    assert rec.outcome is Outcome.verified and rec.job_id.isdigit(), (rec, rec.last_error)
    done = sessions(d, "pr-0")
    assert [(s["role"], s["status"]) for s in done] == [("author", "ok"), ("reviewer", "ok"), ("solver", "ok"),
                                                        ("reviewer", "ok")]
    assert all(s["cost_usd"] > 0 and s["session_id"] for s in done)
    spend = json.loads((run_dir(d, "pr-0") / "spend.json").read_text())
    assert [e["status"] for e in spend["entries"]] == ["settled"] * 4
    assert all(r["api_key_set"] for r in fake.requests if r["tools"])


@needs_claude
@needs_codex
@pytest.mark.slurm
def test_a_codex_solver_campaign_through_sbatch_on_the_test_cluster_ends_verified(slurm_cluster, tmp_path, fake):
    """The controller runs as a Slurm job; the codex solver's NATIVE binary starts inside the
    sandbox on the compute side (its session ran under bwrap with codex's own sandbox off)."""
    from sweep.runtimes.codex import native_binary
    from tests.fakes.openai_api import FakeOpenAI
    keys = {}
    for family, value in (("anthropic", FAKE_KEY), ("openai", OPENAI_KEY)):
        keys[family] = tmp_path / f"{family}.key"
        keys[family].write_text(value + "\n")
        keys[family].chmod(0o600)
    openai = FakeOpenAI()
    try:
        plan = codex_solver_plan(tmp_path, fake, openai,
                                 secrets={family: {"file": str(path)} for family, path in keys.items()})
        plan["scheduler"] = {"backend": "slurm", "lanes": {"cpu": {"partition": "cpu", "time": "10"},
                                                           "gpu": {"partition": "gpu", "time": "10"}}}
        env = {"SLURM_CONF": str(slurm_cluster.conf)}     # keys come from [secrets], not the environment
        d = tmp_path / "camp"
        sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d), env=env)
        tick_until_done(d, env=env, timeout=300, pause=0.5)
        assert record(d, "pr-0").job_id.isdigit()
        solver = assert_codex_solver_campaign_verified(d)
        assert solver["isolation"] == "bwrap" and solver["network"] == "api"
        argv = json.loads((run_dir(d, "pr-0") / "sessions" / "0003-solver" / "argv.json").read_text())["argv"]
        assert argv[0] == native_binary("codex") and not argv[0].endswith(".js")
        assert argv[argv.index("-s") + 1] == "danger-full-access"     # ours encloses it
        assert all(r["auth"] for r in openai.requests)
    finally:
        openai.close()
