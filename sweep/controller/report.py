"""report.md: what happened to one run, for a human, written at its ending."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from runstate.errors import StateError
from runstate.files import write_atomic
from runstate.models import RunRecord
from sweep import textsafe
from sweep.models.evidence import Checkpoints, read_evidence
from sweep.redact import Redactor

if TYPE_CHECKING:
    from sweep.controller.context import Ctx


def _latest(ctx: Ctx, kind: str, model):
    files = sorted(ctx.paths.evidence.glob(f"{kind}-r*.json")) if ctx.paths.evidence.is_dir() else []
    return read_evidence(files[-1], model) if files else None


def _quality_lines(ctx: Ctx) -> list[str]:
    """Whether the tests discriminate and the task is solvable: the latest probe evidence
    (mutation score, survivors) and solve evidence (each rollout's label, solve rate, pass@k)."""
    from sweep.models.evidence import ProbesEvidence, SolveEvidence
    try:
        ev, solve = _latest(ctx, "probes", ProbesEvidence), _latest(ctx, "solve", SolveEvidence)
    except StateError as exc:
        return ["", "## Quality", f"- {exc}"]
    lines = ["", "## Quality"] if ev is not None or solve is not None else []
    if solve is not None and solve.rollouts:
        solved = sum(1 for r in solve.rollouts if r.reward == 1.0)
        lines.append(f"- solve rate: {solved}/{len(solve.rollouts)}; "
                     + ", ".join(f"pass@{k} {v:.2f}" for k, v in sorted(solve.pass_at_k.items(), key=lambda kv: int(kv[0]))))
        for r in solve.rollouts[:20]:
            lines.append(f"- rollout {r.rollout}: reward {r.reward}, {r.label or 'unlabelled'}"
                         + (f" ({r.label_reason})" if r.label_reason else ""))
    if ev is None:
        return lines
    m = ev.mutation
    lines += [f"- mutation score: {m.killed}/{m.run}" + (f" ({m.score:.2f})" if m.score is not None else "")
              + (f"; {m.note}" if m.note else "") + f" (bundle {ev.bundle_sha256[:12]}, quality.mutants = {ev.mode})"]
    for p in ev.survivors()[:20]:
        lines.append(f"- survived: {p.name} ({p.rationale}), rewards {p.rewards}")
    lines += _equivalence_lines(ctx, ev.bundle_sha256)
    for p in ev.rejected_alternatives()[:20]:
        lines.append(f"- valid alternative rejected: {p.name} ({p.rationale}), rewards {p.rewards}")
    for p in [p for p in ev.probes if p.origin == "prepared"][:20]:
        lines.append(f"- prepared probe {p.name} ({p.kind}, focus {p.focus!r}): {p.outcome}, rewards {p.rewards}")
    if ev.required_focus:
        lines.append("- required probe focus: " + ", ".join(ev.required_focus)
                     + (f"; missing: {', '.join(ev.missing_focus)}" if ev.missing_focus else "; each covered"))
    return lines


def _equivalence_lines(ctx: Ctx, sha: str) -> list[str]:
    """The review's equivalent claims on surviving mutants of this bundle: those the plan's
    quality.max_equivalent_mutants let excuse their mutant, and those it did not."""
    from sweep.models.evidence import ReviewEvidence
    try:
        review = _latest(ctx, "review", ReviewEvidence)
    except StateError as exc:
        return [f"- {exc}"]
    if review is None or review.bundle_sha256 != sha or not review.equivalent_claimed:
        return []
    bound = f"quality.max_equivalent_mutants = {review.max_equivalent_mutants}"
    return ([f"- excused as equivalent ({bound}): {', '.join(review.equivalent_excused)}"] if review.equivalent_excused
            else []) + ([f"- claimed equivalent, not excused ({bound}): {', '.join(review.equivalent_refused)}"]
                        if review.equivalent_refused else [])


def write_report(ctx: Ctx, rec: RunRecord, detail: str) -> None:
    try:
        cps = Checkpoints.of(rec.checkpoints, where=str(ctx.paths.state))
    except StateError as exc:        # the ending is still reported; what could not be read is named
        cps, detail = Checkpoints(), f"{detail}\n\n{exc}".strip()
    lines = [f"# {rec.run_id}: {rec.outcome.value if rec.outcome else rec.state.value}"
             + (f" ({rec.reason})" if rec.reason else ""), ""]
    if rec.cause:                   # the why first (docs/controller.md lists the causes)
        lines += [f"**Cause: `{rec.cause}`**" + (f" — {rec.cause_detail}" if rec.cause_detail else ""), ""]
    if detail:
        lines += [detail, ""]
    if ctx.campaign.settings.isolation == "none":
        lines += ["**UNSANDBOXED**: the plan sets isolation = \"none\"; sessions and trials of this run "
                  "ran without the sandbox (docs/security.md).", ""]
    provider = ctx.candidate.candidate.options.provider
    from sweep.runtimes.preflight import key_in_remote_sandbox
    for _, role, runtime, where in key_in_remote_sandbox([ctx.candidate.candidate]):
        lines += [f"**KEY IN SANDBOX**: the {role} ({runtime}) ran on {where} with its model key inside the remote "
                  f"sandbox, where no relay meters or hides it (the plan sets [providers.{where}] "
                  "agent_key_in_sandbox = true); its cost is self-reported (docs/security.md).", ""]
    lines += ["Environment fidelity: " + (
        "host: the task's environment/Dockerfile was not built; gates and trials ran on this host's "
        "toolchain (docs/providers.md)." if provider == "local" else
        f"container: gates and trials ran in the task's image on the {provider} provider "
        "(evidence/gates-*.json names the image)."), ""]
    src = cps.intake
    if src is not None and src.to_json():
        lines += ["## Source", f"- base `{src.base}`, head `{src.head}`",
                  f"- evidence sha256 `{src.evidence_sha256}`", ""]
    lines += ["## Phases"]
    for name, cp in cps.phases():
        lines.append(f"- **{name}**: {cp.summary()}")
    if cps.repair is not None:
        lines.append(f"- repairs: {cps.repair.count} (last after {cps.repair.after})")
    lines += _quality_lines(ctx)
    lines += ["", "## Spend", f"- committed {rec.spent_usd:.4f} USD of allocation "
              f"{'unlimited' if rec.allocation_usd is None else f'{rec.allocation_usd:.2f} USD'}",
              "", f"Attempts: {rec.attempts}/{rec.max_attempts} (failed attempts, as `sweep show` counts them). "
              f"Interruptions (preemption, time limit, node failure; not attempts): {rec.interruptions}"
              + (f" ({', '.join(f'{c} {n}' for c, n in sorted(rec.interrupted_by.items()))})"
                 if rec.interrupted_by else "") + ". "
              f"Written {time.strftime('%Y-%m-%d %H:%M:%S')} by job {rec.job_id}.", "",
              "Evidence files: `evidence/`; task bundle: `task/`; "
              + ("earlier revisions: `revisions/`; " if ctx.paths.revisions.is_dir() else "")
              + "sessions: `sessions/`.", ""]
    # the detail and summaries carry text from the PR, tests and agents: no control character and
    # no secret reaches a file an operator will `cat`
    redactor = Redactor()
    write_atomic(ctx.paths.report, "\n".join(textsafe.line(redactor.scrub(text)) for text in lines).encode())
