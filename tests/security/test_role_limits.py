"""Per-role resource bounds: a role manifest's `[limits]` replaces the plan's `[limits]` keys it names,
for that role's sessions only. Real sandboxed sessions: the same memory-hungry program exceeds the
author's own bound and is stopped with the reason, while the solver (plan defaults) completes."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from roles import load_roles_dir, manifest_sha256
from runstate.errors import ConfigError
from sweep.models.plan import LimitSettings
from sweep.providers.local import LocalProvider
from sweep.runtimes import SessionRequest, run_session

ROLES = Path(__file__).resolve().parents[2] / "roles"
# ~300 MB really touched (bytearray zero-fills), then a line the test looks for
HUNGRY = "x = bytearray(300 << 20)\nprint('held 300 MB', flush=True)"


def roles_with_author_limit(root: Path) -> Path:
    d = root / "roles"
    shutil.copytree(ROLES, d, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    with open(d / "author.toml", "a", encoding="utf-8") as fh:
        fh.write("\n[limits]\nmemory_mb = 128\n")
    return d


def session(root: Path, roles_dir: Path, role: str, plan: LimitSettings):
    spec = load_roles_dir(roles_dir)[role]
    run = root / "campaign" / "runs" / f"limits-{role}"
    workspace = run / "work" / role
    for sub in ("repo", "task"):
        (workspace / sub).mkdir(parents=True)
    argv = [sys.executable, "-c", HUNGRY, "{tools}", "{max_turns}", "{cost_cap_usd}"]
    req = SessionRequest(role=spec, manifest_sha256=manifest_sha256(roles_dir / f"{role}.toml"), runtime="command",
                         runtime_options={"argv": argv, "network": "none"}, workspace=workspace,
                         session_dir=run / "sessions" / f"0001-{role}", prompt="go", inputs={},
                         # what the controller hands a session (sweep/controller/phases.py _limits)
                         limits=plan.for_role(spec.limits.overrides()).to_limits())
    return run_session(req, LocalProvider(isolation="bwrap", kill_grace_s=1.0)), req


def test_a_role_over_its_own_limit_is_stopped_while_another_role_under_the_plan_default_passes(targets):
    roles_dir = roles_with_author_limit(targets.root)
    plan = LimitSettings(memory_mb=1024)
    author, author_req = session(targets.root, roles_dir, "author", plan)
    solver, solver_req = session(targets.root, roles_dir, "solver", plan)
    assert author.status == "failed" and author.reason == "limit_memory", (author.reason, author.evidence)
    assert "held 300 MB" not in (author_req.session_dir / "stdout.txt").read_text()
    assert solver.ok, (solver.status, solver.reason, solver.evidence)
    assert "held 300 MB" in (solver_req.session_dir / "stdout.txt").read_text()
    assert author_req.limits.memory_bytes == 128 << 20 and solver_req.limits.memory_bytes == 1024 << 20
    # the keys the role does not name keep the plan's values
    assert author_req.limits.processes == plan.processes and author_req.limits.tmp_bytes == plan.tmp_mb << 20


def test_a_role_limit_below_the_floor_is_refused_at_load_naming_the_manifest(tmp_path):
    d = tmp_path / "roles"
    shutil.copytree(ROLES, d, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    with open(d / "solver.toml", "a", encoding="utf-8") as fh:
        fh.write("\n[limits]\nmemory_mb = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_roles_dir(d)
    assert "solver.toml" in str(caught.value) and "memory_mb" in str(caught.value), str(caught.value)
