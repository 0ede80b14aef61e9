#!/usr/bin/env python
"""Each language's exported task, run in its own image: the reference scores 1, no solution 0 (slow).

Issue 23's "the export of each runs its test command in its own image", for each runner
tests/langrepos.py builds a real PR for (pytest, unittest, go test, cargo test, node --test, jest,
JUnit from Java):
1. a one-run campaign on the local backend (oracle roles) takes the PR's real fix to `verified`;
2. `sweep export --base-image <the debootstrap base> --verifier-network public` writes the task,
   its environment/Dockerfile derived by sweep/harbor/images.py from the test command;
3. podman builds that environment/ (the exported Dockerfile, its context: the base checkout);
4. what Harbor's oracle agent and verifier do, twice in a fresh container of that image: with the
   reference (`solution/solve.sh` as the agent user, then `tests/test.sh` as root) and without it
   (`tests/test.sh` only); tests/ and solution/ are mounted where Harbor uploads them (/tests,
   /solution), /logs is a host directory. One container holds both steps (Harbor's separate verifier
   copies /app over; the bytes it runs on are the same).
Prints per language: build seconds, the test command's program found (the runner's output, not
"command not found"), the per-test results sweep's runner parsed from that output and the report
files, and the reward test.sh wrote (Harbor's reward) with and without the reference. Exits 1
unless every language built and scored 1 with the reference and 0 without.

Needs root, podman (+ runc here, see docs/export.md), Debian's mirror and npm's registry during the
builds. Where the host reaches PyPI through a proxy with its own CA (pip's `cert`), the builds get
that CA and a pip.conf and an npmrc naming it as read-only mounts: build-time volumes, not lines of the image.
Usage (from the repository root):
    .venv/bin/python benchmarks/task_images.py [--languages pytest,unittest,go,cargo,node,jest,junit]
        [--base-image NAME:TAG@sha256:DIGEST]   (default: tests/tools/harbor-base-image.sh's image)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.harbor_trial import podman_env  # noqa: E402
from sweep.harbor.harness import REPORT_RELDIR, TEST_IDS, read_reports, resolve, score  # noqa: E402
from sweep.harbor.runners.base import Observed  # noqa: E402
from tests.campaigns import sweep, tick_until_done, write_plan  # noqa: E402
from tests.fakes.runs import local_plan  # noqa: E402
from tests.langrepos import LANGUAGES  # noqa: E402

# what Harbor does: the oracle agent runs solve.sh as task.toml's agent user, the verifier test.sh as root
WITH_REFERENCE = "su agent -s /bin/bash -c 'bash /solution/solve.sh' && bash /tests/test.sh"
WITHOUT = "bash /tests/test.sh"


def exported_task(language: str, work: Path, base: str) -> Path:
    """The exported directory of the language's fix PR, verified by a real one-run campaign."""
    src = LANGUAGES[language](work / "repos")
    options = {"test_command": src["test_command"], **({"test_runner": src["test_runner"]}
                                                       if src.get("test_runner") else {})}
    toolchains = {"python": {"prefix": sys.prefix}} if language == "pytest" else {}
    plan = local_plan([{"id": f"{language}-fix", "repo": src["repo"], "base": src["base"], "head": src["fix"],
                        "options": options}], max_parallel=1, environment={"toolchains": toolchains},
                      defaults={"quality": {"max_repairs": 0, "gate_repeats": 1, "run_rollout": False}})
    camp = work / "camp"
    sweep("init", str(write_plan(work / "plan.json", plan)), "--campaign", str(camp), timeout=300)
    st = tick_until_done(camp, timeout=900, env={"PATH": "/usr/bin:/bin"})
    if st["outcomes"] != {"verified": 1}:
        raise RuntimeError(f"the campaign did not verify the fix: {st['outcomes']}")
    sweep("export", str(work / "dataset"), "--campaign", str(camp), "--base-image", base,
          "--verifier-network", "public", timeout=300)
    tasks = [p.parent for p in (work / "dataset").glob("*/task.toml")]
    if len(tasks) != 1:
        raise RuntimeError(f"expected one exported task, found {len(tasks)}")
    return tasks[0]


