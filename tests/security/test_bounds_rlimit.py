"""The rlimit fallbacks, exercised: this host's cgroups are writable, so `SWEEP_LIMITS_FALLBACK=rlimit`
(a test knob) makes the provider use what it uses where no child cgroup can be made. A memory hog is
bounded by RLIMIT_AS; a fork bomb by RLIMIT_NPROC, which the kernel does not apply to root, so that
run is made by an unprivileged uid (nobody), as sessions are on a real cluster, with isolation none
(this machine's interpreter lives under /root, which bwrap cannot bind for nobody; the rlimit is
set before the sandbox starts, so bwrap changes nothing of it)."""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sweep.providers.base import Limits
from tests.security.test_bounds import ATTACKS, MB, solver_session

REPO = Path(__file__).resolve().parents[2]


def test_a_memory_hog_is_bounded_by_rlimit_as_without_a_cgroup(targets, monkeypatch):
    monkeypatch.setenv("SWEEP_LIMITS_FALLBACK", "rlimit")
    result, req, took = solver_session(targets.root, "rlimit-memory", ATTACKS["memory"],
                                       Limits(memory_bytes=256 * MB, processes=None))
    assert result.status == "failed" and result.reason == "limit_memory", (result.reason, result.evidence)
    record = json.loads((req.session_dir / "result.json").read_text())
    assert record["limits_enforced"]["memory"] == "RLIMIT_AS", record["limits_enforced"]
    assert "allocated 2 GiB" not in (req.session_dir / "stdout.txt").read_text()


FORKER = r'''
import json, shutil, sys
from pathlib import Path
from sweep.providers.base import ExecSpec, Limits
from sweep.providers.local import LocalProvider
ws = Path(sys.argv[1])
bomb = """
import os, sys, time
n = 0
try:
    for n in range(1, 2001):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
except OSError as exc:
    print("forked", n - 1, flush=True)
    sys.stderr.write(f"fork refused: {exc}\\n")
    sys.exit(1)
print("forked", n, flush=True)
"""
out = LocalProvider(isolation=sys.argv[2], kill_grace_s=1.0).run(ExecSpec(
    argv=[shutil.which("python3", path="/usr/bin:/bin") or sys.executable, "-c", bomb], cwd=ws, timeout_s=60, write_paths=(ws,),
    limits=Limits(memory_bytes=None, processes=64)))
print(json.dumps({"rc": out.rc, "launch_error": out.launch_error, "limit_hit": out.limit_hit, "enforced": out.limits_enforced,
                  "stdout": out.stdout_tail, "stderr": out.stderr_tail}))
'''


@pytest.mark.skipif(os.getuid() != 0, reason="switches to the unprivileged uid nobody (needs root)")
def test_a_fork_bomb_of_an_unprivileged_session_is_bounded_by_rlimit_nproc_without_a_cgroup():
    root = Path(tempfile.mkdtemp(prefix="sweep-test-nproc-", dir="/var/tmp"))
    try:
        ws = root / "work"
        ws.mkdir()
        os.chown(ws, 65534, 65534)
        os.chmod(root, 0o755)
        # an interpreter nobody may run (a version manager's under /root is not), with this one's packages
        python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SWEEP_LIMITS_FALLBACK": "rlimit", "HOME": str(root),
               "PYTHONPATH": os.pathsep.join([str(REPO), *site.getsitepackages()])}
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python,
                               "-c", FORKER, str(ws), "none"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["enforced"].get("processes") == "RLIMIT_NPROC", out
        assert out["limit_hit"] == "processes", out
        forked = int(out["stdout"].split("forked", 1)[1].split()[0])
        assert 0 < forked < 64, out
    finally:
        shutil.rmtree(root, ignore_errors=True)
