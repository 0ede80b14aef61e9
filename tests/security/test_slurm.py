"""Reaching Slurm from inside a session: the munge socket and `sbatch` of a real (throwaway) cluster.

The fixture cluster lives under /tmp, which every sandbox replaces with its own tmpfs; so that the
attack cannot fail by that luck, the cluster's munge socket is hard-linked and its slurm.conf
copied under the campaign's /var/tmp root, and a control submission from the host through exactly
those paths proves they work. From inside the sandbox both must fail, and no job may appear.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roles import load_roles_dir, manifest_sha256
from sweep.providers.local import LocalProvider
from sweep.runtimes import SessionRequest, run_session
from tests.security.conftest import HOSTILE, attack_lines

ROLES = Path(__file__).resolve().parents[2] / "roles"


@pytest.fixture(scope="module")
def exposed_cluster(slurm_cluster, targets):
    link = targets.root / "munge.sock"
    try:
        os.link(slurm_cluster.dir / "munge.sock", link)
    except OSError as exc:
        pytest.skip(f"cannot link the munge socket next to the campaign: {exc}")
    conf = targets.root / "slurm.conf"
    conf.write_text(slurm_cluster.conf.read_text().replace(f"{slurm_cluster.dir}/munge.sock", str(link)))
    env = dict(slurm_cluster.env, SLURM_CONF=str(conf))
    control = subprocess.run(["sbatch", "--parsable", "--job-name", "sweep-sec-control", "--wrap", "true"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert control.returncode == 0, f"the exposed paths do not work from the host: {control.stderr}"
    subprocess.run(["scancel", control.stdout.strip().split(";")[0]], env=env, capture_output=True, timeout=60)
    return link, conf


def test_a_session_can_neither_reach_munge_nor_submit_a_job(exposed_cluster, slurm_cluster, targets):
    link, conf = exposed_cluster
    run = targets.campaign / "runs" / "slurm"
    workspace = run / "work" / "author-r0001"
    (workspace / "task").mkdir(parents=True)
    marker = targets.marker + "-slurm"
    argv = [sys.executable, str(HOSTILE),
            json.dumps(targets.argv_json(munge_socket=str(link), slurm_conf=str(conf), marker=marker,
                                         own_run="slurm")),
            "{tools}", "{max_turns}", "{cost_cap_usd}"]
    spec = load_roles_dir(ROLES)["author"]
    req = SessionRequest(role=spec, manifest_sha256=manifest_sha256(ROLES / "author.toml"), runtime="command",
                         runtime_options={"argv": argv, "network": "none"}, workspace=workspace,
                         session_dir=run / "sessions" / "0001-author", prompt="build the task", inputs={})
    result = run_session(req, LocalProvider(isolation="bwrap", kill_grace_s=1.0))
    lines = attack_lines((req.session_dir / "stdout.txt").read_text())
    assert result.status == "ok", result.evidence
    assert lines["connect_munge"][0] == "HELD", lines["connect_munge"]
    assert lines["sbatch"][0] == "HELD", lines["sbatch"]
    assert marker not in slurm_cluster.squeue_names()
