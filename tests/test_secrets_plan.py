"""The plan's [secrets] table, through the real `sweep init`: references only, files checked."""
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from sweep.harbor.samples import make_pr_repo
from tests.campaigns import sweep, write_plan
from tests.fakes.runs import candidate, local_plan

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def scratch():
    """Outside /tmp, like a campaign on a cluster's shared filesystem."""
    base = REPO / ".scratch"
    base.mkdir(exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="secrets-plan-", dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def plan_with(scratch: Path, secrets: dict) -> Path:
    src = make_pr_repo(scratch / "repos", "verified", name="mathx")
    return write_plan(scratch / "plan.json", local_plan([candidate("pr-0", src)], secrets=secrets))


def key_file(scratch: Path, mode: int) -> tuple[Path, str]:
    value = "sk-ant-" + uuid.uuid4().hex
    path = scratch / "keys" / f"anthropic-{mode:o}.key"
    path.parent.mkdir(exist_ok=True)
    path.write_text(value + "\n")
    os.chmod(path, mode)
    return path, value


def test_a_secret_file_readable_by_others_is_refused_naming_the_field_and_the_file(scratch):
    path, _ = key_file(scratch, 0o644)
    plan = plan_with(scratch, {"anthropic": {"file": str(path)}})
    done = sweep("init", str(plan), "--campaign", str(scratch / "camp"), check=False)
    assert done.returncode == 2
    assert "secrets.anthropic.file" in done.stderr and str(path) in done.stderr and "0644" in done.stderr
    assert not (scratch / "camp").exists()          # nothing half-written


def test_a_secret_file_of_another_user_is_refused(scratch):
    if os.getuid() != 0:
        pytest.skip("making a file owned by another user needs root")
    path, _ = key_file(scratch, 0o600)
    os.chown(path, 65534, 65534)
    done = sweep("init", str(plan_with(scratch, {"anthropic": {"file": str(path)}})),
                 "--campaign", str(scratch / "camp"), check=False)
    assert done.returncode == 2 and "secrets.anthropic.file" in done.stderr and "owned by uid 65534" in done.stderr


def test_a_0600_file_is_frozen_by_path_and_its_value_is_nowhere_in_the_campaign(scratch):
    path, value = key_file(scratch, 0o600)
    rel = os.path.relpath(path, scratch)                 # relative to the plan: frozen absolute
    sweep("init", str(plan_with(scratch, {"anthropic": {"file": rel}})), "--campaign", str(scratch / "camp"))
    text = (scratch / "camp" / "campaign.toml").read_text()
    assert str(path) in text
    for f in (scratch / "camp").rglob("*"):
        if f.is_file():
            assert value.encode() not in f.read_bytes(), f


def test_an_env_family_is_frozen_by_name(scratch):
    value = "sk-openai-" + uuid.uuid4().hex
    plan = plan_with(scratch, {"openai": {"env": "MY_OPENAI_KEY", "variable": "OPENAI_API_KEY"}})
    sweep("init", str(plan), "--campaign", str(scratch / "camp"), env={"MY_OPENAI_KEY": value})
    text = (scratch / "camp" / "campaign.toml").read_text()
    assert "MY_OPENAI_KEY" in text and value not in text


@pytest.mark.parametrize("secrets, field", [
    ({"google": {"env": "X"}}, "secrets"),
    ({"anthropic": {"env": "A", "file": "/x"}}, "secrets.anthropic"),
    ({"anthropic": {}}, "secrets.anthropic"),
    ({"anthropic": {"env": "A", "variable": "OPENAI_API_KEY"}}, "secrets"),
    ({"anthropic": {"env": "NOT A NAME"}}, "secrets.anthropic"),
])
def test_a_malformed_secrets_table_is_refused(scratch, secrets, field):
    done = sweep("init", str(plan_with(scratch, secrets)), "--campaign", str(scratch / "camp"), check=False)
    assert done.returncode == 2, done.stderr
    assert f": {field}" in done.stderr, done.stderr


# --- a runtime that needs a key names its family in [secrets] --------------------------------------

def test_missing_key_families_follow_the_runtime_not_the_manifest():
    from sweep.models.plan import PlanSettings
    from sweep.runtimes.preflight import missing_key_families

    def missing(runtimes: dict, secrets: dict) -> list:
        settings = PlanSettings.model_validate({"name": "t", "target_verified": 1, "defaults": {"runtimes": runtimes},
                                                "secrets": secrets})
        return missing_key_families(settings)
    agents = {"author": "claude-code", "reviewer": "claude-code", "solver": "codex"}
    # the shipped solver.toml says anthropic; a codex solver uses openai's key all the same
    assert missing(agents, {"anthropic": {"env": "A"}}) == [("defaults.runtimes.solver", "solver", "codex", "openai")]
    assert missing(agents, {"openai": {"env": "O"}}) == [("defaults.runtimes.author", "author", "claude-code",
                                                           "anthropic"),
                                                          ("defaults.runtimes.reviewer", "reviewer", "claude-code",
                                                           "anthropic")]
    assert missing(agents, {"anthropic": {"env": "A"}, "openai": {"env": "O"}}) == []
    # runtimes that take no key (oracle, nop) or any family the manifest names (command) need no entry
    assert missing({"author": "oracle", "reviewer": "nop", "solver": "command"}, {}) == []


def test_init_refuses_a_codex_solver_without_an_openai_secret_naming_role_runtime_and_family(scratch):
    src = make_pr_repo(scratch / "repos", "verified", name="mathx")
    agents = {"author": "claude-code", "reviewer": "claude-code", "solver": "claude-code"}
    other = make_pr_repo(scratch / "repos", "verified", name="mathy")
    plan = local_plan([candidate("pr-0", src), candidate("pr-1", other, runtimes={"solver": "codex"})],
                      defaults={"runtimes": agents}, secrets={"anthropic": {"env": "MY_ANTHROPIC_KEY"}})
    done = sweep("init", str(write_plan(scratch / "plan.json", plan)), "--campaign", str(scratch / "camp"),
                 check=False)
    assert done.returncode == 2, done.stderr
    assert "secrets.openai" in done.stderr and "candidates.1.runtimes.solver" in done.stderr, done.stderr
    assert "role solver is played by runtime codex" in done.stderr and "'openai'" in done.stderr, done.stderr
    assert 'openai = { env = "OPENAI_API_KEY" }' in done.stderr, done.stderr
    assert not (scratch / "camp").exists()          # nothing half-written
