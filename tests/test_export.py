"""`sweep export`: the demo's tasks as a Harbor dataset: layout, metadata, images, crash safety.

What Harbor itself makes of the export (its loaders, `harbor lint`, its network plan and
environment checks, `harbor sync`) is tests/test_export_harbor.py, with Harbor 0.26.0; this file
checks what sweep promises on its own side, and runs the exported scripts with sweep's trial runner.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.campaigns import REPO, sweep

UNVERIFIED = "unverified"


def dataset_problems(root: Path) -> list[str]:
    """What breaks sweep's own promises about a dataset root: dataset.toml and tasks.jsonl list
    exactly the task directories, with Harbor's digest, and were written after them; no hidden
    directory; task names unique; scripts executable."""
    from sweep.export import harbor_digest
    problems = []
    tasks = sorted(p for p in root.iterdir() if p.is_dir() and (p / "task.toml").is_file())
    hidden = [p.name for p in root.iterdir() if p.name.startswith(".")]
    if hidden:
        problems.append(f"hidden entries in the dataset root: {hidden}")
    manifest = tomllib.loads((root / "dataset.toml").read_text())
    listed = {t["name"]: t["digest"] for t in manifest["tasks"]}
    names = {}
    for task in tasks:
        doc = tomllib.loads((task / "task.toml").read_text())
        name = doc["task"]["name"]
        if name in names:
            problems.append(f"{task.name}: [task] name {name!r} also used by {names[name]}")
        names[name] = task.name
        if name.split("/")[1] != task.name:
            problems.append(f"{task.name}: directory is not the task's short name {name!r}")
        if listed.get(name) != harbor_digest(task):
            problems.append(f"{task.name}: dataset.toml digest {listed.get(name)} != {harbor_digest(task)}")
        for rel in ("tests/test.sh", "solution/solve.sh"):
            if not os.access(task / rel, os.X_OK):
                problems.append(f"{task.name}/{rel} is not executable")
    if set(listed) != set(names):
        problems.append(f"dataset.toml lists {sorted(listed)}, the root has {sorted(names)}")
    index = [json.loads(line) for line in (root / "tasks.jsonl").read_text().splitlines()]
    if sorted(i["path"] for i in index) != [t.name for t in tasks]:
        problems.append(f"tasks.jsonl lists {[i['path'] for i in index]}")
    if tasks:
        newest = max((t / "task.toml").stat().st_mtime for t in tasks)
        for name in ("dataset.toml", "tasks.jsonl", "README.md"):
            if (root / name).stat().st_mtime < newest:
                problems.append(f"{name} is older than a task: not written last")
    return problems


def host_paths_in(root: Path, needles: list[str]) -> list[str]:
    """Files of the export (outside the repositories) that contain one of the host's paths."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or "environment/repo" in path.as_posix() or "/files/" in path.as_posix():
            continue
        text = path.read_text(errors="replace")
        found += [f"{path.relative_to(root)}: {n}" for n in needles if n in text]
    return found


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    sweep("demo", str(root / "demo"), timeout=180)
    return root / "demo" / "campaign"


