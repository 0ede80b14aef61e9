"""Attacks from an agent session: the `command` runtime running a hostile program as the solver,
through run_session and the real bubblewrap sandbox. Each test checks one attack failed AND the
session still ended as it would have (ok: the program exits 0; the audit clean).

Run once per module (the attacks are independent and read-only for the host; one session keeps the
suite fast), each attack asserted by its own test.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from roles import load_roles_dir, manifest_sha256
from sweep.providers.local import LocalProvider
from sweep.runtimes import SessionRequest, run_session
from tests.security.conftest import HOSTILE, attack_lines

ROLES = Path(__file__).resolve().parents[2] / "roles"


@pytest.fixture(scope="module")
def solver_session(targets):
    run = targets.campaign / "runs" / "me"
    solution = run / "task" / "solution"
    solution.mkdir(parents=True)
    (solution / "solution.patch").write_text("--- the reference solution ---\n" + targets.canaries[0] + "\n")
    workspace = run / "work" / "solve-r0001-0"
    (workspace / "repo").mkdir(parents=True)
    (workspace / "repo" / "code.py").write_text("x = 1\n")
    session_dir = run / "sessions" / "0001-solver"
    spec = load_roles_dir(ROLES)["solver"]
    argv = [sys.executable, str(HOSTILE),
            json.dumps(targets.argv_json(solution=str(solution / "solution.patch"), own_run="me")),
            "{tools}", "{max_turns}", "{cost_cap_usd}"]
    req = SessionRequest(role=spec, manifest_sha256=manifest_sha256(ROLES / "solver.toml"), runtime="command",
                         runtime_options={"argv": argv, "network": "none"}, workspace=workspace,
                         session_dir=session_dir, prompt="solve it", inputs={})
    result = run_session(req, LocalProvider(isolation="bwrap", kill_grace_s=1.0))
    stdout = (session_dir / "stdout.txt").read_text()
    return result, attack_lines(stdout), stdout


ATTACKS = ["read_operator_home", "read_key_file", "read_shadow", "read_munge_key", "list_host_dirs", "list_campaign_runs", "read_other_run",
           "read_solution", "connect_run_socket", "connect_abstract_socket", "connect_loopback_tcp",
           "sbatch", "write_outside_scope", "write_campaign"]


def test_the_session_still_ends_ok(solver_session):
    result, lines, stdout = solver_session
    assert result.status == "ok", result.evidence
    assert result.isolation == "bwrap" and result.network == "none"
    assert set(lines) == set(ATTACKS), stdout


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_is_held(solver_session, targets, attack):
    result, lines, stdout = solver_session
    verdict, detail = lines[attack]
    assert verdict == "HELD", f"{attack}: {detail}"


def test_no_canary_reached_any_record(solver_session, targets):
    assert targets.canary_found_under(targets.campaign / "runs" / "me" / "sessions") == []


def test_no_host_listener_saw_a_connection(solver_session, targets):
    assert targets.nothing_connected()


def test_nothing_was_written_outside_the_scope(solver_session, targets):
    assert not (targets.root / "written-by-sandbox").exists()
    assert not (targets.campaign / "written-by-sandbox").exists()
