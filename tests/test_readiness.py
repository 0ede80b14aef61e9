"""Readiness: a test command the job environment cannot run is caught before anything is paid.

Whole campaigns on the local backend with the real controller, the real sandbox and real git
repositories: `sweep init` warns, the first controller of each run parks it with the cause before
the author's first session (no session directory exists, nothing is reserved). The plan's
`test_runner` is checked without a campaign: the readiness check itself, init's warning, the prompt.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runstate import load_record, run_dir
from tests.campaigns import status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import local_plan, wait_until
from tests.gitrepos import make_verified_pr
from sweep.harbor.samples import _commit, _new_repo

VENV = Path(sys.prefix)


def _plan(tmp_path: Path, src: dict, command: str, **settings) -> Path:
    plan = local_plan([{"id": "r1", "repo": src["repo"], "base": src["base"], "head": src["head"],
                        "options": {"test_command": command, **settings.pop("options", {})}}], **settings)
    return write_plan(tmp_path / "plan.json", plan)


def _parked(camp: Path) -> dict:
    def parked():
        sweep("tick", "--campaign", str(camp))
        rec = load_record(run_dir(camp, "r1")).value
        return rec if rec is not None and rec.state.value == "queued" and rec.last_error else None
    rec = wait_until("the run to park", parked, timeout=120, poll=0.5)
    return rec.model_dump(mode="json")


def _no_session_ran(camp: Path) -> None:
    rdir = run_dir(camp, "r1")
    assert not (rdir / "sessions").exists() or not any((rdir / "sessions").iterdir())
    spend = json.loads((rdir / "spend.json").read_text()) if (rdir / "spend.json").exists() else {}
    assert not spend.get("reservations") and not spend.get("settled")


def test_a_program_that_is_not_there_parks_the_run_before_the_author(tmp_path):
    src = make_verified_pr(tmp_path / "repos")
    camp = tmp_path / "camp"
    r = sweep("init", str(_plan(tmp_path, src, "no-such-test-runner --all")), "--campaign", str(camp))
    assert "test_command_not_found" in r.stderr and "'no-such-test-runner' is not found" in r.stderr
    rec = _parked(camp)
    assert rec["parked_role"] == "author" and rec["attempts"] == 0
    assert "test_command_not_found: 'no-such-test-runner' is not found in the job environment" in rec["last_error"]
    _no_session_ran(camp)
    # the park is the author role's configuration error: status shows the cause
    st = status_json(camp)
    assert "test_command_not_found" in json.dumps(st)


def _system_python_has_pytest() -> bool:
    return subprocess.run(["/usr/bin/python3", "-c", "import pytest"], capture_output=True).returncode == 0


@pytest.mark.skipif(_system_python_has_pytest(), reason="the system python3 has pytest here")
def test_a_python_without_pytest_in_the_job_environment_parks_with_that_cause(tmp_path):
    """The scrontab case: the job environment's python3 is the system's, which has no pytest."""
    src = make_verified_pr(tmp_path / "repos")
    camp = tmp_path / "camp"
    # declared, but with no toolchain: PATH is the system's only, whatever the tick's shell has
    sweep("init", str(_plan(tmp_path, src, "python3 -m pytest -q", environment={})), "--campaign", str(camp))
    rec = _parked(camp)
    assert "test_command_not_found: python3 (/usr/bin/python3) has no pytest in the job environment" \
        in rec["last_error"], rec["last_error"]
    _no_session_ran(camp)


def test_the_declared_venv_makes_the_same_pr_verified(tmp_path):
    """`.venv/bin/sweep tick` without an activated venv: the declared prefix is what the tests get."""
    src = make_verified_pr(tmp_path / "repos")
    camp = tmp_path / "camp"
    plan = _plan(tmp_path, src, "python3 -m pytest -q",
                 environment={"toolchains": {"python": {"prefix": str(VENV)}}})
    r = sweep("init", str(plan), "--campaign", str(camp))
    assert "readiness" not in r.stderr, r.stderr
    st = tick_until_done(camp, env={"PATH": "/usr/bin:/bin"}, timeout=240)
    assert st["outcomes"] == {"verified": 1}, json.dumps(st)[:2000]
    events = [json.loads(line) for line in (run_dir(camp, "r1") / "events.jsonl").read_text().splitlines()]
    ready = [e for e in events if e["kind"] == "readiness"]
    assert len(ready) == 1 and ready[0]["detail"].startswith(f"ok: {VENV}/bin/python3 ran")


def test_shell_operators_are_refused_with_the_workdir_alternative(tmp_path):
    src = make_verified_pr(tmp_path / "repos")
    r = sweep("init", str(_plan(tmp_path, src, "cd sub && python3 -m unittest -q")), "--campaign",
              str(tmp_path / "camp"), check=False)
    assert r.returncode == 2
    assert "candidates.0.options.test_command" in r.stderr
    assert "test_workdir = 'sub' and test_command = 'python3 -m unittest -q'" in r.stderr
    for command in ("python3 -m unittest | tee out", "python3 -m unittest; true", "FOO=1 python3 -m unittest"):
        r = sweep("init", str(_plan(tmp_path, src, command)), "--campaign", str(tmp_path / "camp"), check=False)
        assert r.returncode == 2 and "test_command" in r.stderr, (command, r.stderr)
    assert not (tmp_path / "camp").exists()


SUB_CODE_BUGGY = "def clamp(x, lo, hi):\n    return max(lo, x)\n"
SUB_CODE_FIXED = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
SUB_TEST_BASE = ("import unittest\nfrom clampx import clamp\n\n\nclass ClampTest(unittest.TestCase):\n"
                 "    def test_below(self):\n        self.assertEqual(clamp(-1, 0, 10), 0)\n")
SUB_TEST_ABOVE = "\n    def test_above(self):\n        self.assertEqual(clamp(42, 0, 10), 10)\n"


def test_a_test_workdir_runs_the_tests_in_a_subdirectory(tmp_path):
    repo = _new_repo(tmp_path / "repos", "mono")
    base = _commit(repo, {"README.md": "monorepo\n", "pkg/clampx.py": SUB_CODE_BUGGY,
                          "pkg/tests/__init__.py": "", "pkg/tests/test_clampx.py": SUB_TEST_BASE},
                   "base", "2024-01-01T00:00:00+00:00")
    head = _commit(repo, {"pkg/clampx.py": SUB_CODE_FIXED, "pkg/tests/test_clampx.py": SUB_TEST_BASE + SUB_TEST_ABOVE},
                   "Fix clamp above the range", "2024-01-02T00:00:00+00:00")
    src = {"repo": str(repo), "base": base, "head": head}
    camp = tmp_path / "camp"
    sweep("init", str(_plan(tmp_path, src, "python3 -m unittest -q", options={"test_workdir": "pkg"})),
          "--campaign", str(camp))
    st = tick_until_done(camp, timeout=240)
    assert st["outcomes"] == {"verified": 1}, json.dumps(st)[:2000]
    assert (run_dir(camp, "r1") / "task" / "tests" / "test_workdir.txt").read_text() == "pkg\n"
    # without it the same command finds no test at the repository's root: init says so
    r = sweep("init", str(_plan(tmp_path, src, "python3 -m unittest -q")), "--campaign", str(tmp_path / "c2"))
    assert "no_tests_collected" in r.stderr, r.stderr


@pytest.mark.skipif(_system_python_has_pytest(), reason="the system python3 has pytest here")
def test_doctor_names_what_changes_under_scrontab_and_a_declared_environment_removes_it(tmp_path):
    src = make_verified_pr(tmp_path / "repos")
    shell = {"PATH": f"{VENV}/bin:/usr/bin:/bin"}          # a shell with the venv active
    camp = tmp_path / "camp"
    sweep("init", str(_plan(tmp_path, src, "python3 -m pytest -q")), "--campaign", str(camp), env=shell)
    r = sweep("doctor", "--no-network", "--campaign", str(camp), env=shell, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"PATH (session, trial): {VENV}/bin:/usr/bin:/bin" in r.stdout
    assert f"resolves to {VENV}/bin/python3 from this shell but to /usr/bin/python3 under scrontab" in r.stdout
    assert "has no pytest in the job environment" in r.stdout      # the readiness there, with its cause

    declared = tmp_path / "declared"
    plan = _plan(tmp_path, src, "python3 -m pytest -q", environment={"toolchains": {"python": {"prefix": str(VENV)}}})
    sweep("init", str(plan), "--campaign", str(declared), env=shell)
    r = sweep("doctor", "--no-network", "--campaign", str(declared), env={"PATH": "/usr/bin:/bin"}, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PATH (session, trial): {VENV}/bin:/usr/local/bin:/usr/bin:/bin" in r.stdout
    # the venv's own interpreter is bound too when it lives outside /usr (a pyenv python)
    assert re.search(rf"ok     environment\.toolchains\.python: path -; bind [^;]+; prefix {re.escape(str(VENV))}",
                     r.stdout), r.stdout
    assert f"program {VENV}/bin/python3; readiness ok" in r.stdout
    assert "under scrontab" not in r.stdout


CONTRACT_AUTHOR = Path(__file__).resolve().parent / "fakes" / "contract_author.py"


def test_the_author_is_told_the_contract_and_a_repair_starts_from_its_previous_bundle(tmp_path):
    """An agent author (the command runtime) on a PR whose test passes before the fix: its first
    bundle fails the gates; the repair session finds that bundle in task/ and is told what failed."""
    from tests.gitrepos import make_pr_tests_pass_before
    src = make_pr_tests_pass_before(tmp_path / "repos")
    argv = [sys.executable, str(CONTRACT_AUTHOR), "--workspace", "{workspace}", "--prompt", "{prompt_file}",
            "--repo", src["repo"], "--tools", "{tools}", "--max-turns", "{max_turns}", "--cost-cap", "{cost_cap_usd}"]
    camp = tmp_path / "camp"
    plan = _plan(tmp_path, src, src["test_command"],
                 defaults={"quality": {"max_repairs": 1, "gate_repeats": 1, "run_rollout": False},
                           "runtimes": {"author": "command"}, "runtime_options": {"author": {"argv": argv}}})
    sweep("init", str(plan), "--campaign", str(camp))
    tick_until_done(camp, timeout=300)
    rec = load_record(run_dir(camp, "r1")).value
    assert rec is not None and rec.outcome is not None and rec.outcome.value == "generated_unverified", rec
    seen = run_dir(camp, "r1") / "task" / "seen"
    first = json.loads((seen / "revision-1.json").read_text())
    second = json.loads((seen / "revision-2.json").read_text())
    # the contract, with this PR's values, in the first prompt
    assert f"- Test command (the plan's; write it to tests/test_command.txt, one argument a line): " \
           f"`{src['test_command']}`" in first["prompt"]
    assert "How per-test results are taken: per-test results come from" in first["prompt"]
    assert "sweep generates tests/test.sh (the harness) itself" in first["prompt"]
    assert "FAIL_TO_PASS" in first["prompt"] and "must be non-empty" in first["prompt"]
    assert first["before"] == [] and "# Repair" not in first["prompt"]
    # the repair: it starts from the previous bundle, and is told what failed
    assert "# Repair (revision 2): your previous bundle is in task/; start from it" in second["prompt"]
    assert "gate empty" in second["prompt"] and "gate fail_to_pass" in second["prompt"]
    assert {"tests/test.sh", "task.toml", "seen/revision-1.json"} <= set(second["before"])


# A test command no runner detects (a script printing TAP): the plan's `test_runner` names its runner.
TAP_SCRIPT = "print('1..2')\nprint('ok 1 - adds')\nprint('ok 2 - subtracts')\n"


@pytest.fixture(scope="module")
def tap_pr(tmp_path_factory) -> dict:
    repo = _new_repo(tmp_path_factory.mktemp("tap"), "tap")
    base = _commit(repo, {"calc.py": "X = 1\n", "tests/run_tap.py": TAP_SCRIPT}, "base", "2024-01-01T00:00:00+00:00")
    head = _commit(repo, {"calc.py": "X = 2\n", "tests/run_tap.py": TAP_SCRIPT.replace("1..2", "1..3")
                          + "print('ok 3 - new')\n"}, "fix", "2024-01-02T00:00:00+00:00")
    return {"repo": str(repo), "base": base, "head": head, "command": "python3 tests/run_tap.py"}


def test_readiness_reads_results_with_the_plans_runner_and_names_an_unknown_one(tap_pr):
    """Without `test_runner` no runner reads the command's output: the cause says which program and
    which runners there are (it said "no per-test results (None)"); with it, init's check (which
    ignored the plan's runner and warned on a command the gates run fine) reads the TAP."""
    from sweep.providers import get_provider
    from sweep.readiness import check_local_candidate
    provider = get_provider("local", isolation="bwrap", environment=None)
    args = (tap_pr["repo"], tap_pr["base"], tap_pr["head"], tap_pr["command"], provider)
    unknown = check_local_candidate(*args)
    assert (unknown.ok, unknown.cause) == (False, "no_per_test_results"), unknown
    assert "no runner recognises the test command's program 'python3'" in unknown.detail
    assert "test_runner" in unknown.detail and "tap (TAP" in unknown.detail, unknown.detail
    named = check_local_candidate(*args, test_runner="tap")
    assert (named.ok, named.tests) == (True, 2), named


def test_init_checks_readiness_with_the_plans_runner(tap_pr, tmp_path):
    plan = _plan(tmp_path, tap_pr, tap_pr["command"], options={"test_runner": "tap"})
    r = sweep("init", str(plan), "--campaign", str(tmp_path / "camp"))
    assert "readiness" not in r.stderr, r.stderr
    plan = _plan(tmp_path, tap_pr, tap_pr["command"])
    r = sweep("init", str(plan), "--campaign", str(tmp_path / "camp2"))
    assert "readiness: no_per_test_results: no runner recognises" in r.stderr, r.stderr


def test_the_authors_prompt_names_the_plans_runner(tap_pr):
    from sweep.controller.phases import _author_prompt
    from sweep.models.evidence import SourceEvidence
    src = SourceEvidence(repo=tap_pr["repo"], base=tap_pr["base"], head=tap_pr["head"],
                         test_command=tap_pr["command"], evidence_sha256="0" * 64)
    named = _author_prompt(src, [], 4096, test_runner="tap")
    assert "How per-test results are taken: per-test results come from the runner itself: tap (TAP" in named
    assert "no runner recognises this command" in _author_prompt(src, [], 4096)
