"""One evaluation cell's work, in the pieces its run's phases call (sweep/controller/cell.py; docs/eval.md).

One cell: its task checked against the digest the manifest froze, a fresh workspace holding only
the task's starting repository (never its tests or solution), the arm's solver session in the
sandbox (interrupted after its N-th tool call by a plan's fault, then resumed), with
`gate_feedback = N` up to N verifier cycles whose failures go to the same session resumed (a new
one on the same workspace when the runtime cannot resume) (`start_cell`, `solve_cell`: the
cell_solve phase), then sweep's verifier (the task's
harness, sweep/harbor/trial.py) on the repository the last session left, whose reward is the cell's
(`verify_cell`: the cell_verify phase). result.json is written last and atomically (`finish_cell`).
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runstate.atomic import write_atomic
from sweep.eval.cells import TRIAL_TIMEOUT_S, CellResult, Frozen, arm_family, arm_options, arm_spec, dump_json
from sweep.eval import spend
from sweep.eval.harbor_job import write_job
from sweep.eval.manifest import Cell, Manifest
from sweep.eval.plan import Arm, fault_for


def write_job_locked(out: Path, frozen: Frozen, manifest: Manifest, *, cell: Cell | None = None) -> None:
    """The Harbor job files (sweep/eval/harbor_job.py), under an exclusive flock of DIR/jobs.lock:
    cells end in parallel controllers, and the job's result.json is derived from all of them."""
    import fcntl
    fd = os.open(out / "jobs.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_job(out, frozen, manifest, cell=cell)
    finally:
        os.close(fd)


def finish_cell(out: Path, frozen: Frozen, manifest: Manifest, cell: Cell, result: CellResult,
                rid: str | None) -> None:
    """The cell's result.json (atomically: from now on the cell is never run again), its reservation
    settled, its Harbor trial written, its workspace removed."""
    write_atomic(out / "cells" / cell.cell_id / "result.json", dump_json(result.model_dump(mode="json")))
    settle(out, frozen, cell, rid, result.cost_usd)
    write_job_locked(out, frozen, manifest, cell=cell)
    shutil.rmtree(out / "cells" / cell.cell_id / "work", ignore_errors=True)


def check_secrets(out: Path, frozen: Frozen) -> None:
    """Every arm's secret readable now (its file still 0600 and yours, its variable set here), or a
    ConfigError naming the plan field before any cell starts or reserves anything."""
    from roles import load_manifest
    from sweep.credentials import session_secrets
    spec = load_manifest(out / "roles" / "solver.toml")
    for arm in frozen.plan.arms:
        family = arm_family(arm_spec(spec, arm), arm)
        if family is not None:
            session_secrets(frozen.plan, family)


UNSCORED = ("outage", "throttle", "config")


def not_the_agents_fault(cell: Cell, solved: "Solved") -> str | None:
    """Why the cell gets no result now: its session failed on its model endpoint (down, throttled, a
    bad key or billing), which says nothing about the arm, so it is not scored 0: the cell's run
    parks under the solver role's cooldown and runs again after it. None: the cell is scored."""
    if solved.kw.get("failure_class") not in UNSCORED:
        return None
    return (f"cell {cell.cell_id} (arm {cell.arm}): its solver session failed on its model endpoint "
            f"({solved.kw['failure_class']}): {solved.detail[:300]}; the cell is not scored, and runs again "
            "after the cooldown")


def _arm(frozen: Frozen, cell: Cell) -> Arm:
    return next(a for a in frozen.plan.arms if a.name == cell.arm)


def reserve(out: Path, frozen: Frozen, cell: Cell) -> tuple[str | None, str | None]:
    """(why the cell may not start, the id of its reservation in the spend ledger): under the plan's
    max_spend_usd, an arm's cell reserves its whole max_usd envelope before it starts."""
    cap, envelope = frozen.plan.max_spend_usd, _arm(frozen, cell).budget.max_usd
    if cap is None or envelope is None:
        return None, None
    rid, so_far = spend.reserve_within(out, cell.cell_id, envelope, cap)
    if rid is None:
        return (f"max_spend_usd {cap:g} reached: {so_far:.4f} USD spent or reserved, and cell {cell.cell_id} "
                f"(arm {cell.arm}) would reserve {envelope:g}"), None
    return None, rid


def settle(out: Path, frozen: Frozen, cell: Cell, rid: str | None, cost_usd: float | None) -> None:
    """The cell's reservation settled at its cost (at the whole envelope when the cost is unknown)."""
    if rid is not None:
        envelope = _arm(frozen, cell).budget.max_usd or 0.0
        spend.settle(out, rid, envelope if cost_usd is None else cost_usd)


def ended(frozen: Frozen, cell: Cell, started: float, reward: float | None, detail: str, **kw) -> CellResult:
    """The cell's result; `started`: when its attempt began (time.time(), kept across controllers)."""
    arm = next(a for a in frozen.plan.arms if a.name == cell.arm)
    return CellResult(cell_id=cell.cell_id, task_id=cell.task_id, arm=cell.arm, repeat=cell.repeat, digest=cell.digest,
                      manifest_sha256=frozen.manifest_sha256, reward=reward, solved=reward == 1.0,
                      detail=detail[:500], runtime=arm.runtime, model=arm.model, wall_s=time.time() - started,
                      ended_at=time.time(), **kw)


@dataclass
class _Ctx:
    """What a cell's sessions and verifier runs share."""
    cdir: Path
    task: Path
    arm: Arm
    spec: Any
    provider: Any
    limits: Any
    manifest_sha256: str
    base_prompt: str
    secrets: dict
    fault_after: int | None = None      # the plan's fault: interrupt the first session after N tool calls
    verifier: Any = None                # where the verifier runs (None: the sessions' provider)


def _session(ctx: _Ctx, n: int, kind: str, prompt: str, cost_limit: float | None, *, resume: Any = None,
             stop_after_tool_calls: int | None = None) -> tuple[Any, float]:
    """One solver session in the cell's workspace, as sessions/NNNN-<kind>, which may spend `cost_limit`;
    `resume`: the earlier session whose conversation it continues; (its result, when it started)."""
    from sweep.runtimes import SessionRequest, run_session
    req = SessionRequest(role=ctx.spec, manifest_sha256=ctx.manifest_sha256, runtime=ctx.arm.runtime,
                         runtime_options=arm_options(ctx.arm), workspace=ctx.cdir / "work" / "ws",
                         session_dir=ctx.cdir / "sessions" / f"{n:04d}-{kind}", prompt=prompt, inputs={},
                         limits=ctx.limits.for_role(ctx.spec.limits.overrides()).to_limits(),
                         cost_limit_usd=cost_limit, secrets=dict(ctx.secrets), resume=resume,
                         stop_after_tool_calls=stop_after_tool_calls)
    started = time.time()
    return run_session(req, ctx.provider), started


def _resume_from(ctx: _Ctx, sessions: list[Any]) -> tuple[Any, str | None]:
    """(where the last session can be continued from, None) when its runtime can resume and it left
    a conversation to continue; else (None, why a new session starts instead)."""
    from sweep.runtimes.base import resume_point
    from sweep.runtimes.facts import facts_of
    if not facts_of(ctx.arm.runtime).resumable:
        return None, f"runtime {ctx.arm.runtime} cannot resume a session: a new one starts"
    n = len(sessions)
    found = sorted((ctx.cdir / "sessions").glob(f"{n:04d}-*"))
    point = resume_point(sessions[-1], found[0]) if found else None
    return (point, None) if point is not None else (None, "the last session left no conversation to resume")


def _verify(ctx: _Ctx, name: str) -> Any:
    """The task's verifier on a copy of the repository the sessions left (the workspace is untouched)."""
    from sweep.harbor.trial import bundle_harness, run_trial
    return run_trial(ctx.task, ctx.cdir / "work" / "ws" / "repo", provider=ctx.verifier or ctx.provider,
                     workdir=ctx.cdir / "work" / name, timeout_s=TRIAL_TIMEOUT_S, limits=ctx.limits.to_limits(),
                     harness=bundle_harness(ctx.task))


def feedback_prompt(base: str | None, cycle: int, trial: Any) -> str:
    """The next session's prompt: the task as before (not when the session is resumed: its
    conversation holds it), then what the verifier reported (its failures)."""
    failing = sorted(t for t, status in (trial.results or {}).items() if status not in ("passed", "pass", "ok"))
    lines = ([base, ""] if base is not None else []) + [
        f"## Verifier feedback (cycle {cycle})", "",
        "The task's verifier ran on the repository as you left it, and it did not pass "
        f"(reward {0.0 if trial.reward is None else trial.reward:g}). It reported:", "", trial.detail.strip()]
    if failing:
        lines += ["", "Failing tests:"] + [f"- {t}" for t in failing[:50]]
    lines += ["", "Continue from the repository as it is now, and fix what fails."]
    return "\n".join(lines)


def resume_prompt(base: str, fault: dict) -> str:
    """The resume instruction after an injected fault (the task again: a CLI may have lost the end of
    its transcript when it was killed)."""
    return "\n".join(["## Resumed after an interruption", "",
                      f"Your session was interrupted after {fault['tool_calls']} tool call(s) and is resumed now. "
                      "The repository is as you left it. Continue the task from where you stopped.", "",
                      "The task, again:", "", base])


def _next_session(ctx: _Ctx, sessions: list[Any], kind: str, prompt: Any, record: dict[str, Any]) -> Any:
    """The cell's next session after `sessions`, resuming the last one's conversation when its
    runtime can (else a new session on the same workspace, and the record says why); `prompt(resumed)`.
    The record gets its figures; None when the envelope has nothing left (record: stopped)."""
    left = _envelope_left(ctx.arm.budget.max_usd, [_spent(s) for s in sessions])
    if left is not None and left <= 0:
        record.update(fed_back=False, stopped="budget_spent")
        return None
    point, why = _resume_from(ctx, sessions)
    session, started = _session(ctx, len(sessions) + 1, kind, prompt(point is not None), left, resume=point)
    record.update(resumed=point is not None, session_status=session.status, session_s=session.duration_s,
                  session_started_at=started, cost_usd=session.cost_usd, turns=session.turns)
    if point is not None:
        record["resumed_session_id"] = point.session_id
    else:
        record["not_resumed"] = why
    sessions.append(session)
    return session


def _with_feedback(ctx: _Ctx, sessions: list[Any]) -> tuple[Any, list[dict]]:
    """Up to the arm's gate_feedback cycles: the verifier, and its failures handed to the agent in
    the same session resumed (a new one on the same workspace for a runtime that cannot resume);
    stops when a check passes or a session does not end ok. (the last session, the cycles' records);
    `sessions` gets the new ones."""
    cycles: list[dict] = []
    session = sessions[-1]
    for cycle in range(1, ctx.arm.gate_feedback + 1):
        if not session.ok:
            break
        check = _verify(ctx, f"feedback-{cycle}")
        record: dict[str, Any] = {"cycle": cycle, "reward": check.reward, "detail": check.detail[:500],
                                  "verifier_s": check.duration_s, "fed_back": check.reward != 1.0}
        cycles.append(record)
        if check.reward == 1.0:
            break               # nothing to feed back: the final run decides
        nxt = _next_session(ctx, sessions, "feedback", lambda resumed, c=cycle, t=check: feedback_prompt(
            None if resumed else ctx.base_prompt, c, t), record)
        if nxt is None:
            break
        session = nxt
    return session, cycles


def _first_session(ctx: _Ctx, fault_after: int | None) -> tuple[list[Any], float, dict | None]:
    """The solver session, interrupted by the plan's fault (if any) after its N-th tool call and then
    resumed with a resume instruction. (the sessions, when the first started, the fault's record)."""
    first, started = _session(ctx, 1, "solver", ctx.base_prompt, ctx.arm.budget.max_usd,
                              stop_after_tool_calls=fault_after)
    sessions = [first]
    if first.fault is None:     # no fault asked, or the session ended before its N-th tool call
        return sessions, started, None if fault_after is None else {"after_tool_calls": fault_after, "fired": False}
    fault: dict[str, Any] = {**first.fault, "fired": True, "session": "0001-solver"}
    _next_session(ctx, sessions, "resume", lambda resumed: resume_prompt(ctx.base_prompt, fault), fault)
    fault.pop("fed_back", None)
    return sessions, started, fault


def _spent(session: Any) -> float | None:
    """What a session spent, for what the envelope has left: its cost; for one a fault stopped (sweep's
    doing: the request it cut has no response to meter, so its cost is unknown), what the relay metered."""
    if session.cost_usd is not None or session.fault is None:
        return session.cost_usd
    metered = (session.report or {}).get("metered_cost_usd")
    return float(metered) if isinstance(metered, (int, float)) and not isinstance(metered, bool) else None


def _envelope_left(max_usd: float | None, spent: list[float | None]) -> float | None:
    """What the cell's budget envelope (the arm's max_usd, over all its sessions) has left; a session
    whose cost is unknown counts as having spent the whole envelope. None: no envelope."""
    if max_usd is None:
        return None
    if any(c is None for c in spent):
        return 0.0
    return max_usd - sum(c for c in spent if c is not None)


def _total(values: list) -> Any:
    """A sum that stays unknown (None) when any part is."""
    return None if any(v is None for v in values) else sum(values)


def _provenance(sessions: list[Any]) -> dict[str, Any]:
    """What the runtimes reported of the sessions: the CLI's version, the model it says it ran, the
    token counts its stream gave (summed per kind), and the cost the wire relay metered (summed; None
    unless every session was metered)."""
    reports = [s.report or {} for s in sessions]
    metered = [r.get("metered_cost_usd") for r in reports]
    tokens: dict[str, int] = {}
    for usage in (r.get("usage") for r in reports):
        for key, n in (usage.items() if isinstance(usage, dict) else ()):
            if isinstance(n, int) and not isinstance(n, bool):
                tokens[key] = tokens.get(key, 0) + n
    return {"tokens": tokens or None,
            "cli_version": next((r["cli_version"] for r in reports if r.get("cli_version")), None),
            "model_reported": next((r["model"] for r in reports if r.get("model")), None),
            "metered_cost_usd": _total(metered) if all(isinstance(m, (int, float)) for m in metered) else None}


def _providers(out: Path, frozen: Frozen, cell: Cell, task: Path, arm: Arm, ids: dict | None) -> tuple[Any, Any]:
    """(where the cell's sessions run, where its verifier runs). Local: this host, both. A remote
    provider, as a generation run's solve phase (sweep/controller/phases.py `_session_provider`,
    `_trial_provider`): a sandbox from the task's environment/Dockerfile image per command, the
    agent CLI's install layer added for a session's (a runtime that runs sweep's own code, host_only,
    stays here); receipts in the cell's run directory, so reconcile and the tick find what a dead
    controller left. `ids`: the controller's (campaign_id, job_id, attempt) for the sandboxes' tags."""
    from runstate.runs import run_dir
    from sweep.providers import get_provider, get_sandbox_provider
    from sweep.providers.container import ContainerRunner
    from sweep.runtimes.facts import facts_of
    plan = frozen.plan
    local = get_provider("local", isolation=plan.isolation)
    if plan.provider == "local":
        return local, local
    settings = plan.providers.get(plan.provider)
    sandboxes = get_sandbox_provider(plan.provider, **(settings.options() if settings else {}))
    tags: dict[str, Any] = ids or {"campaign_id": "eval", "job_id": "none", "attempt": 1}

    def runner(role: str, agent_cli: str | None) -> ContainerRunner:
        return ContainerRunner(sandboxes, environment_dir=task / "environment", run_dir=out / "cells" / cell.cell_id,
                               campaign_id=tags["campaign_id"], run_id=cell.cell_id, job_id=tags["job_id"],
                               role=role, attempt=tags["attempt"], agent_cli=agent_cli,
                               receipts_dir=run_dir(out, cell.cell_id),
                               agent_key_in_sandbox=bool(settings and settings.agent_key_in_sandbox))
    facts = facts_of(arm.runtime)
    session = local if facts.host_only else runner("solver", facts.cli.npm_spec if facts.cli else None)
    return session, runner("verifier", None)


def cell_context(out: Path, frozen: Frozen, cell: Cell, ids: dict | None = None) -> _Ctx:
    """What the cell's sessions and verifier runs share (the workspace untouched)."""
    from roles import load_manifest
    from sweep.credentials import session_secrets
    from sweep.harbor import layout
    arm = _arm(frozen, cell)
    task = Path(frozen.dataset_dir) / cell.task_id
    spec = arm_spec(load_manifest(out / "roles" / "solver.toml"), arm)
    family = arm_family(spec, arm)
    instruction = (task / layout.INSTRUCTION).read_text(errors="replace")
    session, verifier = _providers(out, frozen, cell, task, arm, ids)
    return _Ctx(out / "cells" / cell.cell_id, task, arm, spec, session,
                frozen.plan.limits, frozen.solver_manifest_sha256,
                instruction + (f"\n\n{arm.instructions}" if arm.instructions else ""),
                session_secrets(frozen.plan, family) if family is not None else {}, fault_for(frozen.plan, cell),
                verifier)


def start_cell(out: Path, frozen: Frozen, cell: Cell, started: float, ids: dict | None = None) -> _Ctx | CellResult:
    """The task checked against the digest the manifest froze (a changed one is the cell's result,
    with no reward), and a fresh workspace holding only its starting repository."""
    from sweep.harbor import layout
    from sweep.harbor.digest import harbor_digest
    from sweep.tree import copy_tree
    task = Path(frozen.dataset_dir) / cell.task_id
    if not task.is_dir() or harbor_digest(task) != cell.digest:
        return ended(frozen, cell, started, None, f"task {cell.task_id} is not the content the manifest froze "
                                                  f"({cell.digest}): the dataset changed")
    cdir = out / "cells" / cell.cell_id
    shutil.rmtree(cdir / "work", ignore_errors=True)          # what a killed controller left
    shutil.rmtree(cdir / "sessions", ignore_errors=True)
    copy_tree(task / layout.ENV_REPO, cdir / "work" / "ws" / "repo")
    return cell_context(out, frozen, cell, ids)


@dataclass
class Solved:
    """What the cell's sessions did: the result's session fields (JSON, kept in the cell's
    checkpoint), whether the last session ended ok, and why not."""
    kw: dict[str, Any]
    ok: bool
    detail: str


def solve_cell(ctx: _Ctx) -> Solved:
    """The arm's solver session (interrupted and resumed by the plan's fault, if any), then its
    gate-feedback cycles."""
    sessions, session_started, fault = _first_session(ctx, ctx.fault_after)
    session, cycles = _with_feedback(ctx, sessions)
    kw = dict(session_status=session.status, failure_class=session.failure_class,
              cost_usd=_total([s.cost_usd for s in sessions]), turns=_total([s.turns for s in sessions]),
              session_s=sum(s.duration_s for s in sessions), session_started_at=session_started,
              sessions=len(sessions), feedback=cycles, fault=fault, **_provenance(sessions))
    # a session that ended without finishing (its bound, a crash): the task was not solved
    detail = "" if session.ok else f"solver session {session.status}: {session.reason or ''} {session.evidence[:200]}"
    return Solved(kw, session.ok, detail)


def verify_cell(ctx: _Ctx, frozen: Frozen, cell: Cell, started: float, solved: Solved) -> CellResult:
    """The cell's result: 0 for a last session that did not end ok, else the final verifier run's
    reward (fed back to no one)."""
    if not solved.ok:
        return ended(frozen, cell, started, 0.0, solved.detail, **solved.kw)
    shutil.rmtree(ctx.cdir / "work" / "trial", ignore_errors=True)     # what a killed verifier run left
    trial_started = time.time()
    trial = _verify(ctx, "trial")
    reward = 0.0 if trial.reward is None else trial.reward
    return ended(frozen, cell, started, reward, trial.detail, trial_s=trial.duration_s,
                 trial_started_at=trial_started, **solved.kw)
