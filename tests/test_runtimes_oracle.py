"""The oracle and nop runtimes end to end on real git repositories: a PR becomes a Harbor task that
the oracle solver solves (reward 1) and nop does not (reward 0); PRs that cannot become tasks are
refused with a reason; hostile titles and file names do no harm."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from roles import load_roles_dir, manifest_sha256, shipped_manifests_dir, validate_instance
from sweep.harbor import gates_passed, run_trial, validate_bundle
from sweep.providers.local import LocalProvider
from sweep.providers.local.bwrap import probe_bwrap
from sweep.runtimes import SessionRequest, run_session
from tests.gitrepos import make_pr_without_tests, make_verified_pr

HAVE_BWRAP = probe_bwrap()[0] is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not usable here (.ci/run installs it)")
ISOLATIONS = [pytest.param("bwrap", marks=needs_bwrap), "none"]
ROLES = load_roles_dir(shipped_manifests_dir())
SHA = {name: manifest_sha256(spec.source_path) for name, spec in ROLES.items()}
PASSING_GATES = {"valid": {"ok": True}, "reference": {"ok": True, "detail": "reward 1"},
                 "empty": {"ok": True, "detail": "reward 0"}, "repeat": {"ok": True}}


class Run:
    """A run directory with numbered sessions, like the controller's."""

    def __init__(self, root: Path, isolation: str) -> None:
        self.root = root
        self.provider = LocalProvider(isolation=isolation, kill_grace_s=1.0)
        self.count = 0

    def session(self, role: str, runtime: str, workspace: Path, inputs: dict, prompt: str = "go"):
        self.count += 1
        workspace.mkdir(parents=True, exist_ok=True)
        req = SessionRequest(role=ROLES[role], manifest_sha256=SHA[role], runtime=runtime, runtime_options={},
                             workspace=workspace, session_dir=self.root / "sessions" / f"{self.count:04d}-{role}",
                             prompt=prompt, inputs=inputs)
        return run_session(req, self.provider)

    def author(self, source: dict, runtime: str = "oracle"):
        ws = self.root / "ws-author"
        return self.session("author", runtime, ws, {"source": source}), ws / "task"

    def solve(self, bundle: Path, runtime: str, name: str):
        ws = self.root / f"ws-{name}"
        ws.mkdir()
        shutil.copytree(bundle / "environment" / "repo", ws / "repo")
        shutil.copy(bundle / "instruction.md", ws / "instruction.md")
        inputs = {"reference_solution": str(bundle / "solution")} if runtime == "oracle" else {}
        return self.session("solver", runtime, ws, inputs), ws / "repo"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_oracle_task_scores_1_with_the_oracle_solver_and_0_with_nop(tmp_path, isolation):
    source = make_verified_pr(tmp_path / "repos")
    run = Run(tmp_path / "run", isolation)
    authored, bundle = run.author(source)
    assert authored.status == "ok", authored.evidence
    assert authored.isolation == isolation and authored.turns == 0 and authored.cost_usd == 0.0
    assert validate_bundle(bundle) == []
    assert authored.report["test_files"] == ["tests/test_mathx.py"]
    assert authored.report["solution_files"] == ["mathx.py"]
    assert all(p == "task" or p.startswith("task/") for p in authored.changed_paths)

    solved, solved_repo = run.solve(bundle, "oracle", "oracle-solver")
    assert solved.status == "ok", solved.evidence
    idle, idle_repo = run.solve(bundle, "nop", "nop-solver")
    assert idle.status == "ok"

    oracle_trial = run_trial(bundle, solved_repo, provider=run.provider, workdir=tmp_path / "t-oracle", timeout_s=120)
    nop_trial = run_trial(bundle, idle_repo, provider=run.provider, workdir=tmp_path / "t-nop", timeout_s=120)
    assert (oracle_trial.reward, nop_trial.reward) == (1.0, 0.0), (oracle_trial.detail, nop_trial.detail)
    assert oracle_trial.environment_fidelity == "host"
    ref = run_trial(bundle, "reference", provider=run.provider, workdir=tmp_path / "t-ref", timeout_s=120)
    assert ref.reward == 1.0
    assert run_trial(bundle, "empty", provider=run.provider, workdir=tmp_path / "t-empty", timeout_s=120).reward == 0.0


def test_nop_author_writes_no_bundle(tmp_path):
    run = Run(tmp_path / "run", "none")
    result, bundle = run.author(make_verified_pr(tmp_path / "repos"), runtime="nop")
    assert result.status == "ok" and result.changed_paths == []
    assert validate_bundle(bundle)     # an empty task/ is not a task: the valid gate will say so


