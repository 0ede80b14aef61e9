"""An evaluation on a remote provider (docs/eval.md "Providers"): each cell's solver session and its
verifier run in sandboxes from the task's environment/Dockerfile image, as a generation run's solve
phase and trials do. Daytona here is the real SDK over HTTP to tests/fakes/daytona_api.py in
container mode, where every command really runs, under bubblewrap, in a root made of the sandbox's
own files and the image's toolchain (the host's /usr): the host's paths are out of its reach, so a
solver or a verifier that ran on the host instead would not find what it looks for.

The dataset is the hand-made three-task Harbor dataset (tests/test_eval_harbor.py), whose verifiers
write /logs/verifier/reward.txt and run their checks from /app, the paths of a Harbor container."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("daytona")

from runstate import load_record, run_dir  # noqa: E402
from tests.agent_sessions import needs_claude  # noqa: E402
from tests.campaigns import sweep  # noqa: E402
from tests.fakes.daytona_api import FakeDaytona  # noqa: E402
from tests.test_eval_harbor import TASKS, make_dataset  # noqa: E402

# The oracle-like arm: fixes whichever task it is given, and says that it ran in the sandbox (the
# run directory is at /sweep/run there, and the host's campaign path is not).
FIX = r"""cd "$1/repo" || exit 3
if [ -d /sweep/run ]; then echo solver-in-container; fi
if [ -f calc.py ]; then printf 'def add(a, b):\n    return a + b\n' > calc.py
elif [ -f greet.py ]; then printf "def greet(name):\n    return 'Hello, ' + name + '!'\n" > greet.py
else echo 1.2.3 > VERSION; fi
"""


@pytest.fixture
def fake():
    f = FakeDaytona(container=True).start()
    yield f
    f.stop()


def write_plan(root: Path, fake: FakeDaytona, **extra) -> Path:
    make_dataset(root / "ds")
    key = root / "daytona.key"
    key.write_text(fake.api_key + "\n")
    plan = {"name": "remote", "dataset": "ds", "repeats": 2, "seed": 7, "provider": "daytona",
            "providers": {"daytona": {"api_url": fake.api_url, "api_key_file": str(key)}},
            "arms": [{"name": "oracle", "runtime": "command", "budget": {"wall_s": 120},
                      "runtime_options": {"argv": ["bash", "-c", FIX, "solver", "{workspace}"], "network": "none"}},
                     {"name": "nop", "runtime": "command", "runtime_options": {"argv": ["true"], "network": "none"}}]}
    for key_, value in extra.items():
        plan[key_] = value
    path = root / "eval.json"
    path.write_text(json.dumps(plan))
    return path


def init(plan: Path, camp: Path) -> subprocess.CompletedProcess:
    return sweep("eval", "init", str(plan), "--campaign", str(camp), check=False)


def cells(camp: Path) -> list[dict]:
    return json.loads((camp / "manifest.json").read_text())["cells"]


def test_cells_run_in_the_tasks_image_on_daytona_and_score_as_the_arms_imply(tmp_path, fake):
    camp = tmp_path / "camp"
    done = init(write_plan(tmp_path, fake), camp)
    assert done.returncode == 0 and "12 cells (3 tasks x 2 arms x 2 repeats)" in done.stdout, done
    assert "ran 12 cells" in sweep("eval", "run", "--campaign", str(camp), timeout=900).stdout

    got = {c["cell_id"]: json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text())
           for c in cells(camp)}
    assert {(r["task_id"], r["arm"], r["repeat"]) for r in got.values()} == {
        (t, a, k) for t in TASKS for a in ("oracle", "nop") for k in range(2)}
    for r in got.values():
        assert r["reward"] == (1.0 if r["arm"] == "oracle" else 0.0), r
    # the oracle's sessions ran in the sandbox (not on the host), and each verifier ran there too:
    # the checks went to the sandboxes as commands with paths inside the container
    for cid, r in got.items():
        if r["arm"] == "oracle":
            out = (camp / "cells" / cid / "sessions" / "0001-solver")
            assert any("solver-in-container" in p.read_text() for p in out.glob("*stdout*")), cid
            assert json.loads((out / "result.json").read_text())["isolation"] == "container"
    tests_run = [c for _, _, c in fake.execs if "tests/test.sh" in c]
    assert len(tests_run) == 12 and all("/sweep/run/" in c and str(camp) not in c for c in tests_run)
    sessions = [c for _, _, c in fake.execs if "solver-in-container" in c]
    assert len(sessions) == 6
    # one image (the tasks share their Dockerfile), each sandbox terminated, its receipt settled in
    # the cell's run directory (where `sweep reconcile` and the tick look)
    assert len(fake.snapshot_builds) == 1 and "WORKDIR /app" in fake.snapshot_builds[0]
    assert fake.live() == []
    for cid in got:
        receipts = list((run_dir(camp, cid) / "sandboxes").glob("*.json"))
        kinds = {json.loads(p.read_text())["tags"]["sweep.role"] for p in receipts}
        assert kinds == {"solver", "verifier"}, (cid, kinds)
        assert all(json.loads(p.read_text())["state"] == "terminated" for p in receipts)
    trial = json.loads(next((camp / "jobs").glob("*/*/result.json")).read_text())
    assert trial["config"]["environment"]["import_path"] == "sweep.providers.daytona", trial["config"]
    report = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json").stdout)
    rates = {a["arm"]: a["pass_rate"] for a in report["arms"]}
    assert rates == {"oracle": 1.0, "nop": 0.0}, report["arms"]


def test_a_daytona_outage_parks_the_cells_and_scores_none(tmp_path, fake):
    camp = tmp_path / "camp"
    assert init(write_plan(tmp_path, fake, repeats=1, max_parallel=1), camp).returncode == 0
    fake.fail(503, times=10_000, path_contains="/api/snapshots")     # the image lookup: Daytona is down
    ran = sweep("eval", "run", "--campaign", str(camp), timeout=600, check=False)
    assert ran.returncode == 1 and "is parked" in ran.stderr and "daytona" in ran.stderr, ran
    assert not any((camp / "cells" / c["cell_id"] / "result.json").exists() for c in cells(camp))
    parked = [load_record(run_dir(camp, c["cell_id"])).value for c in cells(camp)]
    parked = [r for r in parked if r.parked_until]
    assert parked and all(r.attempts == 0 and r.outcome is None and "daytona" in (r.last_error or "")
                          for r in parked), parked
    assert list(camp.glob("provider-outage-daytona*.json")), sorted(p.name for p in camp.iterdir())
    assert fake.live() == []


@needs_claude      # a CLI that is not installed is refused first
def test_init_refuses_an_agent_arm_on_daytona_unless_its_key_may_sit_in_the_sandbox(tmp_path, fake):
    """A claude-code arm on daytona would hold its key in the remote sandbox (no relay reaches it):
    refused, naming arm, runtime, provider and the field, unless the plan accepts that."""
    key = tmp_path / "anthropic.key"
    key.write_text("sk-test\n")
    key.chmod(0o600)
    secrets = {"anthropic": {"file": str(key)}}
    plan = write_plan(tmp_path, fake)
    data = json.loads(plan.read_text())
    data["arms"].append({"name": "claude", "runtime": "claude-code", "budget": {"max_usd": 0.5}})
    data["secrets"] = secrets
    plan.write_text(json.dumps(data))
    refused = init(plan, tmp_path / "c1")
    assert refused.returncode != 0
    for part in ("arm claude", "runtime claude-code", "provider daytona", "providers.daytona.agent_key_in_sandbox"):
        assert part in refused.stderr, refused.stderr
    assert not (tmp_path / "c1").exists()
    data["providers"]["daytona"]["agent_key_in_sandbox"] = True
    plan.write_text(json.dumps(data))
    assert init(plan, tmp_path / "c2").returncode == 0


def test_init_refuses_provider_settings_that_would_have_no_effect(tmp_path, fake):
    plan = write_plan(tmp_path, fake)
    data = json.loads(plan.read_text())
    data["providers"]["daytona"]["agent_key_in_sandbox"] = True      # no arm holds a key there
    plan.write_text(json.dumps(data))
    refused = init(plan, tmp_path / "c1")
    assert refused.returncode != 0 and "providers.daytona.agent_key_in_sandbox" in refused.stderr, refused.stderr
    data["providers"]["daytona"].pop("agent_key_in_sandbox")
    data["provider"] = "local"                                         # a table for a provider not run on
    plan.write_text(json.dumps(data))
    refused = init(plan, tmp_path / "c2")
    assert refused.returncode != 0 and "providers.daytona" in refused.stderr and "no effect" in refused.stderr
    data["provider"] = "dayton"
    plan.write_text(json.dumps(data))
    refused = init(plan, tmp_path / "c3")
    assert refused.returncode != 0 and "provider" in refused.stderr, refused.stderr


def test_a_killed_cells_sandbox_is_terminated_by_reconcile_from_its_receipt(tmp_path, fake):
    """A cell's controller SIGKILLed while its solver session runs in a Daytona sandbox leaves that
    sandbox live and its receipt open in the cell's run directory; `sweep reconcile` (the job being
    dead) terminates it from the receipt and settles the receipt."""
    from tests.fakes.runs import wait_until
    from tests.test_eval_cells import kill_controller
    plan = write_plan(tmp_path, fake, repeats=1)
    for extra in sorted(TASKS)[1:]:
        shutil.rmtree(tmp_path / "ds" / extra)
    data = json.loads(plan.read_text())
    data["arms"] = [{"name": "slow", "runtime": "command", "budget": {"wall_s": 300},
                     "runtime_options": {"argv": ["bash", "-c", "sleep 240"], "network": "none"}}]
    plan.write_text(json.dumps(data))
    camp = tmp_path / "camp"
    assert init(plan, camp).returncode == 0
    (cell,) = [c["cell_id"] for c in cells(camp)]
    sweep("tick", "--campaign", str(camp))
    receipts_dir = run_dir(camp, cell) / "sandboxes"

    def created() -> bool:
        # the fake lists the sandbox as soon as it answers the create call, a moment before the
        # controller has the answer and settles its receipt `created`: wait for both
        live = any(s.get("labels", {}).get("sweep.role") == "solver" for s in fake.live())
        states = [json.loads(p.read_text()).get("state") for p in receipts_dir.glob("*.json")]
        return live and states == ["created"]
    wait_until("the cell's session sandbox, created and receipted", created, 120, poll=0.2)
    kill_controller(camp, cell)
    receipts = list(receipts_dir.glob("*.json"))
    assert [json.loads(p.read_text())["state"] for p in receipts] == ["created"], receipts
    assert fake.live()
    out = sweep("reconcile", "--campaign", str(camp)).stdout
    assert fake.live() == [], out
    assert [json.loads(p.read_text())["state"] for p in receipts] == ["terminated"], out
