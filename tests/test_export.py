"""`sweep export`: the demo's tasks as a Harbor dataset, checked against Harbor's default lint rules.

The rules below are encoded from Harbor 0.26.0's documentation of the task format
(harborframework.com/docs/tasks, /docs/tasks/network-policy) and what its `harbor lint` flags by
default (recorded in the project's research notes): they are written here independently of
sweep/export.py so the test can catch the exporter breaking them.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.campaigns import REPO, sweep

HARBOR_VERSION = "0.26.0"
TASK_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*/[a-z0-9][a-z0-9._-]*$")     # "<org>/<name>"
PINNED_FROM_RE = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+?):([^\s@/]+)@sha256:[0-9a-f]{64}(\s+AS\s+\S+)?$", re.I)
NETWORK_MODES = {"public", "no-network", "allowlist"}


def harbor_lint(task: Path) -> list[str]:
    """Harbor's default task rules (0.26.0), one message per violation."""
    problems = []
    try:
        doc = tomllib.loads((task / "task.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return [f"task.toml unreadable: {exc}"]
    if not isinstance(doc.get("schema_version", doc.get("version")), str):
        problems.append("task.toml: no schema_version")
    name = doc.get("task", {}).get("name")
    if not isinstance(name, str) or not TASK_NAME_RE.match(name):
        problems.append(f"[task] name {name!r} is not <org>/<name>")
    instruction = task / "instruction.md"
    if not instruction.is_file() or not instruction.read_text().strip():
        problems.append("instruction.md missing or blank")
    dockerfile = task / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        problems.append("environment/Dockerfile missing")
    else:
        lines = [ln.strip() for ln in dockerfile.read_text().splitlines()
                 if ln.strip() and not ln.strip().startswith("#")]
        froms = [ln for ln in lines if ln.upper().startswith("FROM ")]
        if not froms:
            problems.append("Dockerfile has no FROM")
        for ln in froms:
            m = PINNED_FROM_RE.match(ln)
            if not m or m.group(2) == "latest":
                problems.append(f"unpinned base image: {ln!r} (expected NAME:TAG@sha256:DIGEST)")
        users = [ln.split(None, 1)[1].strip() for ln in lines if ln.upper().startswith("USER ")]
        if not users or users[-1].split(":")[0] in ("root", "0"):
            problems.append("the image's last USER is root (the agent must not run as root)")
    agent_user = doc.get("agent", {}).get("user")
    if agent_user in (None, "root", 0, "0"):
        problems.append(f"[agent] user is {agent_user!r}: the agent runs as root")
    verifier = doc.get("verifier", {})
    if verifier.get("environment_mode", "shared") == "shared":
        problems.append("[verifier] environment_mode is shared "
                        "(the agent could tamper with the verifier's environment)")
    mode = verifier.get("network_mode")
    if mode not in NETWORK_MODES:
        problems.append(f"[verifier] network_mode {mode!r} not stated (Harbor defaults to public)")
    if mode == "allowlist" and not isinstance(verifier.get("allowed_hosts"), list):
        problems.append("[verifier] allowlist without allowed_hosts")
    for section in ("verifier", "agent"):
        t = doc.get(section, {}).get("timeout_sec")
        if not isinstance(t, (int, float)) or t <= 0:
            problems.append(f"[{section}] timeout_sec missing or not positive")
    test_sh = task / "tests" / "test.sh"
    if not test_sh.is_file():
        problems.append("tests/test.sh missing")
    for top in ("tests", "solution"):
        for script in (task / top).rglob("*.sh"):
            if not os.access(script, os.X_OK):
                problems.append(f"{script.relative_to(task)} is not executable")
    if not (task / "solution" / "solve.sh").is_file():
        problems.append("solution/solve.sh missing")
    for path in task.rglob("*"):
        leaves = path.is_symlink() and (os.path.isabs(os.readlink(path))
                                        or not path.resolve().is_relative_to(task.resolve()))
        if leaves:
            problems.append(f"{path.relative_to(task)}: symlink leaves the task")
    return problems


def lint_dataset(out: Path) -> tuple[list[str], list[dict]]:
    problems, names = [], {}
    tasks = [p for p in sorted(out.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    for task in tasks:
        problems += [f"{task.name}: {p}" for p in harbor_lint(task)]
        name = tomllib.loads((task / "task.toml").read_text()).get("task", {}).get("name")
        if name in names:
            problems.append(f"{task.name}: [task] name {name!r} also used by {names[name]}")
        names[name] = task.name
    manifest = json.loads((out / "manifest.json").read_text())
    listed = {t["path"] for t in manifest["tasks"]}
    if listed != {t.name for t in tasks}:
        problems.append(f"manifest lists {sorted(listed)}, DIR has {sorted(t.name for t in tasks)}")
    newest = max((t / "task.toml").stat().st_mtime for t in tasks)
    if (out / "manifest.json").stat().st_mtime < newest:
        problems.append("manifest.json is older than a task: not written last")
    return problems, manifest["tasks"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    sweep("demo", str(root / "demo"), timeout=180)
    return root / "demo" / "campaign"


def test_rules_catch_what_harbor_flags(tmp_path):
    """The encoded rules fail on a bundle as the author writes it (the shape issue 15 found)."""
    from sweep.harbor.samples import make_verified_pr
    from sweep.harbor.pr_bundle import build_bundle_from_git
    bundle = tmp_path / "task"
    build_bundle_from_git(make_verified_pr(tmp_path / "repos"), bundle)
    problems = "\n".join(harbor_lint(bundle))
    for expected in ("[task] name", "unpinned base image", "last USER is root", "environment_mode is shared",
                     "network_mode"):
        assert expected in problems, problems


def test_demo_export_is_a_lint_clean_harbor_dataset(demo, tmp_path):
    out = tmp_path / "dataset"
    r = sweep("export", str(out), "--campaign", str(demo), "--include-unverified")
    assert "3 added" in r.stdout, r.stdout
    problems, tasks = lint_dataset(out)
    assert problems == [], "\n".join(problems)
    by_run = {t["run_id"]: t for t in tasks}
    assert set(by_run) == {"fix-clamp", "passes-before", "flaky-test"}
    assert by_run["fix-clamp"]["verified"] is True
    assert by_run["passes-before"]["verified"] is False and by_run["flaky-test"]["verified"] is False
    names = {t["name"] for t in tasks}
    assert len(names) == 3
    doc = tomllib.loads((out / "fix-clamp" / "task.toml").read_text())
    meta = doc["metadata"]["sweep"]
    # the demo's verified task: a test that fails before the fix and passes after it
    assert meta["evidence"]["fail_to_pass"] == ["tests.test_mathx.ClampAboveTest.test_above_range_gives_high"]
    assert "tests.test_mathx.MeanTest.test_mean" in meta["evidence"]["pass_to_pass"]
    assert meta["gates"] == {"valid": True, "reference": True, "empty": True, "repeat": True, "fail_to_pass": True}
    assert meta["review"]["verdict"] == "accept" and meta["environment_fidelity"] == "host"
    assert meta["environment_image"] == ""          # the local provider built no image
    reports = list(Path(demo).glob("runs/*/report.md"))
    assert reports and all("Environment fidelity: host" in p.read_text() for p in reports)
    assert set(meta["roles"]) == {"author", "reviewer", "solver"}
    assert all(len(r["manifest_sha256"]) == 64 for r in meta["roles"].values())
    state = json.loads((demo / "runs" / "fix-clamp" / "state.json").read_text())
    assert meta["bundle_sha256"] == state["checkpoints"]["gates"]["bundle_sha256"]
    assert meta["base"] == state["checkpoints"]["intake"]["base"] and meta["cost_usd"] == state["spent_usd"]
    # passes-before: nothing fails before the fix
    pb = tomllib.loads((out / "passes-before" / "task.toml").read_text())["metadata"]["sweep"]
    assert pb["evidence"]["fail_to_pass"] == [] and pb["gates"]["fail_to_pass"] is False
    # only verified tasks without the flag
    only = tmp_path / "verified-only"
    sweep("export", str(only), "--campaign", str(demo))
    assert sorted(p.name for p in only.iterdir()) == ["fix-clamp", "manifest.json"]


def test_exported_verifier_still_scores_the_reference_and_the_empty_solution(demo, tmp_path):
    """The exported task's scripts, run by the trial runner: reference 1, empty 0, and a JUnit report."""
    from sweep.harbor.junit import read_junit
    from sweep.harbor.trial import run_trial
    from sweep.providers import get_provider
    out = tmp_path / "dataset"
    sweep("export", str(out), "--campaign", str(demo))
    provider = get_provider("local")
    ref = run_trial(out / "fix-clamp", "reference", provider=provider, workdir=tmp_path / "ref", timeout_s=120)
    empty = run_trial(out / "fix-clamp", "empty", provider=provider, workdir=tmp_path / "empty", timeout_s=120)
    assert (ref.reward, empty.reward) == (1.0, 0.0), (ref.detail, empty.detail)
    report = read_junit(tmp_path / "ref" / "logs" / "verifier")
    assert report["tests.test_mathx.ClampAboveTest.test_above_range_gives_high"] == "passed"


def test_export_is_incremental_and_never_overwrites(demo, tmp_path):
    out = tmp_path / "dataset"
    sweep("export", str(out), "--campaign", str(demo))
    instr = out / "fix-clamp" / "instruction.md"
    before = (out / "manifest.json").read_bytes()
    r = sweep("export", str(out), "--campaign", str(demo), "--include-unverified")
    assert "2 added, 1 unchanged, 0 collisions" in r.stdout, r.stdout
    assert (out / "manifest.json").read_bytes() != before
    # a task already there with different content: an error naming it, the file left as it is
    instr.write_text("someone else's task\n")
    r = sweep("export", str(out), "--campaign", str(demo), check=False)
    assert r.returncode == 1 and "COLLISION" in r.stderr and "fix-clamp" in r.stderr, (r.stdout, r.stderr)
    assert instr.read_text() == "someone else's task\n"
    # an unpinned base image is refused before anything is written
    r = sweep("export", str(tmp_path / "other"), "--campaign", str(demo), "--base-image", "python:3.11-slim",
              check=False)
    assert r.returncode == 2 and "not pinned" in r.stderr and not (tmp_path / "other").exists()


def test_export_killed_anywhere_leaves_whole_tasks_or_none(demo, tmp_path):
    """SIGKILL at varying points: every task directory present is complete; the next export finishes."""
    reference = tmp_path / "reference"
    sweep("export", str(reference), "--campaign", str(demo), "--include-unverified")
    from sweep.export import tree_digest
    want = {p.name: tree_digest(p) for p in reference.iterdir() if p.is_dir()}
    out = tmp_path / "dataset"
    env = {**os.environ}
    for i, delay in enumerate((0.25, 0.35, 0.45, 0.55, 0.7, 0.9)):
        proc = subprocess.Popen([sys.executable, "-m", "sweep", "export", str(out), "--campaign", str(demo),
                                 "--include-unverified"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if not out.exists():
            continue
        for task in out.iterdir():
            if task.is_dir() and not task.name.startswith("."):
                assert tree_digest(task) == want[task.name], f"kill {i}: {task.name} is incomplete"
        if (out / "manifest.json").exists():
            json.loads((out / "manifest.json").read_text())           # never torn
    r = sweep("export", str(out), "--campaign", str(demo), "--include-unverified")
    assert "0 collisions" in r.stdout
    assert not [p for p in out.iterdir() if p.name.startswith(".export-tmp-")]
    assert {p.name: tree_digest(p) for p in out.iterdir() if p.is_dir()} == want
    assert lint_dataset(out)[0] == []


def test_scripts_are_executable_even_when_the_bundle_lost_the_bit(demo, tmp_path):
    """An agent's bundle may carry test.sh / solve.sh without the executable bit: the export sets it."""
    task = demo / "runs" / "fix-clamp" / "task"
    for rel in ("tests/test.sh", "solution/solve.sh"):
        os.chmod(task / rel, 0o644)
    try:
        out = tmp_path / "dataset"
        sweep("export", str(out), "--campaign", str(demo))
        for rel in ("tests/test.sh", "solution/solve.sh"):
            assert os.access(out / "fix-clamp" / rel, os.X_OK), rel
        assert not os.access(out / "fix-clamp" / "solution" / "solution.patch", os.X_OK)
        assert lint_dataset(out)[0] == []
    finally:
        for rel in ("tests/test.sh", "solution/solve.sh"):
            os.chmod(task / rel, 0o755)


def _copy_campaign(demo: Path, dest: Path) -> Path:
    import shutil
    shutil.copytree(demo, dest, symlinks=True)
    return dest


def _rewrite(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_evidence_of_an_older_sweep_exports_the_same_metadata(demo, tmp_path):
    """Evidence files read through their models: files without the fields later sweeps added
    (hash seeds, isolation, per-test counts, the session's status) export as before."""
    camp = _copy_campaign(demo, tmp_path / "camp")
    rdir = camp / "runs" / "fix-clamp"
    first = tmp_path / "first"
    sweep("export", str(first), "--campaign", str(camp))
    gates = sorted((rdir / "evidence").glob("gates-r*.json"))[-1]
    _rewrite(gates, lambda d: [d.pop(k, None) for k in ("hash_seeds", "isolation")])
    for result in (rdir / "sessions").glob("*/result.json"):
        _rewrite(result, lambda d: [d.pop(k, None) for k in ("status", "cost_usd", "network", "endpoints")])
    again = tmp_path / "again"
    sweep("export", str(again), "--campaign", str(camp))
    meta = tomllib.loads((again / "fix-clamp" / "task.toml").read_text())["metadata"]["sweep"]
    assert meta == tomllib.loads((first / "fix-clamp" / "task.toml").read_text())["metadata"]["sweep"]
    assert meta["evidence"]["fail_to_pass_count"] == 1 and meta["review"]["verdict"] == "accept"


def test_malformed_evidence_is_refused_naming_the_file_and_the_field(demo, tmp_path):
    camp = _copy_campaign(demo, tmp_path / "camp")
    gates = sorted((camp / "runs" / "fix-clamp" / "evidence").glob("gates-r*.json"))[-1]
    _rewrite(gates, lambda d: d["gates"]["fail_to_pass"].update(fail_to_pass_count="many"))
    out = tmp_path / "dataset"
    r = sweep("export", str(out), "--campaign", str(camp))
    assert "0 added" in r.stdout and "skipped" in r.stdout, r.stdout
    assert str(gates.name) in r.stdout and "gates.fail_to_pass.fail_to_pass_count" in r.stdout, r.stdout
    assert not (out / "fix-clamp").exists()
    # a review verdict whose findings are not a list, and a session result that is not an object
    camp2 = _copy_campaign(demo, tmp_path / "camp2")
    review = sorted((camp2 / "runs" / "fix-clamp" / "evidence").glob("review-r*.json"))[-1]
    _rewrite(review, lambda d: d["verdict"].update(findings="all good"))
    r = sweep("export", str(tmp_path / "d2"), "--campaign", str(camp2))
    assert review.name in r.stdout and "verdict.findings" in r.stdout, r.stdout
    camp3 = _copy_campaign(demo, tmp_path / "camp3")
    result = sorted((camp3 / "runs" / "fix-clamp" / "sessions").glob("*/result.json"))[0]
    result.write_text("[1, 2]")
    r = sweep("export", str(tmp_path / "d3"), "--campaign", str(camp3))
    assert "result.json" in r.stdout and "fix-clamp" in r.stdout and "0 added" in r.stdout, r.stdout
