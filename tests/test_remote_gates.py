"""Gates and trials in the task's image on a remote provider (daytona: the real SDK over HTTP to
tests/fakes/daytona_api.py in container mode, where every command really runs, under bubblewrap,
in a root made of the sandbox's own files and the image's toolchain). A real campaign: init,
ticks, controller jobs on the local scheduler backend."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("daytona")

from runstate import run_dir  # noqa: E402
from runstate.models import Outcome  # noqa: E402
from sweep.harbor.samples import make_pr_repo  # noqa: E402
from tests.campaigns import sweep, tick_until_done, write_plan  # noqa: E402
from tests.fakes.daytona_api import FakeDaytona  # noqa: E402
from tests.fakes.runs import candidate, local_plan, record  # noqa: E402


@pytest.fixture
def fake():
    f = FakeDaytona(container=True).start()
    yield f
    f.stop()


# A blind solver played by a command: it fixes clamp() in its workspace, and says where it ran.
SOLVER_SCRIPT = ("test -d /sweep/run && echo solver-in-container; cd repo && python3 -c 'import pathlib; "
                 "p = pathlib.Path(\"mathx.py\"); p.write_text(p.read_text().replace("
                 "\"if value > high:\\n        return low\", \"if value > high:\\n        return high\"))'")
COMMAND_SOLVER = {"runtimes": {"solver": "command"},
                  "runtime_options": {"solver": {"argv": ["bash", "-c", SOLVER_SCRIPT, "solver", "{tools}",
                                                          "{max_turns}", "{cost_cap_usd}"], "network": "none"}}}


def campaign(tmp_path: Path, fake: FakeDaytona, kinds: dict[str, str], options: dict | None = None) -> Path:
    key = tmp_path / "daytona.key"
    key.write_text(fake.api_key + "\n")
    cands = [candidate(rid, make_pr_repo(tmp_path / "repos", kind, name=rid), **(options or {}).get(rid, {}))
             for rid, kind in kinds.items()]
    plan = local_plan(cands, defaults={"provider": "daytona", "quality": {"max_repairs": 0}},
                      providers={"daytona": {"api_url": fake.api_url, "api_key_file": str(key)}})
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    return d


def gates_evidence(d: Path, rid: str) -> dict:
    return json.loads((run_dir(d, rid) / "evidence" / "gates-r0001.json").read_text())


def test_gates_and_solver_trial_run_in_the_container_and_the_run_ends_verified(tmp_path, fake):
    d = campaign(tmp_path, fake, {"pr-ok": "verified", "pr-bad": "passes_before"}, {"pr-ok": COMMAND_SOLVER})
    tick_until_done(d, timeout=300)

    ok = record(d, "pr-ok")
    assert ok.outcome is Outcome.verified, ok
    ev = gates_evidence(d, "pr-ok")
    assert ev["passed"] is True and ev["environment_fidelity"] == "container"
    assert ev["isolation"] == "container" and len(ev["image"]) == 64
    solve = json.loads((run_dir(d, "pr-ok") / "evidence" / "solve-r0001.json").read_text())
    assert [r["environment_fidelity"] for r in solve["rollouts"]] == ["container"]
    assert solve["rollouts"][0]["reward"] == 1.0 and solve["runtime"] == "command"
    # the solver session itself ran in the task's image, and its change came back to the host
    session = next((run_dir(d, "pr-ok") / "sessions").glob("*-solver"))
    assert any("solver-in-container" in p.read_text() for p in session.glob("*stdout*"))
    assert json.loads((session / "result.json").read_text())["isolation"] == "container"
    assert "Environment fidelity: container" in (run_dir(d, "pr-ok") / "report.md").read_text()
    # the commands really went to the sandboxes, as argv with paths inside the container
    tests_run = [c for _, _, c in fake.execs if "tests/test.sh" in c]
    assert tests_run and all("/sweep/run/" in c and str(d) not in c for c in tests_run)
    # one image for both runs' tasks (same Dockerfile), never a build per trial
    assert len(fake.snapshot_builds) == 1
    assert ev["image"][:32] in next(iter(fake.snapshots))
    # every sandbox was terminated and its receipt settled
    assert fake.live() == []
    receipts = list((run_dir(d, "pr-ok") / "sandboxes").glob("*.json"))
    assert receipts and all(json.loads(p.read_text())["state"] == "terminated" for p in receipts)

    # the negative case: its tests already pass before the fix, in the container too, so the
    # empty-solution gate fails there and the run ends unverified
    bad = record(d, "pr-bad")
    assert bad.outcome is Outcome.generated_unverified and bad.reason == "passes_before_fix", bad
    ev = gates_evidence(d, "pr-bad")
    assert ev["environment_fidelity"] == "container" and ev["gates"]["empty"]["ok"] is False
    assert ev["gates"]["reference"]["ok"] is True


def test_a_provider_outage_during_gates_parks_the_run_under_the_providers_cooldown(tmp_path, fake):
    from runstate.models import RunState
    from tests.fakes.runs import wait_until
    d = campaign(tmp_path, fake, {"pr-ok": "verified"})
    fake.fail(503, times=1000, path_contains="/api/snapshots")      # the image lookup: Daytona is down
    sweep("tick", "--campaign", str(d))
    wait_until("the run to park", lambda: record(d, "pr-ok").state is RunState.queued
               and record(d, "pr-ok").attempts == 0 and "daytona" in (record(d, "pr-ok").last_error or ""), 120)
    rec = record(d, "pr-ok")
    assert rec.outcome is None and "outage" in json.dumps(rec.model_dump(mode="json")).lower()
    assert list(d.glob("provider-outage-daytona*.json")), sorted(p.name for p in d.iterdir())
    assert "unexpected" not in (rec.last_error or "")
    assert fake.live() == []


@pytest.mark.parametrize("status, expect", [(401, "configuration error"), (400, "daytona during gates")])
def test_a_config_or_plain_failure_of_the_provider_is_classified_not_a_crash(tmp_path, fake, status, expect):
    from runstate.models import RunState
    from tests.fakes.runs import wait_until
    d = campaign(tmp_path, fake, {"pr-ok": "verified"})
    fake.fail(status, times=1000, path_contains="/api/snapshots")
    sweep("tick", "--campaign", str(d))
    wait_until("the run to come back", lambda: record(d, "pr-ok").state is RunState.queued
               and expect in (record(d, "pr-ok").last_error or ""), 120)
    rec = record(d, "pr-ok")
    assert "unexpected" not in (rec.last_error or "") and rec.outcome is None
    # config: a park (no attempt spent); failure: the attempt fails
    assert rec.attempts == (0 if status == 401 else 1), rec


def test_a_remote_solver_asking_for_api_it_cannot_narrow_parks_with_a_config_reason(tmp_path, fake):
    """network "api" to a loopback endpoint on daytona: refused before any sandbox is created
    (never widened to full egress); the run parks naming the endpoint, no attempt spent."""
    from runstate.models import RunState
    from tests.fakes.runs import wait_until
    opts = json.loads(json.dumps(COMMAND_SOLVER))
    opts["runtime_options"]["solver"].update(network="api", endpoints=["127.0.0.1:9"])
    d = campaign(tmp_path, fake, {"pr-ok": "verified"}, {"pr-ok": opts})
    sweep("tick", "--campaign", str(d))
    wait_until("the run to park", lambda: record(d, "pr-ok").state is RunState.queued
               and "127.0.0.1:9" in (record(d, "pr-ok").last_error or ""), 240)
    rec = record(d, "pr-ok")
    assert "configuration error" in rec.last_error and "loopback" in rec.last_error, rec
    assert rec.outcome is None and rec.attempts == 0 and "unexpected" not in rec.last_error
    solver = [b for m, p, b in fake.requests if m == "POST" and p.rstrip("/").endswith("/sandbox") and b
              and b.get("labels", {}).get("sweep.role") == "solver"]
    assert solver == []          # the gates' sandboxes were created; the solver's never was
    assert fake.live() == []
