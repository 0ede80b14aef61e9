"""`sweep retry` and `sweep abort`: what they change, what they refuse, and that they never race a tick.

Real processes throughout: the CLI in subprocesses, the local scheduler's detached jobs, ticks
running in a loop in another process while the operator acts.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from runstate import load_record, read_events, read_lease, run_dir
from runstate.models import Outcome, RunState
from tests.campaigns import REPO, payload_plan, sweep, write_plan


def _init(tmp_path: Path, plan: dict, payload: dict) -> Path:
    path = write_plan(tmp_path / "plan.json", plan)
    d = tmp_path / "camp"
    sweep("init", str(path), "--campaign", str(d))
    (d / "payload.json").write_bytes(orjson.dumps(payload))
    return d


def _rec(d: Path, run_id: str):
    return load_record(run_dir(d, run_id)).value


def _wait(pred, timeout: float = 60, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class TickLoop:
    """`sweep tick` over and over in another process, as scrontab would (but faster)."""

    def __init__(self, d: Path):
        code = ("import subprocess, sys, time\n"
                "while True:\n"
                f"    subprocess.run([sys.executable, '-m', 'sweep', 'tick', '--quiet', '--campaign', {str(d)!r}])\n"
                "    time.sleep(0.05)\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def _kinds(d: Path, run_id: str) -> list[str]:
    return [e.kind for e in read_events(run_dir(d, run_id))[0]]


def test_abort_an_active_run_while_ticks_run(tmp_path):
    d = _init(tmp_path, payload_plan(2, max_parallel=2), {"runs": {"pr-000": {"hang": True}, "pr-001": {"hang": True}}})
    loop = TickLoop(d)
    try:
        _wait(lambda: _rec(d, "pr-000").state is RunState.active and read_lease(run_dir(d, "pr-000")) is not None,
              what="pr-000 active")
        job = _rec(d, "pr-000").job_id
        r = sweep("abort", "pr-000", "--campaign", str(d), "--reason", "wrong PR")
        assert "ended blocked: aborted" in r.stdout and f"job {job} cancelled" in r.stdout, r.stdout
        time.sleep(1.5)                        # more ticks: none of them may undo the abort
    finally:
        loop.stop()
    rec = _rec(d, "pr-000")
    assert (rec.state, rec.outcome, rec.reason) == (RunState.ended, Outcome.blocked, "aborted")
    assert "wrong PR" in rec.last_error
    assert read_lease(run_dir(d, "pr-000")) is None
    kinds = _kinds(d, "pr-000")
    assert kinds.count("admitted") == 1 and kinds[-2:] == ["abort_requested", "ended"], kinds
    from sweep.campaign import load_campaign
    from sweep.scheduler import make_scheduler
    c = load_campaign(d)
    snap = make_scheduler(c.settings.scheduler, d, c.job_prefix).queue()
    assert snap.known and job not in snap.jobs
    assert _rec(d, "pr-001").state is RunState.active           # the other run untouched
    sweep("abort", "pr-001", "--campaign", str(d))
    # refused: already ended, with the way back named
    again = sweep("abort", "pr-000", "--campaign", str(d), check=False)
    assert again.returncode == 3 and "already ended (blocked:aborted)" in again.stderr and "sweep retry" in again.stderr


def test_abort_a_queued_run_and_retry_it(tmp_path):
    d = _init(tmp_path, payload_plan(1), {"sleep": 0, "outcome": "blocked"})
    r = sweep("abort", "pr-000", "--campaign", str(d))
    assert "ended blocked: aborted" in r.stdout
    assert _rec(d, "pr-000").reason == "aborted"
    r = sweep("retry", "pr-000", "--campaign", str(d), "--reason", "aborted by mistake")
    assert "blocked:aborted -> queued with fresh attempts (retry 1)" in r.stdout, r.stdout
    rec = _rec(d, "pr-000")
    assert (rec.state, rec.outcome, rec.reason, rec.attempts) == (RunState.queued, None, None, 0)
    assert rec.checkpoints["retry"]["count"] == 1 and rec.checkpoints["retry"]["previous"] == "blocked:aborted"
    events = read_events(run_dir(d, "pr-000"))[0]
    assert events[-1].kind == "retried" and "aborted by mistake" in events[-1].detail
    # refused while queued; nothing changed
    before = (run_dir(d, "pr-000") / "state.json").read_bytes()
    r = sweep("retry", "pr-000", "--campaign", str(d), check=False)
    assert r.returncode == 3 and "queued, not ended" in r.stderr
    assert (run_dir(d, "pr-000") / "state.json").read_bytes() == before
    # the tick admits it again; it ends blocked again; a second retry counts 2
    sweep("tick", "--campaign", str(d))
    _wait(lambda: _rec(d, "pr-000").state is RunState.ended, what="pr-000 ended")
    sweep("retry", "pr-000", "--campaign", str(d))
    assert _rec(d, "pr-000").checkpoints["retry"]["count"] == 2
    r = sweep("retry", "no-such-run", "--campaign", str(d), check=False)
    assert r.returncode == 2 and "no run 'no-such-run'" in r.stderr


def test_concurrent_retries_and_ticks_retry_exactly_once(tmp_path):
    d = _init(tmp_path, payload_plan(1), {"sleep": 0, "outcome": "blocked"})
    sweep("tick", "--campaign", str(d))
    _wait(lambda: _rec(d, "pr-000").state is RunState.ended, what="pr-000 ended")
    (d / "payload.json").write_bytes(orjson.dumps({"hang": True}))     # re-admitted, it stays active
    loop = TickLoop(d)
    try:
        procs = [subprocess.Popen([sys.executable, "-m", "sweep", "retry", "pr-000", "--campaign", str(d),
                                   "--reason", f"operator {i}"], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for i in range(4)]
        results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
        _wait(lambda: _rec(d, "pr-000").state is RunState.active, what="the retried run admitted")
        time.sleep(1.0)
    finally:
        loop.stop()
    ok = [r for r in results if r[0] == 0]
    assert len(ok) == 1, results
    assert all(rc == 3 and ("not ended" in err or "changed while" in err) for rc, _, err in results if rc != 0), results
    kinds = _kinds(d, "pr-000")
    assert kinds.count("retried") == 1 and kinds.index("retried") < len(kinds) - 1, kinds
    rec = _rec(d, "pr-000")
    assert rec.checkpoints["retry"]["count"] == 1 and rec.attempts == 0
    sweep("abort", "pr-000", "--campaign", str(d))           # stop the hanging job
    assert _rec(d, "pr-000").reason == "aborted"


def test_retry_refuses_a_verified_run_and_reruns_an_unverified_one_keeping_its_evidence(tmp_path):
    sweep("demo", str(tmp_path / "demo"), timeout=180)
    d = tmp_path / "demo" / "campaign"
    r = sweep("retry", "fix-clamp", "--campaign", str(d), check=False)
    assert r.returncode == 3 and "is verified" in r.stderr
    first = json.loads((run_dir(d, "passes-before") / "evidence" / "gates-r0001.json").read_text())
    r = sweep("retry", "passes-before", "--campaign", str(d), "--reason", "look again")
    assert "generated_unverified:passes_before_fix -> queued" in r.stdout
    _wait(lambda: (sweep("tick", "--campaign", str(d)) and _rec(d, "passes-before").state is RunState.ended),
          timeout=120, what="passes-before ended again")
    rec = _rec(d, "passes-before")
    assert rec.outcome is Outcome.generated_unverified
    # the retry ran the gates again (the earlier failure did not end it at once) under a new revision
    ev = run_dir(d, "passes-before") / "evidence"
    assert json.loads((ev / "gates-r0001.json").read_text()) == first
    later = sorted(p.name for p in ev.glob("gates-r*.json"))
    assert later[0] == "gates-r0001.json" and len(later) >= 2, later
    assert json.loads((ev / later[1]).read_text())["gates"]["fail_to_pass"]["ok"] is False
    out = sweep("show", "passes-before", "--campaign", str(d)).stdout
    assert "retried" in out and "look again" in out


@pytest.mark.parametrize("verb", ["retry", "abort"])
def test_bad_run_ids_are_refused_as_input(tmp_path, verb):
    d = _init(tmp_path, payload_plan(1), {})
    r = sweep(verb, "../etc", "--campaign", str(d), check=False)
    assert r.returncode == 2 and "invalid run id" in r.stderr


def test_abort_stops_a_real_controller_and_its_running_session(tmp_path):
    """A real controller in the author phase, its (command-runtime) session held open: abort ends
    the session's processes, the job and the run, and leaves no lease."""
    import tempfile
    import uuid

    from tests.fakes.runs import (agent_options, candidate, count, events, local_plan, processes_with,
                                  wait_until)
    from sweep.harbor.samples import make_pr_repo
    hold_dir = Path(tempfile.mkdtemp(prefix="sweep-test-abort-", dir="/var/tmp"))
    flag = hold_dir / "hold"
    flag.write_text("hold\n")
    marker = f"marker-{uuid.uuid4().hex}"
    try:
        src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
        plan = local_plan([candidate("pr", src)], defaults={
            "runtimes": {"author": "command"},
            "runtime_options": {"author": agent_options("author", "--repo", src["repo"], f"--hold-while={flag}",
                                                        "--marker", marker)}})
        d = tmp_path / "camp"
        sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
        sweep("tick", "--campaign", str(d))
        wait_until("the author session to run", lambda: count(events(d, "pr"), "session_started", "author")
                   and processes_with(marker), 60)
        r = sweep("abort", "pr", "--campaign", str(d), "--reason", "operator stop")
        assert "ended blocked: aborted" in r.stdout, (r.stdout, r.stderr)
        assert not processes_with(marker), "the session outlived the abort"
        rec = _rec(d, "pr")
        assert (rec.state, rec.outcome, rec.reason) == (RunState.ended, Outcome.blocked, "aborted")
        assert read_lease(run_dir(d, "pr")) is None
        kinds = _kinds(d, "pr")
        assert "session_stopped" in kinds and kinds[-1] == "ended", kinds
        sweep("tick", "--campaign", str(d))                   # a later tick leaves it alone
        assert _rec(d, "pr").reason == "aborted"
    finally:
        flag.unlink(missing_ok=True)
        hold_dir.rmdir()


