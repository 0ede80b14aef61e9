"""Resource attacks from the REAL agent CLIs inside whole campaigns: one campaign per runtime (claude
author and reviewer; a claude-code or a codex solver), its campaign outside /tmp, run by `sweep tick`
and real controller processes under the plan's bounds.

The task asks for several blind rollouts. The fake model server picks what each rollout's solver
does from the rollout's own working directory (`work/solve-r0001-<k>`): rollouts 0-5 each have the
CLI's shell tool run one attack of tests/security/test_bounds.py (memory hog, fork bomb, disk fill,
a 200 MB file, a FIFO left in the repository, 200 MB of stdout), and the last rollout solves the
task honestly, after all of them, in the same campaign.

Asserted for each runtime: every attack was bounded and its rollout ended with the bound's reason in
the solve evidence (limit_memory, limit_processes, limit_workspace_bytes, unsafe_workspace naming
the FIFO; the 200 MB file and the 200 MB of stdout are cut inside the CLI's tool, so those sessions
end ok and their trial scores the unchanged repository 0); the honest rollout after them still
scores 1; and the run reaches the ending it has without the attacks (`verified`: the solver's
rollouts measure difficulty, they do not gate the task). The 10 GiB sparse file needs the file-size
bound lifted (test_agent_cli_bounds.py runs it in a single session); it is not repeated here.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from runstate import run_dir
from runstate.models import Outcome
from sweep.harbor.samples import make_pr_repo
from tests.agent_sessions import ENV_SECRETS, FAKE_KEY, needs_claude
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.agent_scripts import author_script, codex_solver_script, reviewer_script, solver_script
from tests.fakes.anthropic_api import FakeAnthropic, Script, text, tool_calls
from tests.fakes.openai_api import FakeOpenAI, say
from tests.fakes.openai_api import Script as CodexScript
from tests.fakes.openai_api import call as codex_call
from tests.fakes.runs import candidate, local_plan, record
from tests.security.test_agent_cli_bounds import attack_command
from tests.security.test_agent_clis import OPENAI_KEY, cli_roles, needs_codex
from tests.security.test_bounds import EXPECTED

pytestmark = [needs_claude, needs_codex]

RUNTIMES = ["claude-code", "codex"]
# rollout k runs ROLLOUTS[k]; None is the honest solver, last so it runs after every attack
ROLLOUTS: list[str | None] = ["memory", "fork", "disk", "big_file", "fifo", "stdout", None]
# the plan's bounds (every session and trial of the campaign): large enough for node or codex, which
# share the session's cgroup, small enough that each attack hits its bound at once
LIMITS = {"memory_mb": 1024, "processes": 160, "file_mb": 64, "workspace_mb": 100, "transcript_kb": 1024,
          "tmp_mb": 64}
# the rollout's `detail` in the solve evidence: the session's reason; ok sessions are scored
REASONS = {attack: EXPECTED[attack] for attack in ("memory", "fork", "disk", "fifo")}


class Rollouts:
    """Which rollout a request belongs to. The solver's working directory is the sandbox's /app in
    every rollout (its fixed view), so the fake server counts: the rollouts run one after another,
    and each session's first request is its step 0."""

    def __init__(self) -> None:
        self.started = 0
        self.lock = threading.Lock()

    def of(self, n: int) -> int:
        with self.lock:
            if n == 0:
                self.started += 1
            return self.started - 1


def claude_solver(src: dict) -> Script:
    honest = solver_script(src)
    assert honest.dynamic is not None

    rollouts = Rollouts()

    def step(request: dict, n: int) -> dict:
        attack = ROLLOUTS[rollouts.of(n)]
        if attack is None:
            return honest.dynamic(request, n)
        if n == 0:
            return tool_calls([("Bash", {"command": attack_command(attack), "description": attack,
                                         "timeout": 120_000})])
        return text("done")
    return Script(dynamic=step)


def codex_solver(src: dict) -> CodexScript:
    honest = codex_solver_script(src)

    rollouts = Rollouts()

    def step(request: dict, n: int) -> dict:
        attack = ROLLOUTS[rollouts.of(n)]
        if attack is None:
            return honest.steps[n] if n < len(honest.steps) else say("done")
        if n == 0:
            # yield_time_ms: codex hands a command still running after ~10 s back unfinished
            return codex_call("exec_command", {"cmd": attack_command(attack), "yield_time_ms": 60_000})
        return say("done")
    return CodexScript(dynamic=step)


