"""Resource attacks, each bounded, and each run still reaching its ending with the reason: from an
agent session (the `command` runtime as the solver) and from PR test code at gate time (a trial).
Bounds are set small here so the attacks are cheap; docs/security.md lists the defaults."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from roles import load_roles_dir, manifest_sha256
from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.harbor.samples import make_verified_pr
from sweep.harbor.trial import run_trial
from sweep.providers.base import Limits
from sweep.providers.local import LocalProvider
from sweep.runtimes import SessionRequest, run_session

ROLES = Path(__file__).resolve().parents[2] / "roles"
MB = 1 << 20
SMALL = Limits(memory_bytes=256 * MB, processes=64, file_bytes=64 * MB, workspace_bytes=100 * MB,
               transcript_bytes=1 * MB, tmp_bytes=64 * MB)

ATTACKS = {
    "memory": "x = bytearray(2 << 30)\nprint('allocated 2 GiB')",
    "fork": "import subprocess\nsubprocess.run(['bash', '-c', 'f(){ f|f& }; f; sleep 3'])",
    "disk": ("import time\nfor i in range(60):\n    open('repo/fill%d' % i, 'wb').write(b'x' * (10 << 20))\n"
             "    time.sleep(0.05)\ntime.sleep(10)"),
    "big_file": "open('repo/big', 'wb').write(b'x' * (200 << 20))",
    "fifo": "import os\nos.mkfifo('repo/pipe')",
    "sparse": "f = open('repo/sparse', 'wb')\nf.seek(10 << 30)\nf.write(b'x')\nf.close()",
    "stdout": "import sys\nfor i in range(200):\n    sys.stdout.write('y' * 1000000 + '\\n')\nprint('END-OF-OUTPUT')",
}
EXPECTED = {"memory": "limit_memory", "fork": "limit_processes", "disk": "limit_workspace_bytes",
            "big_file": "limit_file_size", "fifo": "unsafe_workspace", "sparse": "unsafe_workspace"}


def solver_session(root: Path, name: str, code: str, limits: Limits):
    run = root / "campaign" / "runs" / name
    workspace = run / "work" / "solve-r0001-0"
    (workspace / "repo").mkdir(parents=True)
    spec = load_roles_dir(ROLES)["solver"]
    argv = [sys.executable, "-c", code, "{tools}", "{max_turns}", "{cost_cap_usd}"]
    req = SessionRequest(role=spec, manifest_sha256=manifest_sha256(ROLES / "solver.toml"), runtime="command",
                         runtime_options={"argv": argv, "network": "none"}, workspace=workspace,
                         session_dir=run / "sessions" / "0001-solver", prompt="solve it", inputs={}, limits=limits)
    started = time.monotonic()
    result = run_session(req, LocalProvider(isolation="bwrap", kill_grace_s=1.0))
    return result, req, time.monotonic() - started


@pytest.mark.parametrize("attack", sorted(EXPECTED))
def test_agent_session_attack_is_bounded_and_the_session_fails_with_the_reason(targets, attack):
    limits = SMALL if attack != "sparse" else Limits(file_bytes=None, workspace_bytes=100 * MB)
    result, req, took = solver_session(targets.root, f"bounds-{attack}", ATTACKS[attack], limits)
    assert result.status == "failed" and result.reason == EXPECTED[attack], (result.reason, result.evidence)
    assert took < 60
    record = json.loads((req.session_dir / "result.json").read_text())
    assert record["reason"] == EXPECTED[attack]
    if attack == "sparse":
        st = os.stat(req.workspace / "repo" / "sparse")
        assert st.st_size > 10 << 30 and st.st_blocks * 512 < MB     # nothing densified it


def test_agent_session_200mb_of_stdout_keeps_head_and_tail_only(targets):
    result, req, took = solver_session(targets.root, "bounds-stdout", ATTACKS["stdout"], SMALL)
    assert result.status == "ok", result.evidence
    stdout = (req.session_dir / "stdout.txt").read_bytes()
    assert len(stdout) < 2 * MB
    assert b"bytes cut here" in stdout and stdout.rstrip().endswith(b"END-OF-OUTPUT")


BOUNDS_TEST = '''import os
import unittest

ATTACKS = {attacks!r}


class Bounds(unittest.TestCase):
    def test_bound(self):
        code = ATTACKS.get(os.environ.get("ATTACK", ""))
        if code:
            # the attacks write under repo/: a trial runs in the repository itself (REPO_DIR, the
            # container's fixed /app), so the prefix is the working directory there
            os.chdir(os.environ["REPO_DIR"])
            exec(code.replace("'repo/", "'"), {{}})
'''


@pytest.fixture(scope="module")
def bounds_bundle(targets):
    src = make_verified_pr(targets.root / "repos", "bounds",
                           extra_files={"tests/test_bounds.py": BOUNDS_TEST.format(attacks=ATTACKS)})
    bundle = targets.campaign / "runs" / "bounds-gate" / "task"
    bundle.mkdir(parents=True)
    build_bundle_from_git(src, bundle)
    return bundle


GATE_EXPECTED = {"memory": "memory", "fork": "processes", "disk": "workspace_bytes", "big_file": "file_size"}


@pytest.mark.parametrize("attack", sorted(GATE_EXPECTED))
def test_gate_attack_is_bounded_and_the_trial_says_which_bound(targets, bounds_bundle, attack):
    work = targets.campaign / "runs" / "bounds-gate" / "work" / f"gates-{attack}"
    started = time.monotonic()
    trial = run_trial(bounds_bundle, "reference", provider=LocalProvider(isolation="bwrap", kill_grace_s=1.0),
                      workdir=work, timeout_s=60, env={"ATTACK": attack}, limits=SMALL)
    assert time.monotonic() - started < 60
    assert trial.reward != 1.0, trial.detail            # the gate does not pass by exhausting the host
    if attack == "big_file":
        # Python gets EFBIG (it ignores SIGXFSZ): the PR's test fails, nothing past the bound exists
        assert "File too large" in trial.detail or "file_size" in trial.detail, trial.detail
        assert all(p.stat().st_size <= SMALL.file_bytes for p in (work / "repo").rglob("*") if p.is_file())
    else:
        assert f"hit its {GATE_EXPECTED[attack]} bound" in trial.detail, trial.detail



@pytest.mark.parametrize("file_mb", [64, 512])
def test_gate_200mb_of_stdout_is_kept_bounded_and_scored_or_refused(targets, bounds_bundle, file_mb):
    # PR test code that prints 200 MB and then passes. Under a 512 MB file bound the gate scores as
    # the tests do and the kept output is the transcript bound's first and last halves, the cut
    # said; under 64 MB the output reached the bound, so the tests' exit status means nothing: no
    # reward, the bound named
    work = targets.campaign / "runs" / "bounds-gate" / "work" / f"gates-stdout-{file_mb}"
    limits = Limits(memory_bytes=256 * MB, processes=64, file_bytes=file_mb * MB, workspace_bytes=600 * MB,
                    transcript_bytes=1 * MB, tmp_bytes=64 * MB)
    trial = run_trial(bounds_bundle, "reference", provider=LocalProvider(isolation="bwrap", kill_grace_s=1.0),
                      workdir=work, timeout_s=120, env={"ATTACK": "stdout"}, limits=limits)
    kept = work / "logs" / "verifier" / "test-output.txt"
    if file_mb == 64:
        assert trial.reward is None and "reached the file-size bound" in trial.detail, trial.detail
        return
    assert trial.reward == 1.0, trial.detail
    out = kept.read_bytes()
    assert len(out) <= MB + 200, len(out)
    assert b"bytes cut here; the transcript keeps the first and the last" in out
    assert b"END-OF-OUTPUT" in out
    stored = sum(p.stat().st_size for p in (work / "logs").rglob("*") if p.is_file())
    assert stored < 2 * MB, stored


def test_gate_without_an_attack_still_scores_1_under_the_small_bounds(targets, bounds_bundle):
    work = targets.campaign / "runs" / "bounds-gate" / "work" / "gates-none"
    trial = run_trial(bounds_bundle, "reference", provider=LocalProvider(isolation="bwrap", kill_grace_s=1.0),
                      workdir=work, timeout_s=60, limits=SMALL)
    assert trial.reward == 1.0, trial.detail


def test_trial_of_a_repo_with_a_fifo_is_refused_not_a_crash(targets, bounds_bundle):
    repo = targets.root / "fifo-repo"
    (repo / "sub").mkdir(parents=True)
    os.mkfifo(repo / "sub" / "pipe")
    trial = run_trial(bounds_bundle, repo, provider=LocalProvider(isolation="bwrap"),
                      workdir=targets.root / "fifo-trial", timeout_s=60)
    assert trial.reward is None and "FIFO" in trial.detail and "sub/pipe" in trial.detail


def test_trial_of_a_repo_with_a_10gib_sparse_file_copies_it_sparse(targets, bounds_bundle):
    import shutil
    repo = targets.root / "sparse-repo"
    shutil.copytree(bounds_bundle / "environment" / "repo", repo)
    with open(repo / "huge.bin", "wb") as fh:
        fh.seek(10 << 30)
        fh.write(b"x")
    work = targets.root / "sparse-trial"
    started = time.monotonic()
    trial = run_trial(bounds_bundle, repo, provider=LocalProvider(isolation="bwrap"), workdir=work, timeout_s=60,
                      limits=Limits(file_bytes=None, workspace_bytes=None))
    assert time.monotonic() - started < 30
    copied = os.stat(work / "repo" / "huge.bin")
    assert copied.st_size == (10 << 30) + 1 and copied.st_blocks * 512 < MB
    assert trial.reward == 0.0, trial.detail          # the starting repo: the PR's tests fail, not crash
    refused = run_trial(bounds_bundle, repo, provider=LocalProvider(isolation="bwrap"),
                        workdir=targets.root / "sparse-trial-2", timeout_s=60, limits=Limits(workspace_bytes=100 * MB))
    assert refused.reward is None and "more than" in refused.detail
