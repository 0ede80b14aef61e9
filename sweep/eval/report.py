"""`sweep eval report`: the results of the cells that ended, as statistics (sweep/eval/stats.py)."""
from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Any

from sweep.eval import stats
from sweep.eval.cells import CellResult, load_eval, read_result


def had_fault(result: CellResult) -> bool:
    """The cell's first session was interrupted by the plan's fault (not only asked to be)."""
    return bool(result.fault and result.fault.get("fired"))


def collect(out: Path, *, exclude_faults: bool = False) -> dict[str, Any]:
    frozen, manifest = load_eval(out)
    results = [r for r in (read_result(out, c.cell_id) for c in manifest.cells) if r is not None]
    from sweep.eval import spend
    faults = [{"cell_id": r.cell_id, "arm": r.arm, "task_id": r.task_id, "repeat": r.repeat,
               "after_tool_calls": (r.fault or {}).get("after_tool_calls"), "at": (r.fault or {}).get("at"),
               "resumed": (r.fault or {}).get("resumed"), "solved": r.solved} for r in results if had_fault(r)]
    counted = [r for r in results if not (exclude_faults and had_fault(r))]
    summary = summarize(counted, manifest.arms, [c.task_id for c in manifest.cells], frozen.plan.repeats,
                        manifest_sha256=frozen.manifest_sha256, cells=len(manifest.cells))
    summary["ended"] = len(results)
    # which cells had a fault, and whether the figures above leave them out (--exclude-faults)
    summary["faults"] = faults
    summary["faults_excluded"] = exclude_faults
    summary["counted"] = len(counted)
    if frozen.plan.max_spend_usd is not None:      # the ledger's total: settled cells, unsettled reservations whole
        summary["spend"] = {"spent_usd": round(spend.spent(out), 9), "max_spend_usd": frozen.plan.max_spend_usd}
    return summary


def summarize(results: list[CellResult], arms: list[str], task_ids: list[str], repeats: int, *,
              manifest_sha256: str, cells: int) -> dict[str, Any]:
    tasks = sorted(set(task_ids))
    per: dict[str, dict[str, list[bool]]] = {a: {} for a in arms}
    for r in results:
        per[r.arm].setdefault(r.task_id, []).append(r.solved)
    arm_rows = []
    for a in arms:
        mine = [r for r in results if r.arm == a]
        solved = sum(r.solved for r in mine)
        lo, hi = stats.wilson(solved, len(mine))
        full = {t: v for t, v in per[a].items() if len(v) == repeats}
        arm_rows.append({
            "arm": a, "cells": len(mine), "solved": solved, "pass_rate": solved / len(mine) if mine else None,
            "ci95": [lo, hi],
            "pass_at_k": {str(k): stats.arm_pass_at_k(full, k) for k in range(1, repeats + 1)} if full else {},
            # a session whose runtime reports no cost leaves the arm's cost unknown, never $0
            "cost_per_solved_usd": None if any(r.cost_usd is None for r in mine)
            else stats.cost_per_solved([r.cost_usd or 0.0 for r in mine], solved),
            "median_s": stats.median([r.wall_s for r in mine])})
    success = {a: {t: stats.task_success(v) for t, v in per[a].items() if len(v) == repeats} for a in arms}
    paired = []
    for a, b in combinations(arms, 2):
        p = stats.mcnemar(success[a], success[b])
        paired.append({"first": a, "second": b, "tasks": p.tasks, "both": p.both, "first_only": p.a_only,
                       "second_only": p.b_only, "neither": p.neither, "p_value": p.p_value, "effect": p.effect})
    by_task = {t: sorted(a for a in arms if success[a].get(t)) for t in tasks}
    per_task = {t: {a: {"solved": sum(per[a].get(t, [])), "ended": len(per[a].get(t, []))} for a in arms}
                for t in tasks}
    return {"manifest_sha256": manifest_sha256, "cells": cells, "ended": len(results), "repeats": repeats,
            "arms": arm_rows, "paired": paired, "solved_by": by_task, "per_task": per_task}


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def render(summary: dict[str, Any]) -> str:
    lines = [f"cells ended {summary['ended']}/{summary['cells']} (manifest {summary['manifest_sha256'][:12]})"]
    faults = summary.get("faults") or []
    if faults:
        lines.append(f"faults: {len(faults)} cell(s) interrupted and resumed; the figures "
                     + ("exclude them (--exclude-faults)" if summary.get("faults_excluded") else
                        "include them (--exclude-faults leaves them out)"))
    if "spend" in summary:
        lines.append(f"spent {summary['spend']['spent_usd']:.4f} of max_spend_usd {summary['spend']['max_spend_usd']:g}")
    lines += ["",
             f"{'arm':<16} {'cells':>5} {'solved':>6} {'rate':>5} {'95% CI':>13} {'pass@k':<24} {'$/solved':>8} "
             f"{'median s':>8}"]
    for r in summary["arms"]:
        pk = " ".join(f"@{k}={v:.2f}" for k, v in r["pass_at_k"].items()) or "-"
        lines.append(f"{r['arm']:<16} {r['cells']:>5} {r['solved']:>6} {_f(r['pass_rate']):>5} "
                     f"{'[' + _f(r['ci95'][0]) + ', ' + _f(r['ci95'][1]) + ']':>13} {pk:<24} "
                     f"{_f(r['cost_per_solved_usd']):>8} {_f(r['median_s'], '.1f'):>8}")
    if summary["paired"]:
        lines += ["", "paired (exact McNemar on per-task success):"]
        for p in summary["paired"]:
            lines.append(f"  {p['first']} vs {p['second']}: {p['tasks']} tasks, {p['first_only']} only "
                         f"{p['first']}, {p['second_only']} only {p['second']}, effect {p['effect']:+.2f}, "
                         f"p = {p['p_value']:.3g}")
    lines += ["", "solved by:"] + [f"  {t}: {', '.join(a) or '-'}" for t, a in summary["solved_by"].items()]
    if faults:
        lines += ["", "faults (cell, arm, task, after tool calls, resumed, solved):"] + [
            f"  {f['cell_id']} {f['arm']} {f['task_id']} after {f['after_tool_calls']} "
            f"{'resumed' if f['resumed'] else 'not resumed'} {'solved' if f['solved'] else 'not solved'}"
            for f in faults]
    return "\n".join(lines)
