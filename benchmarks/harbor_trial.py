#!/usr/bin/env python
"""A real Harbor trial on the demo's exported verified task: oracle must score 1, nop 0 (slow).

Issue 24's item (d), as a script because it takes minutes (docs/export.md, "A real trial"):
1. the base image: a Debian bookworm rootfs from debootstrap, imported into podman
   (tests/tools/harbor-base-image.sh; cached in .cache/harbor-base);
2. `sweep demo`, then `sweep export --base-image <that image, by digest> --verifier-network public`
   (podman here has no egress sidecar: Harbor refuses a no-network verifier without it);
3. `harbor run -p DATASET/fix-clamp -e podman -n 1` with `-a oracle` and with `-a nop`, Harbor
   0.26.0 from the 3.12 venv (.ci/harbor-venv.sh), podman-compose 1.6.0 from PyPI in that venv.
Prints each agent's reward and wall time, and exits 1 unless oracle scored 1.0 and nop 0.0.

Needs root, podman (and runc where crun refuses the host's cgroups), debootstrap. Usage (from the repository root):
    .venv/bin/python benchmarks/harbor_trial.py [--work /var/tmp/harbor-trial] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("SWEEP_HARBOR_VENV") or REPO / ".cache" / "harbor-venv")
SWEEP = [sys.executable, "-m", "sweep"]


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kw)


def podman_env(work: Path) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}", "NO_COLOR": "1"}
    # What this kind of sandbox needs from podman 4.3: no default nofile ulimit (it is above the
    # sandbox's hard limit), cgroupfs (no systemd), and runc (crun 1.8 refuses hybrid cgroups)
    lines = ["[containers]"]
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1048576:
        lines.append("default_ulimits = []")
    lines += ["[engine]", 'cgroup_manager = "cgroupfs"']
    if shutil.which("runc"):
        lines.append('runtime = "runc"')
    conf = work / "containers.conf"
    conf.write_text("\n".join(lines) + "\n")
    env["CONTAINERS_CONF"] = str(conf)
    return env


def reward_of(jobs: Path) -> float | None:
    for path in sorted(jobs.rglob("result.json")):
        doc = json.loads(path.read_text())
        verifier = doc.get("verifier_result") if isinstance(doc, dict) else None
        if isinstance(verifier, dict):
            rewards = verifier.get("rewards") or {}
            return rewards.get("reward")
    return None


def trial(agent: str, task: Path, work: Path, env: dict[str, str]) -> tuple[float | None, float, str]:
    jobs = work / f"jobs-{agent}"
    shutil.rmtree(jobs, ignore_errors=True)
    t0 = time.monotonic()
    r = subprocess.run([str(VENV / "bin" / "harbor"), "run", "-p", str(task), "-a", agent, "-e", "podman",
                        "-n", "1", "-o", str(jobs), "-y", "-q"], capture_output=True, text=True, env=env,
                       timeout=1800, cwd=work)
    elapsed = time.monotonic() - t0
    return reward_of(jobs), elapsed, (r.stdout + r.stderr)[-2000:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/harbor-trial"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if not (VENV / "bin" / "harbor").is_file():
        print(f"no Harbor venv at {VENV}: run .ci/harbor-venv.sh first", file=sys.stderr)
        return 2
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.monotonic()
    base = run(["bash", str(REPO / "tests" / "tools" / "harbor-base-image.sh"),
                str(REPO / ".cache" / "harbor-base")]).stdout.strip().splitlines()[-1]
    t_base = time.monotonic() - t0
    run([*SWEEP, "demo", str(work / "demo")], cwd=REPO, timeout=600)
    dataset = work / "dataset"
    run([*SWEEP, "export", str(dataset), "--campaign", str(work / "demo" / "campaign"), "--base-image", base,
         "--verifier-network", "public"], cwd=REPO)
    env = podman_env(work)
    results = {}
    for agent in ("oracle", "nop"):
        results[agent] = trial(agent, dataset / "fix-clamp", work, env)
    print(f"harbor 0.26.0, podman, base image {base} (ready in {t_base:.0f} s)")
    for agent, (reward, elapsed, tail) in results.items():
        print(f"  {agent:6s} reward {reward}   {elapsed:.0f} s")
        if reward is None:
            print("    " + tail.replace("\n", "\n    "))
    ok = results["oracle"][0] == 1.0 and results["nop"][0] == 0.0
    print("PASS: oracle 1, nop 0" if ok else "FAIL: expected oracle 1.0 and nop 0.0")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
