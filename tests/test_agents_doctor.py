"""`sweep init` refuses an agent CLI that is missing or cannot run; `sweep doctor` checks every agent
CLI of a campaign (installed, runs in the sandbox, version, key, endpoint)."""
from __future__ import annotations

from sweep.harbor.samples import make_pr_repo
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, needs_claude
from tests.campaigns import sweep, write_plan
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.runs import candidate, local_plan


def _plan(tmp_path, options: dict) -> object:
    src = make_pr_repo(tmp_path / "repos", "verified")
    plan = local_plan([candidate("pr-0", src, runtime_options={"author": options})],
                      defaults={"runtimes": {"author": "claude-code"}}, secrets=ENV_SECRETS)
    return write_plan(tmp_path / "plan.json", plan)


def test_init_refuses_a_missing_agent_binary(tmp_path):
    r = sweep("init", str(_plan(tmp_path, {"binary": "/nonexistent/claude"})), "--campaign", str(tmp_path / "c"),
              check=False)
    assert r.returncode == 2 and "not installed" in r.stderr and "candidates.0.runtimes.author" in r.stderr
    assert not (tmp_path / "c" / "campaign.toml").exists()


def test_init_refuses_bad_agent_options(tmp_path):
    r = sweep("init", str(_plan(tmp_path, {"max_retries": 99})), "--campaign", str(tmp_path / "c"), check=False)
    assert r.returncode == 2 and "max_retries" in r.stderr


@needs_claude
def test_doctor_checks_cli_key_and_endpoint(tmp_path):
    fake = FakeAnthropic()
    try:
        d = tmp_path / "c"
        sweep("init", str(_plan(tmp_path, {"base_url": fake.url("author")})), "--campaign", str(d),
              env={"ANTHROPIC_API_KEY": FAKE_KEY})
        ok = sweep("doctor", "--campaign", str(d), env={"ANTHROPIC_API_KEY": FAKE_KEY})
        assert "claude-code 2.1.197 runs in the sandbox" in ok.stdout
        assert f"endpoint 127.0.0.1:{fake.port} accepts connections" in ok.stdout
        port = fake.port
    finally:
        fake.close()
    down = sweep("doctor", "--campaign", str(d), env={"ANTHROPIC_API_KEY": FAKE_KEY}, check=False)
    assert down.returncode == 1 and f"127.0.0.1:{port} is unreachable" in down.stdout


def test_init_refuses_codex_as_the_read_only_reviewer(tmp_path):
    src = make_pr_repo(tmp_path / "repos", "verified")
    plan = local_plan([candidate("pr-0", src)], defaults={"runtimes": {"reviewer": "codex"}}, secrets=ENV_SECRETS)
    r = sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "c"), check=False)
    assert r.returncode == 2 and "cannot restrict an agent's tools" in r.stderr, r.stderr


@needs_claude
def test_doctor_runs_each_roles_command_line_in_the_sandbox(tmp_path):
    d = tmp_path / "c"
    sweep("init", str(_plan(tmp_path, {"base_url": "http://127.0.0.1:9"})), "--campaign", str(d),
          env={"ANTHROPIC_API_KEY": FAKE_KEY})
    out = sweep("doctor", "--no-network", "--campaign", str(d), env={"ANTHROPIC_API_KEY": FAKE_KEY}).stdout
    assert "the claude-code command line for role author is accepted" in out, out


def test_a_command_line_the_cli_refuses_is_a_config_error(tmp_path):
    # a CLI that rejects its flags (as a renamed flag in a new version would) and prints no event
    fake_cli = tmp_path / "bin" / "claude"
    fake_cli.parent.mkdir()
    fake_cli.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo '2.1.197 (Claude Code)'; exit 0; fi\n"
                        "echo \"error: unknown option '$2'\" >&2; exit 1\n")
    fake_cli.chmod(0o755)
    r = sweep("init", str(_plan(tmp_path, {"binary": str(fake_cli)})), "--campaign", str(tmp_path / "c"), check=False)
    assert r.returncode == 2 and "does not start" in r.stderr and "unknown option" in r.stderr, r.stderr
