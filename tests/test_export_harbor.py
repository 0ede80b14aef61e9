"""The demo's export, checked with Harbor 0.26.0 itself (docs/export.md, "Checked with Harbor itself").

Harbor needs Python >= 3.12; it runs from its own venv (.ci/harbor-venv.sh makes it at
.cache/harbor-venv; SWEEP_HARBOR_VENV names another). Without one the test fails with that reason:
a machine that cannot get Harbor must not look like one where the export works.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.campaigns import REPO, demo_copy, sweep

HARBOR_VERSION = "0.26.0"
VENV = Path(os.environ.get("SWEEP_HARBOR_VENV") or REPO / ".cache" / "harbor-venv")
CHECK = REPO / "tests" / "harbor_check.py"


@pytest.fixture(scope="module")
def harbor() -> Path:
    python = VENV / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"no Harbor venv at {VENV}: run .ci/harbor-venv.sh (it needs a Python >= 3.12: pyenv, "
                    "python3.12 on PATH, or uv from PyPI); the export cannot be checked with Harbor without it")
    r = subprocess.run([str(python), "-c", "import sys, importlib.metadata as m; "
                        "print(sys.version_info[:2] >= (3, 12), m.version('harbor'))"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["True", HARBOR_VERSION], (r.stdout, r.stderr)
    return VENV / "bin"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("harbor")
    campaign = demo_copy(tmp_path_factory, "harbor-demo") / "campaign"
    out, public = root / "dataset", root / "public"
    sweep("export", str(out), "--campaign", str(campaign), "--include-unverified")
    sweep("export", str(public), "--campaign", str(campaign), "--verifier-network", "public")
    return {"campaign": campaign, "out": out, "public": public, "root": root}


def _harbor(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir / "harbor"), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})


def test_harbor_loads_lints_and_syncs_the_export(harbor, exported):
    out, public, root = exported["out"], exported["public"], exported["root"]
    r = subprocess.run([str(harbor / "python"), str(CHECK), str(root / "check"), str(out), str(out / "unverified"),
                        str(public)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["harbor"] == HARBOR_VERSION
    verified, unverified, pub = (report["datasets"][str(p)] for p in (out, out / "unverified", public))
    # (a) Harbor's dataset loader: the verified dataset holds the verified task only; the others are
    # a dataset of their own; every task loads with no warning, at the current schema; -i matches it
    assert verified["loaded"] == ["fix-clamp"] and pub["loaded"] == ["fix-clamp"]
    assert unverified["loaded"] == ["flaky-test", "passes-before"]
    for dataset in (verified, unverified, pub):
        for name, task in dataset["tasks"].items():
            assert task["warnings"] == [] and task["schema_version"] == "1.4", (name, task)
            assert dataset["filters"][name] == [name]
    # (c) network plan + capability checks, as `harbor run -e <type>` prepares the trial and then
    # starts the separate verifier: no environment is asked to switch policy after start
    envs = verified["tasks"]["fix-clamp"]["envs"]
    assert {k: envs[k] for k in ("daytona", "modal", "docker+egress", "podman+egress")} == {
        "daytona": "ok", "modal": "ok", "docker+egress": "ok", "podman+egress": "ok"}, envs
    for engine in ("docker", "podman"):       # no egress sidecar: no-network is refused, and said so
        assert envs[engine].startswith("verifier environment:") and "no-network' is not supported" in envs[engine]
        assert "cannot change network policy" not in envs[engine]
    assert set(pub["tasks"]["fix-clamp"]["envs"].values()) == {"ok"}, pub["tasks"]["fix-clamp"]["envs"]

    # (b) `harbor lint` with every rule (a superset of the default ones) on every exported task
    tasks = [str(p.parent) for p in sorted([*out.glob("*/task.toml"), *out.glob("unverified/*/task.toml")])]
    assert len(tasks) == 3
    r = _harbor(harbor, "lint", "--json", "--select", "ALL", *tasks, cwd=out)
    assert r.returncode == 0 and json.loads(r.stdout) == [], (r.stdout, r.stderr)
    # the same lint on a run bundle flags its shared verifier: docs/tasks.md sends users to the export
    r = _harbor(harbor, "lint", "--json", str(exported["campaign"] / "runs" / "fix-clamp" / "task"), cwd=out)
    assert r.returncode == 1 and [f["rule"] for f in json.loads(r.stdout)] == ["shared-verifier"], r.stdout

    # `harbor sync` accepts the dataset and finds every digest already right
    for dataset in (out, out / "unverified"):
        copy = root / f"sync-{dataset.name}"
        shutil.copytree(dataset, copy, symlinks=True)
        r = _harbor(harbor, "sync", str(copy), cwd=root)
        assert r.returncode == 0 and "Updated 0 digest(s)" in r.stdout, (r.stdout, r.stderr)

        def digests(p: Path) -> dict[str, str]:
            return {t["name"]: t["digest"] for t in tomllib.loads((p / "dataset.toml").read_text())["tasks"]}
        assert digests(copy) == digests(dataset) and len(digests(dataset)) == len(list(dataset.glob("*/task.toml")))