def test_pr_without_tests_fails_the_oracle_author_with_a_clear_reason(tmp_path):
    run = Run(tmp_path / "run", "bwrap" if HAVE_BWRAP else "none")
    result, bundle = run.author(make_pr_without_tests(tmp_path / "repos"))
    assert result.status == "failed" and result.failure_class == "failure"
    assert result.reason == "no_test_changes"
    assert "changes no test file" in result.evidence
    assert list(bundle.iterdir()) == []      # nothing half-written
    record = json.loads((run.root / "sessions" / "0001-author" / "result.json").read_text())
    assert record["reason"] == "no_test_changes"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_hostile_title_body_and_file_names_do_no_harm(tmp_path, isolation):
    pwned = tmp_path / "pwned"
    title = f"Fix clamp $(touch {pwned}-1) `touch {pwned}-2` '; touch {pwned}-3; echo '"
    body = f'He said "$(touch {pwned}-4)"\n\n```sh\ntouch {pwned}-5\n```\n'
    hostile_test = f"tests/test_$(touch {pwned.name}-6) `id`.py"
    hostile_code = f"docs/$(touch {pwned.name}-7);x.md"
    source = make_verified_pr(tmp_path / "repos", title=title, body=body,
                              extra_files={hostile_test: "# not importable, only copied\n",
                                           hostile_code: "doc\n"})
    run = Run(tmp_path / "run", isolation)
    authored, bundle = run.author(source)
    assert authored.status == "ok", authored.evidence
    assert validate_bundle(bundle) == []
    assert hostile_test in (bundle / "tests" / "test_files.txt").read_text().splitlines()
    assert (bundle / "tests" / "files" / hostile_test).is_file()
    instruction = (bundle / "instruction.md").read_text()
    assert "`touch" in instruction and f"$(touch {pwned}-1)" in instruction   # kept as text
    reference = run_trial(bundle, "reference", provider=run.provider, workdir=tmp_path / "t-ref", timeout_s=120)
    empty = run_trial(bundle, "empty", provider=run.provider, workdir=tmp_path / "t-empty", timeout_s=120)
    assert (reference.reward, empty.reward) == (1.0, 0.0), reference.detail
    assert (tmp_path / "t-ref" / "repo" / hostile_code).read_text() == "doc\n"   # solve.sh applied it
    assert (tmp_path / "t-ref" / "repo" / hostile_test).is_file()                # test.sh installed it
    leftovers = [p for p in tmp_path.rglob("*pwned*")] + [p for p in Path("/tmp").glob("pwned*")]
    assert [p for p in leftovers if "$(" not in p.name] == []


def test_a_path_with_a_newline_is_refused_by_the_author(tmp_path):
    source = make_verified_pr(tmp_path / "repos", extra_files={"tests/evil\nname.py": "x = 1\n"})
    run = Run(tmp_path / "run", "none")
    result, bundle = run.author(source)
    assert result.status == "failed" and result.reason == "unsafe_path"
    assert "control character" in result.evidence


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_oracle_reviewer_accepts_exactly_when_the_gates_passed(tmp_path, isolation):
    run = Run(tmp_path / "run", isolation)
    authored, bundle = run.author(make_verified_pr(tmp_path / "repos"))
    review_ws = tmp_path / "ws-review"
    shutil.copytree(bundle, review_ws / "task")
    schema = ROLES["reviewer"].output_schema

    accepted = run.session("reviewer", "oracle", review_ws,
                           {"gates": PASSING_GATES, "bundle_dir": str(review_ws / "task")})
    assert accepted.status == "ok" and accepted.structured_output["verdict"] == "accept"
    assert validate_instance(accepted.structured_output, schema) == []

    failing = {**PASSING_GATES, "empty": {"ok": False, "detail": "the empty solution scored 1"}}
    rejected = run.session("reviewer", "oracle", review_ws, {"gates": failing, "bundle_dir": str(review_ws / "task")})
    assert rejected.status == "ok" and rejected.structured_output["verdict"] == "reject"
    assert any("empty" in f and "scored 1" in f for f in rejected.structured_output["findings"])
    assert validate_instance(rejected.structured_output, schema) == []

    nothing = run.session("reviewer", "oracle", review_ws, {"bundle_dir": str(review_ws / "task")})
    assert nothing.structured_output["verdict"] == "reject"
    assert rejected.changed_paths == [] and rejected.audit_violations == []


def test_nop_reviewer_gives_no_verdict_and_fails(tmp_path):
    run = Run(tmp_path / "run", "none")
    result = run.session("reviewer", "nop", tmp_path / "ws", {"gates": PASSING_GATES})
    assert result.status == "failed" and result.reason == "no_structured_output"


def test_oracle_solver_without_a_reference_fails_with_a_reason(tmp_path):
    run = Run(tmp_path / "run", "none")
    (tmp_path / "ws" / "repo").mkdir(parents=True)
    result = run.session("solver", "oracle", tmp_path / "ws", {"reference_solution": None})
    assert result.status == "failed" and result.reason == "no_reference_solution"


def test_gates_passed_needs_every_gate_ok():
    assert gates_passed(PASSING_GATES) == (True, [])
    assert gates_passed({**PASSING_GATES, "repeat": False}) == (False, ["repeat"])
    assert gates_passed({"valid": {"ok": "yes"}}) == (False, ["valid"])
    assert gates_passed({})[0] is False and gates_passed(None)[0] is False
