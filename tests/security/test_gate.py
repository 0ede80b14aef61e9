"""Attacks from PR test code at gate time: a PR whose tests run the hostile program, built into a
task bundle the way the oracle author builds it, run by `run_trial` (what the gates call) in the
real sandbox. Each test checks one attack failed AND the trial still reached its correct ending
(the reference solution scores 1: the attacking test passes, it only looks around).
"""
from __future__ import annotations

import json

import pytest

from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.harbor.samples import make_verified_pr
from sweep.harbor.trial import run_trial
from sweep.providers.local import LocalProvider
from tests.security.conftest import HOSTILE, attack_lines

WRAPPER = '''import os
import subprocess
import sys
import unittest

ARG = {arg!r}


class LooksAround(unittest.TestCase):
    def test_looks_around(self):
        probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_probe.py")
        done = subprocess.run([sys.executable, probe, ARG], capture_output=True, text=True)
        sys.stdout.write(done.stdout)
        sys.stdout.flush()
'''


def hostile_gate_trial(targets, run_id: str, arg: dict):
    """A PR whose test runs the hostile program with `arg`, built into run `run_id`'s bundle, and the
    gates' trial of its reference solution: (trial, attack lines, everything the trial logged)."""
    src = make_verified_pr(targets.root / "repos", f"hostile-{run_id}",
                           extra_files={"tests/hostile_probe.py": HOSTILE.read_text(),
                                        "tests/test_attack.py": WRAPPER.format(arg=json.dumps(arg))})
    run = targets.campaign / "runs" / run_id
    bundle = run / "task"
    bundle.mkdir(parents=True)
    build_bundle_from_git(src, bundle)
    work = run / "work" / "gates-r0001-reference-0"
    trial = run_trial(bundle, "reference", provider=LocalProvider(isolation="bwrap", kill_grace_s=1.0),
                      workdir=work, timeout_s=120)
    text = "\n".join(p.read_text(errors="replace") for p in (work / "logs").rglob("*") if p.is_file())
    return trial, attack_lines(text), text


@pytest.fixture(scope="module")
def gate_trial(targets):
    return hostile_gate_trial(targets, "gate", targets.argv_json(own_run="gate"))


ATTACKS = ["read_operator_home", "read_key_file", "read_shadow", "read_munge_key", "list_host_dirs", "list_campaign_runs", "read_other_run",
           "connect_run_socket", "connect_abstract_socket", "connect_loopback_tcp", "sbatch",
           "write_outside_scope", "write_campaign"]


def test_the_trial_still_scores_the_reference_1(gate_trial):
    trial, lines, text = gate_trial
    assert trial.reward == 1.0, trial.detail
    assert trial.isolation == "bwrap"
    assert set(lines) == set(ATTACKS), text[-2000:]


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_is_held(gate_trial, attack):
    trial, lines, text = gate_trial
    verdict, detail = lines[attack]
    assert verdict == "HELD", f"{attack}: {detail}"


def test_no_canary_reached_the_trial_output(gate_trial, targets):
    assert targets.canary_found_under(targets.campaign / "runs" / "gate") == []


def test_no_host_listener_saw_a_connection(gate_trial, targets):
    assert targets.nothing_connected()
