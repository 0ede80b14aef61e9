"""The oracle runtime (sweep's own code, trusted) is still sandboxed on an allowlist: its session
sees sweep's packages one by one, never the checkout that holds them, so a campaign or a key file
next to the code (`./sweep-demo`, a checkout's .cache) stays out of it."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from roles import load_roles_dir, manifest_sha256
from sweep.execution import ExecSpec
from sweep.providers.local import LocalProvider
from sweep.runtimes.base import SessionFiles, SessionRequest
from sweep.runtimes.oracle import PROJECT_ROOT, OracleRuntime

ROLES = PROJECT_ROOT / "roles"
PROBE = """import json, os, sys
import sweep.runtimes.oracle_agent  # noqa: F401  (the oracle's own imports work)
root, canary = sys.argv[1], sys.argv[2]
print(json.dumps({"canary": os.path.exists(canary), "pyproject": os.path.exists(root + "/pyproject.toml"),
                  "listing": sorted(os.listdir(root))}))
"""


def test_an_oracle_session_sees_sweeps_packages_and_not_the_checkout(tmp_path):
    canary = PROJECT_ROOT / ".cache" / f"oracle-view-canary-{os.getpid()}"      # .cache is not tracked
    canary.parent.mkdir(exist_ok=True)
    canary.write_text("a key next to the code\n")
    try:
        workspace = tmp_path / "work"
        workspace.mkdir()
        files = SessionFiles(tmp_path / "session")
        files.session_dir.mkdir()
        files.inputs.write_text("{}")
        role = load_roles_dir(ROLES)["reviewer"]
        req = SessionRequest(role=role, manifest_sha256=manifest_sha256(ROLES / "reviewer.toml"), runtime="oracle",
                             runtime_options={}, workspace=workspace, session_dir=files.session_dir, prompt="",
                             inputs={})
        inv = OracleRuntime().build_invocation(req, files, "/dev/null")
        assert PROJECT_ROOT not in inv.read_paths
        out = tmp_path / "out.txt"
        result = LocalProvider("bwrap").run(ExecSpec(
            argv=[sys.executable, "-P", "-s", "-c", PROBE, str(PROJECT_ROOT), str(canary)], cwd=workspace,
            timeout_s=60, read_paths=tuple(inv.read_paths), env=inv.env, network="none", stdout_path=out))
        assert result.rc == 0, (result.stdout_tail, result.stderr_tail)
        seen = json.loads(Path(out).read_text().strip().splitlines()[-1])
    finally:
        canary.unlink()
    assert seen["canary"] is False and seen["pyproject"] is False, seen
    assert set(seen["listing"]) <= {"sweep", "runstate", "roles", ".venv"}, seen