def test_retry_reads_the_checkpoints_through_their_model_and_refuses_malformed_ones(tmp_path):
    from runstate import save_record
    d = _init(tmp_path, payload_plan(2), {"sleep": 0, "outcome": "blocked"})
    rdir = run_dir(d, "pr-000")
    ended = _rec(d, "pr-000").model_copy(update={
        "state": RunState.ended, "outcome": Outcome.blocked, "reason": "aborted",
        "checkpoints": {"author": {"revision": 3}, "retry": {"count": 1, "after_revision": 2, "previous": "x"}}})
    save_record(rdir, ended)
    sweep("retry", "pr-000", "--campaign", str(d))
    retry = _rec(d, "pr-000").checkpoints["retry"]
    assert (retry["count"], retry["after_revision"]) == (2, 3)     # revisions keep counting after the last one
    # a checkpoint that is not what it claims to be: refused, naming state.json and the field
    bad = _rec(d, "pr-001").model_copy(update={"state": RunState.ended, "outcome": Outcome.blocked,
                                               "reason": "aborted", "checkpoints": {"author": {"revision": "third"}}})
    save_record(run_dir(d, "pr-001"), bad)
    before = (run_dir(d, "pr-001") / "state.json").read_bytes()
    r = sweep("retry", "pr-001", "--campaign", str(d), check=False)
    assert r.returncode != 0 and "author.revision" in r.stderr and "state.json" in r.stderr, r.stderr
    assert (run_dir(d, "pr-001") / "state.json").read_bytes() == before
