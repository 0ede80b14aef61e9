"""The oracle agent program: `python -m sweep.runtimes.oracle_agent ROLE --inputs F --workspace W --output O`.

Runs inside the session sandbox. It writes one JSON report to `--output` (the session's output
channel) and a one-line summary to stdout, and exits 0 when it did its job, 3 when it refused
(e.g. a PR without tests), 4 on an unexpected error.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from sweep.harbor.gates import gate_detail, gates_passed


def author(inputs: dict, workspace: Path) -> dict:
    from sweep.harbor.pr_bundle import AuthorRefusal, build_bundle_from_git
    try:
        report = build_bundle_from_git(inputs.get("source"), workspace / "task")
    except AuthorRefusal as refusal:
        return {"ok": False, "reason": refusal.reason, "message": refusal.message}
    return {"ok": True, "bundle": "task", "message": f"wrote task/ from {len(report.test_files)} test file(s) "
            f"and {len(report.solution_files)} solution file(s)", **report.as_dict()}


def reviewer(inputs: dict, workspace: Path) -> dict:
    gates = inputs.get("gates")
    passed, failed = gates_passed(gates)
    findings = []
    for name in failed:
        detail = gate_detail(gates.get(name)) if isinstance(gates, dict) else ""
        findings.append(f"gate '{name}' did not pass" + (f": {detail}" if detail else ""))
    if passed and isinstance(gates, dict):
        rationale = f"All {len(gates)} gates passed: the task is valid, solvable and not trivially passing."
    else:
        rationale = "The oracle reviewer accepts exactly when every gate passed; " + ", ".join(failed) + " did not."
    verdict: dict = {"verdict": "accept" if passed else "reject", "findings": findings, "rationale": rationale}
    if isinstance(inputs.get("rollouts"), list):
        # a rollout review (sweep/controller/phases.py): the oracle's labels are sweep's own rules',
        # computed by the controller and handed in (an escalation to the oracle gives them back)
        verdict = {"verdict": "accept", "findings": [], "rationale": "labelled by the oracle rules",
                   "rollouts": [{"rollout": r.get("rollout"), "label": r.get("mechanical_label"),
                                 "reason": "the oracle rules' label"} for r in inputs["rollouts"] if isinstance(r, dict)]}
    return {"ok": True, "verdict": verdict, "message": f"verdict {verdict['verdict']}"}


def solver(inputs: dict, workspace: Path) -> dict:
    ref = inputs.get("reference_solution")
    if not isinstance(ref, str) or not ref:
        return {"ok": False, "reason": "no_reference_solution",
                "message": "the oracle solver needs inputs.reference_solution (the bundle's solution/ directory)"}
    ref_path = Path(ref)
    script = ref_path / "solve.sh" if ref_path.is_dir() else ref_path
    repo = workspace / "repo"
    if not script.is_file():
        return {"ok": False, "reason": "no_reference_solution", "message": f"no solve.sh at {script}"}
    if not repo.is_dir():
        return {"ok": False, "reason": "no_repository", "message": "the workspace has no repo/"}
    env = {**os.environ, "REPO_DIR": str(repo)}
    done = subprocess.run(["bash", str(script)], cwd=repo, env=env, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return {"ok": False, "reason": "solve_failed", "message": f"solve.sh exited {done.returncode}"}
    return {"ok": True, "message": "applied the reference solution to repo/"}


DUTIES = {"author": author, "reviewer": reviewer, "solver": solver}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sweep.runtimes.oracle_agent")
    parser.add_argument("role", choices=sorted(DUTIES))
    parser.add_argument("--inputs", required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    try:
        inputs = json.loads(Path(args.inputs).read_text(encoding="utf-8"))
        report = DUTIES[args.role](inputs if isinstance(inputs, dict) else {}, Path(args.workspace))
        rc = 0 if report.get("ok") else 3
    except Exception as exc:   # the report must say what broke; the exit code says it broke
        report = {"ok": False, "reason": "oracle_error", "message": f"{type(exc).__name__}: {exc}"[:500]}
        rc = 4
    report["role"] = args.role
    with open(args.output, "w", encoding="utf-8") as fh:   # in place: the path is an inherited descriptor
        json.dump(report, fh)
    print(json.dumps({"oracle": args.role, "ok": report.get("ok"), "reason": report.get("reason")}))
    return rc


if __name__ == "__main__":
    sys.exit(main())