def test_demo_export_is_a_dataset_with_verified_and_unverified_apart(demo, tmp_path):
    out = tmp_path / "dataset"
    r = sweep("export", str(out), "--campaign", str(demo), "--include-unverified")
    assert "3 added" in r.stdout, r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "dataset.toml", "fix-clamp", "tasks.jsonl",
                                                     UNVERIFIED]
    assert sorted(p.name for p in (out / UNVERIFIED).iterdir()) == ["README.md", "dataset.toml", "flaky-test",
                                                                   "passes-before", "tasks.jsonl"]
    for root in (out, out / UNVERIFIED):
        assert dataset_problems(root) == [], "\n".join(dataset_problems(root))
    # no hidden work directory anywhere near the dataset once the export is done
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    manifest = tomllib.loads((out / "dataset.toml").read_text())
    assert manifest["dataset"]["name"] == "sweep/dataset" and manifest["dataset"]["version"] == "1.0.0"
    index = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert [(i["path"], i["verified"], i["fidelity"], i["image_source"]) for i in index] == [
        ("fix-clamp", True, "host", "derived")]
    assert index[0]["evidence"]["fail_to_pass"] == 1 and index[0]["evidence"]["pass_to_pass"] == 3
    unverified = {i["path"]: i for i in map(json.loads, (out / UNVERIFIED / "tasks.jsonl").read_text().splitlines())}
    assert {k: v["verified"] for k, v in unverified.items()} == {"flaky-test": False, "passes-before": False}
    assert all("generated_unverified" in v["unverified_reason"] for v in unverified.values())
    card = (out / "README.md").read_text()
    for expected in ("1 verified task(s) from 1 source repository", "| 1 | 3 | 2 | ok | accept | host | derived (python) |",
                     "## Limitations", "licence"):
        assert expected in card, card
    assert "Why each task is not verified" in (out / UNVERIFIED / "README.md").read_text()
    doc = tomllib.loads((out / "fix-clamp" / "task.toml").read_text())
    assert doc["schema_version"] == "1.4"
    # the verifier's no-network belongs to its own container: no phase override to switch at run time
    assert "network_mode" not in doc["verifier"] and doc["verifier"]["environment"]["network_mode"] == "no-network"
    assert doc["verifier"]["environment"]["cpus"] == doc["environment"]["cpus"]
    assert doc["agent"]["user"] == "agent" and doc["artifacts"] == [{"source": "/app"}]
    meta = doc["metadata"]["sweep"]
    # the demo's verified task: a test that fails before the fix and passes after it
    assert meta["evidence"]["fail_to_pass"] == ["tests.test_mathx.ClampAboveTest.test_above_range_gives_high"]
    assert "tests.test_mathx.MeanTest.test_mean" in meta["evidence"]["pass_to_pass"]
    assert meta["gates"] == {"valid": True, "verifier": True, "reference": True, "empty": True, "repeat": True,
                             "fail_to_pass": True, "selected": True}
    assert meta["review"]["verdict"] == "accept" and meta["environment_fidelity"] == "host"
    assert meta["environment_image"] == ""          # the local provider built no image
    assert (meta["image_source"], meta["image_language"]) == ("derived", "python")
    reports = list(Path(demo).glob("runs/*/report.md"))
    assert reports and all("Environment fidelity: host" in p.read_text() for p in reports)
    assert set(meta["roles"]) == {"author", "reviewer", "solver"}
    assert all(len(r["manifest_sha256"]) == 64 for r in meta["roles"].values())
    state = json.loads((demo / "runs" / "fix-clamp" / "state.json").read_text())
    assert meta["bundle_sha256"] == state["checkpoints"]["gates"]["bundle_sha256"]
    assert meta["base"] == state["checkpoints"]["intake"]["base"] and meta["cost_usd"] == state["spent_usd"]
    # a local repository is named by its directory, never by the host's path
    # (the plan's repository: source.json names sweep's private copy of its two commits)
    repo_path = json.loads((demo / "runs" / "fix-clamp" / "candidate.json").read_text())["candidate"]["repo"]
    private = json.loads((demo / "runs" / "fix-clamp" / "source.json").read_text())["repo"]
    assert private == str(demo / "runs" / "fix-clamp" / "source" / "repo")
    assert os.path.isabs(repo_path) and meta["source_repo"] == os.path.basename(repo_path)
    assert meta["source_pr"] == f"{meta['source_repo']}@{meta['base']}..{meta['head']}"
    assert host_paths_in(out, [str(demo.parent), repo_path, private, str(tmp_path), str(Path.home())]) == []
    # passes-before: nothing fails before the fix
    pb = tomllib.loads((out / UNVERIFIED / "passes-before" / "task.toml").read_text())["metadata"]["sweep"]
    assert pb["evidence"]["fail_to_pass"] == [] and pb["gates"]["fail_to_pass"] is False and pb["verified"] is False
    # without the flag: the verified tasks only, and no unverified/ directory at all
    only = tmp_path / "verified-only"
    sweep("export", str(only), "--campaign", str(demo))
    assert sorted(p.name for p in only.iterdir()) == ["README.md", "dataset.toml", "fix-clamp", "tasks.jsonl"]


