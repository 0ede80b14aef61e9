"""Reaching Slurm from inside a session: the munge socket and `sbatch` of a real (throwaway) cluster.

The fixture cluster lives under /tmp, which every sandbox replaces with its own tmpfs; so that the
attack cannot fail by that luck, the cluster's munge socket is hard-linked and its slurm.conf
copied under the campaign's /var/tmp root, and a control submission from the host through exactly
those paths proves they work. From inside the sandbox both must fail, and no job may appear.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


from roles import load_roles_dir, manifest_sha256
from sweep.providers.local import LocalProvider
from sweep.runtimes import SessionRequest, run_session
from tests.security.conftest import HOSTILE, attack_lines

ROLES = Path(__file__).resolve().parents[2] / "roles"


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


def test_pr_test_code_at_gate_time_can_neither_reach_munge_nor_submit_a_job(exposed_cluster, slurm_cluster,
                                                                            targets):
    """The same two attacks from a PR's test, run by the gates' trial of the reference solution:
    both fail, no job appears, and the trial still scores 1 (the attacking test only looks around)."""
    from tests.security.test_gate import hostile_gate_trial
    link, conf = exposed_cluster
    marker = targets.marker + "-slurm-gate"
    trial, lines, _ = hostile_gate_trial(targets, "slurm-gate", targets.argv_json(
        munge_socket=str(link), slurm_conf=str(conf), marker=marker, own_run="slurm-gate"))
    assert trial.reward == 1.0, trial.detail
    assert lines["connect_munge"][0] == "HELD", lines["connect_munge"]
    assert lines["sbatch"][0] == "HELD", lines["sbatch"]
    assert marker not in slurm_cluster.squeue_names()
