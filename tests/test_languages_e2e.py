"""Real toolchains end to end: one real fix and one no-op PR per test runner, whole campaigns.

For pytest, unittest, go test, cargo test, node --test, jest and JUnit from Java (tests/langrepos.py
builds the repositories with real git): the fix ends `verified` with FAIL_TO_PASS = exactly the
PR's new test and PASS_TO_PASS = exactly the base's test; the no-op PR (its new test already
passes on the base) is not verified, because the empty solution passes. Local backend, the real
controller, bubblewrap, oracle roles; each plan declares its environment: the system toolchains
only (Debian's go, rustc/cargo, node, JDK + JUnit, jest from npm), one toolchain outside /usr
(Go copied to /opt/sweep-ci/go by .ci/run) declared with its path and bind, and pytest from the
test venv declared as a prefix. CI installs every toolchain (.ci/run); a machine without one
skips that language, never CI.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from runstate import load_record, run_dir
from sweep.harbor.trial import TrialResult
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import local_plan
from tests.langrepos import JUNIT_JAR, LANGUAGES

import sys

OUTSIDE_USR_GO = Path("/opt/sweep-ci/go")
IN_CI = os.environ.get("CI") == "true"
# the gates take per-test results from the runner package (issue 23 item 1: go, cargo, node, jest,
# JUnit XML) once a trial carries them; before that only pytest and unittest write a report
HAVE_RUNNERS = "results" in getattr(TrialResult, "__dataclass_fields__", {})


def _needs(language: str) -> str | None:
    """Why this machine cannot run `language` (None: it can)."""
    tools = {"go": [str(OUTSIDE_USR_GO / "bin" / "go")], "cargo": ["cargo", "rustc"], "node": ["node"],
             "jest": ["node", "jest"], "junit": ["javac", "java", JUNIT_JAR]}.get(language, [])
    missing = [t for t in tools if not (os.path.exists(t) if t.startswith("/") else shutil.which(t, path="/usr/bin:/bin"))]
    if missing:
        return f"{', '.join(missing)} not installed (.ci/run installs them)"
    if language not in ("pytest", "unittest") and not HAVE_RUNNERS:
        return "per-test results for this runner come with sweep.harbor.runners"
    return None


def _environment(language: str) -> dict:
    toolchains: dict = {}
    if language == "pytest":
        toolchains["python"] = {"prefix": sys.prefix}               # the test venv: it has pytest
    if language == "go":                                            # outside /usr: visible only declared
        toolchains["go"] = {"path": [str(OUTSIDE_USR_GO / "bin")], "bind": [str(OUTSIDE_USR_GO)],
                            "variables": {"GOROOT": str(OUTSIDE_USR_GO), "GOFLAGS": "-mod=mod",
                                          "GOTOOLCHAIN": "local"}}
    if language == "cargo":
        toolchains["cargo"] = {"variables": {"CARGO_NET_OFFLINE": "true"}}
    return {"toolchains": toolchains}


def _plan(tmp_path: Path, language: str, src: dict) -> Path:
    options = {"test_command": src["test_command"]}
    if src.get("test_runner"):
        options["test_runner"] = src["test_runner"]
    cands = [{"id": f"{language}-{kind}", "repo": src["repo"], "base": src["base"], "head": src[kind],
              "options": options} for kind in ("fix", "noop")]
    plan = local_plan(cands, max_parallel=2, environment=_environment(language),
                      defaults={"quality": {"max_repairs": 0, "gate_repeats": 1, "run_rollout": False}})
    return write_plan(tmp_path / "plan.json", plan)


def _gates(camp: Path, run_id: str) -> dict:
    files = sorted((run_dir(camp, run_id) / "evidence").glob("gates-r*.json"))
    assert files, f"{run_id}: no gate evidence"
    return json.loads(files[-1].read_text())["gates"]


def _named(ids: list[str], names: list[str]) -> list[str]:
    """Each of `names` matched to exactly one id that contains it."""
    out = []
    for name in names:
        hits = [i for i in ids if name in i]
        assert len(hits) == 1, (name, ids)
        out += hits
    return out


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_a_real_fix_verifies_and_a_noop_does_not(tmp_path, language):
    why = _needs(language)
    if why:
        if IN_CI and "runners" not in why:
            pytest.fail(f"CI must have every toolchain: {why}")
        pytest.skip(why)
    src = LANGUAGES[language](tmp_path / "repos")
    camp = tmp_path / "camp"
    r = sweep("init", str(_plan(tmp_path, language, src)), "--campaign", str(camp), timeout=300)
    # init's readiness check runs the command as the controller's will (with the plan's test_runner)
    assert "readiness" not in r.stderr, r.stderr
    st = tick_until_done(camp, timeout=600, env={"PATH": "/usr/bin:/bin"})
    fix, noop = (load_record(run_dir(camp, f"{language}-{k}")).value for k in ("fix", "noop"))
    assert fix is not None and noop is not None
    assert fix.outcome is not None and fix.outcome.value == "verified", (fix.reason, fix.last_error,
                                                                         json.dumps(_gates(camp, fix.run_id))[:3000])
    f2p = _gates(camp, fix.run_id)["fail_to_pass"]
    assert f2p["fail_to_pass_count"] == 1 and _named(f2p["fail_to_pass"], src["f2p"])
    assert f2p["pass_to_pass_count"] == len(src["p2p"]) and _named(f2p["pass_to_pass"], src["p2p"])
    # the no-op: its new test passes before the fix, so nothing fails before and passes after
    assert noop.outcome is not None and noop.outcome.value == "generated_unverified", noop
    assert noop.reason == "passes_before_fix", (noop.reason, noop.last_error)
    gates = _gates(camp, noop.run_id)
    assert gates["empty"]["ok"] is False and gates["fail_to_pass"]["fail_to_pass_count"] == 0, gates
    assert gates["fail_to_pass"]["pass_to_pass_count"] == len(src["noop_p2p"])
    assert st["outcomes"] == {"verified": 1, "generated_unverified": 1}
    # readiness ran once per run, in the declared environment, before the author
    ready = [json.loads(line) for line in (run_dir(camp, fix.run_id) / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in ready]
    assert kinds.count("readiness") == 1 and kinds.index("readiness") < kinds.index("session_started")
    if language == "go":
        assert f"ok: {OUTSIDE_USR_GO}/bin/go ran" in next(e["detail"] for e in ready if e["kind"] == "readiness")


@pytest.mark.slurm
def test_through_sbatch_on_the_test_cluster_with_a_login_path(slurm_cluster, tmp_path):
    """The pytest pair through real sbatch and real controller jobs, ticked with a bare login-like
    PATH (what a scrontab tick has): the declared environment is what the controllers get."""
    src = LANGUAGES["pytest"](tmp_path / "repos")
    plan_path = _plan(tmp_path, "pytest", src)
    plan = json.loads(plan_path.read_text())
    plan["scheduler"] = {"backend": "slurm", "lanes": {"cpu": {"partition": "cpu", "time": "15"},
                                                       "gpu": {"partition": "gpu", "time": "15"}}}
    write_plan(plan_path, plan)
    env = {"SLURM_CONF": str(slurm_cluster.conf), "PATH": "/usr/bin:/bin"}
    camp = tmp_path / "camp"
    sweep("init", str(plan_path), "--campaign", str(camp), env=env, timeout=300)
    st = tick_until_done(camp, timeout=600, env=env, pause=1.0)
    assert st["outcomes"] == {"verified": 1, "generated_unverified": 1}, st
    fix = load_record(run_dir(camp, "pytest-fix")).value
    assert fix is not None and not fix.job_id.startswith("local-")
    f2p = _gates(camp, "pytest-fix")["fail_to_pass"]
    assert _named(f2p["fail_to_pass"], src["f2p"]) and _named(f2p["pass_to_pass"], src["p2p"])
    events = [json.loads(line) for line in (run_dir(camp, "pytest-fix") / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "readiness" and e["detail"].startswith(f"ok: {sys.prefix}/bin/python3") for e in events)