def run_in_image(tag: str, task: Path, script: str, logs: Path, env: dict[str, str]) -> tuple[int, str]:
    logs.mkdir(parents=True)
    r = subprocess.run(["podman", "run", "--rm", "-v", f"{task / 'tests'}:/tests:ro",
                        "-v", f"{task / 'solution'}:/solution:ro", "-v", f"{logs}:/logs", tag, "bash", "-c", script],
                       capture_output=True, env=env, timeout=1800)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def results_of(task: Path, output: str, logs: Path, rc: int) -> tuple[dict[str, str], float | None, str]:
    """Sweep's per-test results and reward from one run's output and report files."""
    lines = lambda rel: (task / rel).read_text().splitlines() if (task / rel).is_file() else None  # noqa: E731
    runner = (lines("tests/runner.txt") or [None])[0]
    harness = resolve(lines("tests/test_command.txt") or [], runner)
    ids = lines(TEST_IDS)
    if ids is not None:
        harness = harness.selecting(ids)
    observed = Observed(output=output.encode(), reports=read_reports(logs / REPORT_RELDIR), repo_dir="/app")
    scored = score(harness, observed, rc, file_bytes=None)
    return dict(scored.results or {}), scored.reward, scored.detail


def harbor_reward(logs: Path) -> str:
    path = logs / "verifier" / "reward.txt"
    return path.read_text().strip() if path.is_file() else "none"


def prove(language: str, work: Path, base: str, env: dict[str, str], mounts: list[str]) -> bool:
    t0 = time.monotonic()
    task = exported_task(language, work, base)
    t_export = time.monotonic() - t0
    tag = f"localhost/sweep-task-{language}"
    t0 = time.monotonic()
    b = subprocess.run(["podman", "build", "-q", *mounts, "-t", tag, str(task / "environment")],
                       capture_output=True, text=True, env=env, timeout=3600)
    built = time.monotonic() - t0
    print(f"{language}: campaign + export {t_export:.0f} s; image built in {built:.0f} s"
          + ("" if b.returncode == 0 else f" FAILED:\n{b.stderr[-1500:]}"), flush=True)
    if b.returncode != 0:
        return False
    ok = True
    for label, script, want in (("reference", WITH_REFERENCE, "1"), ("none", WITHOUT, "0")):
        logs = work / f"logs-{label}"
        rc, output = run_in_image(tag, task, script, logs, env)
        results, reward, detail = results_of(task, output, logs, rc)
        got = harbor_reward(logs)
        found = bool(results) and "command not found" not in output and "No module named" not in output
        ok &= got == want and found and reward == float(want)
        print(f"  {label:9s} exit {rc}; program found: {'yes' if found else 'NO'}; per-test results "
              f"{json.dumps(results, sort_keys=True)}; Harbor reward {got} (want {want}), sweep's {reward}", flush=True)
        if got != want or not found:
            print("    " + output[-1500:].replace("\n", "\n    ") + f"\n    ({detail[:300]})")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--languages", default=",".join(LANGUAGES))
    ap.add_argument("--base-image", default="")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and the images")
    args = ap.parse_args()
    base = args.base_image or subprocess.run(
        ["bash", str(REPO / "tests" / "tools" / "harbor-base-image.sh"), str(REPO / ".cache" / "harbor-base")],
        check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    work = Path(tempfile.mkdtemp(prefix="sweep-task-images-", dir="/var/tmp"))
    env = podman_env(work)
    mounts: list[str] = []
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if Path("/etc/pip.conf").is_file() and ca.is_file():
        (work / "pip.conf").write_text("[global]\ncert = /run/sweep-host-ca.crt\n")
        (work / "npmrc").write_text("cafile=/run/sweep-host-ca.crt\n")
        mounts = ["-v", f"{work / 'pip.conf'}:/etc/pip.conf:ro", "-v", f"{work / 'npmrc'}:/etc/npmrc:ro",
                  "-v", f"{ca}:/run/sweep-host-ca.crt:ro"]
    print(f"base image {base}; load average {os.getloadavg()[0]:.2f}", flush=True)
    failed = []
    try:
        for language in args.languages.split(","):
            try:
                if not prove(language, work / language, base, env, mounts):
                    failed.append(language)
            except (RuntimeError, AssertionError, subprocess.SubprocessError) as exc:
                print(f"{language}: FAILED before the image: {str(exc)[-1500:]}", flush=True)
                failed.append(language)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f}; " + (f"FAILED: {', '.join(failed)}" if failed else
                                                       "PASS: every language's image scored reference 1, none 0"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