def test_exported_verifier_still_scores_the_reference_and_the_empty_solution(demo, tmp_path):
    """The exported task's scripts (sweep's harness, naming the recorded ids), run by the trial
    runner: reference 1, empty 0, each recorded test reported."""
    from sweep.harbor.trial import run_trial
    from sweep.providers import get_provider
    out = tmp_path / "dataset"
    sweep("export", str(out), "--campaign", str(demo))
    provider = get_provider("local")
    ref = run_trial(out / "fix-clamp", "reference", provider=provider, workdir=tmp_path / "ref", timeout_s=120)
    empty = run_trial(out / "fix-clamp", "empty", provider=provider, workdir=tmp_path / "empty", timeout_s=120)
    assert (ref.reward, empty.reward) == (1.0, 0.0), (ref.detail, empty.detail)
    ids = (out / "fix-clamp" / "tests" / "test_ids.txt").read_text().splitlines()
    assert ids[0] == "tests.test_mathx.ClampAboveTest.test_above_range_gives_high" and len(ids) > 1
    assert ref.results is not None and all(ref.results[i] == "passed" for i in ids)
    assert "all" in ref.detail and "recorded tests passed" in ref.detail


def test_export_is_incremental_and_never_overwrites(demo, tmp_path):
    out = tmp_path / "dataset"
    sweep("export", str(out), "--campaign", str(demo))
    instr = out / "fix-clamp" / "instruction.md"
    before = (out / "dataset.toml").read_bytes()
    r = sweep("export", str(out), "--campaign", str(demo), "--include-unverified")
    assert "2 added, 1 unchanged, 0 collisions" in r.stdout, r.stdout
    assert (out / "dataset.toml").read_bytes() == before          # the verified dataset did not change
    assert dataset_problems(out / UNVERIFIED) == []
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
    def tasks(root: Path) -> dict[str, Path]:
        return {p.name: p for p in [*root.iterdir(), *(root / UNVERIFIED).glob("*")] if (p / "task.toml").is_file()}

    want = {name: tree_digest(p) for name, p in tasks(reference).items()}
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
        # Harbor loads every directory of a dataset root that has a task.toml, hidden ones too: none
        # may ever be half-built, and the staging directory is outside the root. A kill during an
        # atomic write may leave its temp file (a file, which Harbor never loads): the next export removes it
        assert not [p.name for p in out.iterdir() if p.name.startswith(".") and p.is_dir()], f"kill {i}"
        for name, task in tasks(out).items():
            assert tree_digest(task) == want[name], f"kill {i}: {name} is incomplete"
        if (out / "dataset.toml").exists():
            tomllib.loads((out / "dataset.toml").read_text())           # never torn
    r = sweep("export", str(out), "--campaign", str(demo), "--include-unverified")
    assert "0 collisions" in r.stdout
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]     # the staging directory is gone
    assert not [*out.glob(".*"), *(out / UNVERIFIED).glob(".*")]                  # and every killed write's temp file
    assert {name: tree_digest(p) for name, p in tasks(out).items()} == want
    assert dataset_problems(out) == [] and dataset_problems(out / UNVERIFIED) == []


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
        assert dataset_problems(out) == []
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


def _set_test_command(camp: Path, run_id: str, argv: list[str]) -> None:
    path = camp / "runs" / run_id / "task" / "tests" / "test_command.txt"
    path.write_text("".join(a + "\n" for a in argv))