class Played:
    def __init__(self, runtime: str, camp: Path) -> None:
        self.runtime = runtime
        self.camp = camp
        self.run = run_dir(camp, "pr-0")
        solve = json.loads((self.run / "evidence" / "solve-r0001.json").read_text())
        self.rollouts = {r["rollout"]: r for r in solve["rollouts"]}
        self.sessions = sorted((self.run / "sessions").glob("*-solver"))

    def session(self, k: int) -> Path:
        """Rollout k's solver session: the rollouts run one after another, one session each."""
        assert len(self.sessions) == len(ROLLOUTS), [s.name for s in self.sessions]
        return self.sessions[k]


def play(runtime: str, root: Path) -> Played:
    base = root / f"campaign-bounds-{runtime}"
    src = make_pr_repo(base / "repos", "verified")
    fake, openai = FakeAnthropic(), FakeOpenAI()
    try:
        runtimes, options = cli_roles(runtime, fake, openai)
        plan = local_plan([candidate("pr-0", src, runtime_options=options)],
                          defaults={"runtimes": runtimes, "quality": {"max_repairs": 0, "rollouts": len(ROLLOUTS)}},
                          max_spend_usd=50, limits=LIMITS, secrets=ENV_SECRETS)
        camp = base / "campaign"
        sweep("init", str(write_plan(base / "plan.json", plan)), "--campaign", str(camp),
              env={"ANTHROPIC_API_KEY": FAKE_KEY, "OPENAI_API_KEY": OPENAI_KEY})
        fake.script("author", author_script(src))
        fake.script("reviewer", reviewer_script())
        if runtime == "codex":
            openai.script("solver", codex_solver(src))
        else:
            fake.script("solver", claude_solver(src))
        tick_until_done(camp, env={"ANTHROPIC_API_KEY": FAKE_KEY, "OPENAI_API_KEY": OPENAI_KEY}, timeout=600)
        return Played(runtime, camp)
    finally:
        fake.close()
        openai.close()


@pytest.fixture(scope="module", params=RUNTIMES)
def played(request, targets) -> Played:
    return play(request.param, targets.root)


def test_the_run_reaches_the_ending_it_has_without_the_attacks(played):
    rec = record(played.camp, "pr-0")
    assert rec.outcome is Outcome.verified, (rec.reason, rec.last_error)
    assert rec.attempts == 0, "an attack cost the run an attempt"
    assert sorted(played.rollouts) == list(range(len(ROLLOUTS)))
    # the honest rollout, after every attack, still solves the task in the same campaign
    assert played.rollouts[len(ROLLOUTS) - 1]["reward"] == 1.0, played.rollouts
    shown = sweep("show", "pr-0", "--campaign", str(played.camp)).stdout
    assert "verified" in shown


@pytest.mark.parametrize("attack", sorted(REASONS))
def test_a_bounded_attack_ends_its_rollout_with_the_bounds_reason(played, attack):
    k = ROLLOUTS.index(attack)
    rollout = played.rollouts[k]
    # stopped by its bound, the solver did not solve: it scores 0 (never a reward of None)
    assert rollout["reward"] == 0.0 and rollout["session"] == "failed", rollout
    assert rollout["detail"] == REASONS[attack], rollout
    result = json.loads((played.session(k) / "result.json").read_text())
    assert result["runtime"] == played.runtime and result["isolation"] == "bwrap"
    assert result["reason"] == REASONS[attack]
    if attack == "fifo":
        assert "repo/pipe" in result["evidence"], result["evidence"]
    if attack == "disk":
        repo = played.run / "work" / f"solve-r0001-{k}" / "repo"
        written = sum(p.stat().st_size for p in repo.rglob("fill*")) if repo.exists() else 0
        # the bound is watched every second (docs/security.md): the session is stopped within a
        # second of passing 100 MB, long before the attack's 600 MB
        assert written < 400 << 20, f"{written} bytes written: the disk fill was not stopped"


@pytest.mark.parametrize("attack", ["big_file", "stdout"])
def test_an_attack_cut_inside_the_tool_ends_ok_and_scores_the_unchanged_repository(played, attack):
    k = ROLLOUTS.index(attack)
    rollout = played.rollouts[k]
    assert rollout["session"] == "ok" and rollout["reward"] == 0.0, rollout
    stdout = (played.session(k) / "stdout.txt").read_bytes()
    assert len(stdout) <= (1 << 20) + 4096, len(stdout)       # the transcript bound held
    repo = played.run / "work" / f"solve-r0001-{k}" / "repo"
    if repo.exists():
        assert all(p.stat().st_size <= 64 << 20 for p in repo.rglob("*") if p.is_file())

