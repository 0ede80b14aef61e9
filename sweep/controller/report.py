"""report.md: what happened to one run, for a human, written at its ending."""
from __future__ import annotations

import time

from runstate.files import write_atomic
from sweep import textsafe
from sweep.redact import Redactor


def write_report(ctx, rec, detail: str) -> None:
    cps = rec.checkpoints
    lines = [f"# {rec.run_id}: {rec.outcome.value}" + (f" ({rec.reason})" if rec.reason else ""), ""]
    if detail:
        lines += [detail, ""]
    if getattr(ctx.campaign.settings, "isolation", "bwrap") == "none":
        lines += ["**UNSANDBOXED**: the plan sets isolation = \"none\"; sessions and trials of this run "
                  "ran without the sandbox (docs/security.md).", ""]
    src = cps.get("intake", {})
    if src:
        lines += ["## Source", f"- base `{src.get('base')}`, head `{src.get('head')}`",
                  f"- evidence sha256 `{src.get('evidence_sha256')}`", ""]
    lines += ["## Phases"]
    for name in ("intake", "author", "gates", "review", "solve", "evaluate"):
        if name in cps:
            summary = {k: v for k, v in cps[name].items() if k != "at"}
            lines.append(f"- **{name}**: {summary}")
    if "repair" in cps:
        lines.append(f"- repairs: {cps['repair'].get('count')} (last after {cps['repair'].get('after')})")
    lines += ["", "## Spend", f"- committed {rec.spent_usd:.4f} USD of allocation "
              f"{'unlimited' if rec.allocation_usd is None else f'{rec.allocation_usd:.2f} USD'}",
              "", f"Attempts: {rec.attempts}/{rec.max_attempts} (failed attempts, as `sweep show` counts them). "
              f"Interruptions (preemption, time limit, node failure; not attempts): {rec.interruptions}"
              + (f" ({', '.join(f'{c} {n}' for c, n in sorted(rec.interrupted_by.items()))})"
                 if rec.interrupted_by else "") + ". "
              f"Written {time.strftime('%Y-%m-%d %H:%M:%S')} by job {rec.job_id}.", "",
              "Evidence files: `evidence/`; task bundle: `task/`; earlier revisions: `revisions/`; "
              "sessions: `sessions/`.", ""]
    # the detail and summaries carry text from the PR, tests and agents: no control character and
    # no secret reaches a file an operator will `cat`
    redactor = Redactor()
    write_atomic(ctx.paths.report, "\n".join(textsafe.line(redactor.scrub(text)) for text in lines).encode())