def test_image_is_derived_from_the_test_commands_language_and_must_run_it(demo, tmp_path):
    """A verified task's exported image runs its test command, or the task is not verified in the
    export: `node --test` gets Node, `make` (no toolchain sweep knows) is refused, a host path too."""
    camp = _copy_campaign(demo, tmp_path / "camp")
    _set_test_command(camp, "fix-clamp", ["node", "--test"])
    out = tmp_path / "node"
    sweep("export", str(out), "--campaign", str(camp))
    docker = (out / "fix-clamp" / "environment" / "Dockerfile").read_text()
    assert "nodejs npm" in docker and "python3-venv" not in docker, docker
    meta = tomllib.loads((out / "fix-clamp" / "task.toml").read_text())["metadata"]["sweep"]
    assert (meta["verified"], meta["image_language"], meta["image_source"]) == (True, "node", "derived")

    _set_test_command(camp, "fix-clamp", ["make", "test"])
    out = tmp_path / "make"
    r = sweep("export", str(out), "--campaign", str(camp))
    assert "0 added" in r.stdout and "'make', which the python image does not provide" in r.stdout, r.stdout
    assert not (out / "fix-clamp").exists() and tomllib.loads((out / "dataset.toml").read_text())["tasks"] == []
    r = sweep("export", str(out), "--campaign", str(camp), "--include-unverified")
    meta = tomllib.loads((out / UNVERIFIED / "fix-clamp" / "task.toml").read_text())["metadata"]["sweep"]
    assert meta["verified"] is False and "'make'" in meta["unverified_reason"], meta
    assert "unverified" in tomllib.loads((out / UNVERIFIED / "fix-clamp" / "task.toml").read_text())["metadata"]["tags"]

    _set_test_command(camp, "fix-clamp", [sys.executable, "-m", "unittest", "-q"])
    out = tmp_path / "hostpath"
    r = sweep("export", str(out), "--campaign", str(camp), "--include-unverified")
    assert "fix-clamp: the test command's program is a host path" in r.stdout, r.stdout
    assert not (out / "fix-clamp").exists() and not (out / UNVERIFIED / "fix-clamp").exists()
    assert host_paths_in(out, [sys.executable]) == []


def test_container_fidelity_exports_the_dockerfile_the_gates_ran_in(demo, tmp_path):
    """Gates that ran in the bundle's image (a remote provider): that Dockerfile is exported byte for
    byte; a Dockerfile that is no longer the image they recorded is not verified in the export."""
    from sweep.providers.image import image_spec
    camp = _copy_campaign(demo, tmp_path / "camp")
    bundle = camp / "runs" / "fix-clamp" / "task"
    gates = sorted((camp / "runs" / "fix-clamp" / "evidence").glob("gates-r*.json"))[-1]
    identity = image_spec(bundle / "environment").identity
    _rewrite(gates, lambda d: d.update(environment_fidelity="container", image=identity))
    out = tmp_path / "container"
    sweep("export", str(out), "--campaign", str(camp))
    assert (out / "fix-clamp" / "environment" / "Dockerfile").read_bytes() == \
        (bundle / "environment" / "Dockerfile").read_bytes()
    meta = tomllib.loads((out / "fix-clamp" / "task.toml").read_text())["metadata"]["sweep"]
    assert (meta["verified"], meta["image_source"], meta["environment_image"]) == (True, "verified", identity)

    with open(bundle / "environment" / "Dockerfile", "a") as fh:
        fh.write("RUN echo changed after the gates\n")
    out = tmp_path / "changed"
    r = sweep("export", str(out), "--campaign", str(camp), "--include-unverified")
    meta = tomllib.loads((out / UNVERIFIED / "fix-clamp" / "task.toml").read_text())["metadata"]["sweep"]
    assert meta["verified"] is False and "not the image the gates ran in" in meta["unverified_reason"], r.stdout


def test_verifier_network_public_is_the_verifier_containers_own(demo, tmp_path):
    out = tmp_path / "public"
    sweep("export", str(out), "--campaign", str(demo), "--verifier-network", "public")
    doc = tomllib.loads((out / "fix-clamp" / "task.toml").read_text())
    assert doc["verifier"]["environment"]["network_mode"] == "public" and "network_mode" not in doc["verifier"]
    r = sweep("export", str(tmp_path / "bad"), "--campaign", str(demo), "--verifier-network", "allowlist",
              check=False)
    assert r.returncode == 2 and "allowlist" in r.stderr and not (tmp_path / "bad").exists()


def test_the_card_names_each_repositorys_licence_from_its_licence_file(tmp_path):
    from sweep.export import _licence
    repo = tmp_path / "task" / "environment" / "repo"
    repo.mkdir(parents=True)
    assert _licence(tmp_path / "task") == ""
    (repo / "LICENSE").write_text("\n\n   MIT License\n\nCopyright (c) 2026 someone\n")
    assert _licence(tmp_path / "task") == "LICENSE: MIT License"
