"""A controller killed in any phase, and one stopped by SIGTERM: real jobs, real git, real sessions.

SIGKILL (a node dying, the OOM killer) gives the controller no chance to write: the next tick finds
its job gone, requeues the run at the recorded phase with one more attempt, and the next controller
resumes there without running any finished phase again. SIGTERM (scancel, preemption, the time
limit) lets it stop the running session, write a clean checkpoint and give the lease back.

Each phase is held open by something the test controls (a fake GitHub that answers slowly, a fake
agent or a task test that waits while a flag file exists), so the kill lands inside the phase, and
deleting the flag lets the next controller through without waiting.
"""
import os
import signal
import sys
import tempfile
import uuid
from pathlib import Path

import orjson
import pytest

from runstate import read_lease, run_dir
from runstate.models import Outcome, RunState
from sweep.campaign import load_campaign
from sweep.harbor.samples import make_pr_repo, make_verified_pr
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.github import FakeGitHub, make_bare_pull_repo
from tests.fakes.runs import (agent_options, candidate, count, events, gone, group_alive, local_job,
                              local_plan, processes_under, processes_with, record, wait_until)

FAKE_CONTROLLER = Path(__file__).resolve().parent / "fakes" / "controller.py"
PHASES = ["intake", "author", "gates", "probes", "review", "solve", "evaluate"]
ROLE_OF = {"author": "author", "review": "reviewer", "solve": "solver"}

SLOW_GATE_TEST = '''import os
import time
import unittest

FLAG = {flag!r}


class SlowGateTest(unittest.TestCase):
    def test_waits_while_the_flag_exists(self):
        deadline = time.monotonic() + 120
        while os.path.exists(FLAG) and time.monotonic() < deadline:
            time.sleep(0.05)
'''

# held only under the first mechanical mutant of the verified sample (clamp() returning None above
# the range): the gates' runs (0 or 10) pass straight through, the probe phase's first trial waits
SLOW_PROBE_TEST = SLOW_GATE_TEST.replace("import unittest", "import unittest\n\nfrom mathx import clamp").replace(
    "while os.path.exists(FLAG)", "while clamp(42, 0, 10) is None and os.path.exists(FLAG)")


@pytest.fixture
def hold(tmp_path):
    """A flag file that holds a session or a task test open while it exists.

    It lives under /var/tmp, not in pytest's /tmp: sandboxed sessions and trials get a private /tmp."""
    d = Path(tempfile.mkdtemp(prefix="sweep-test-hold-", dir="/var/tmp"))
    flag = d / "hold"
    flag.write_text("hold\n")
    yield flag
    flag.unlink(missing_ok=True)
    d.rmdir()


def init(tmp_path: Path, plan: dict, env: dict | None = None) -> Path:
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d), env=env)
    return d


def kill_controller_group(d: Path, run_id: str) -> str:
    """SIGKILL the controller job's whole process group, as a dying node would; returns its job id."""
    rec = record(d, run_id)
    job = wait_until("the local job record with the controller's pid",
                     lambda: (local_job(d, rec.job_id) or {}).get("pid") and local_job(d, rec.job_id), 10)
    os.killpg(job["pid"], signal.SIGKILL)          # the launcher exec'd the controller: pid == pgid
    wait_until("the killed controller to be gone", lambda: gone(job["pid"]), 10)
    return rec.job_id


def setup_phase(phase: str, tmp_path: Path, flag: Path, gh: FakeGitHub):
    """(plan, run id, env, a check that the phase is really under way, a release) for `phase`."""
    marker = f"marker-{uuid.uuid4().hex}"
    repos = tmp_path / "repos"
    if phase == "intake":
        src = make_pr_repo(repos, "verified", name="mathx")
        bare = make_bare_pull_repo(Path(src["repo"]), tmp_path / "mathx.git", base=src["base"])
        gh.add_pull("acme", "mathx", 7, bare_repo=bare, base=src["base"], head=src["head"],
                    title=src["title"], body=src["body"], files=["mathx.py", "tests/test_mathx.py"])
        gh.delay_s = 120
        plan = local_plan([{"url": "https://github.com/acme/mathx/pull/7"}])
        env = {"SWEEP_GITHUB_API": gh.api_url}
        return plan, "acme-mathx-7", env, lambda: gh.requests_for("/pulls/7"), gh.release
    if phase == "gates":
        src = make_verified_pr(repos, "slow-gates",
                               extra_files={"tests/test_slow_gate.py": SLOW_GATE_TEST.format(flag=str(flag))})
    elif phase == "probes":
        src = make_verified_pr(repos, "slow-probes",
                               extra_files={"tests/test_slow_probe.py": SLOW_PROBE_TEST.format(flag=str(flag))})
    else:
        src = make_pr_repo(repos, "verified", name="mathx")
    runtimes, options = {}, {}
    if phase in ROLE_OF:
        role = ROLE_OF[phase]
        runtimes[role] = "command"
        extra = ["--repo", src["repo"]] if role == "author" else []
        options[role] = agent_options(role, *extra, f"--hold-while={flag}", "--marker", marker)
    plan = local_plan([candidate("pr", src)], defaults={"runtimes": runtimes, "runtime_options": options})

    def release():
        flag.unlink()

    if phase == "gates":
        # the first reference trial's test command is running (and waiting on the flag): the
        # harness captures its output as it runs (logs/verifier/test-output.txt is copied after)
        def under_way(d=tmp_path / "camp"):
            return (run_dir(d, "pr") / "work" / "gates-r0001-reference-0" / "observed" / "test.stdout").exists()
    elif phase == "probes":
        def under_way(d=tmp_path / "camp"):
            return (run_dir(d, "pr") / "work" / "probes-r0001-0" / "trial-0" / "observed" / "test.stdout").exists()
    else:
        def under_way(d=tmp_path / "camp"):
            return count(events(d, "pr"), "session_started", phase) and processes_with(marker)
    return plan, "pr", {}, under_way, release


@pytest.mark.parametrize("phase", PHASES[:6])
def test_sigkill_in_a_phase_resumes_there_without_repeating_finished_phases(phase, tmp_path, hold):
    with FakeGitHub() as gh:
        plan, run_id, env, under_way, release = setup_phase(phase, tmp_path, hold, gh)
        d = init(tmp_path, plan, env)
        rdir = run_dir(d, run_id)

        sweep("tick", "--campaign", str(d), env=env)
        first = record(d, run_id)
        assert first.state is RunState.active, first
        wait_until(f"phase_started {phase}", lambda: count(events(d, run_id), "phase_started", phase), 60)
        wait_until(f"the {phase} phase to be under way", under_way, 60)
        killed_job = kill_controller_group(d, run_id)
        # nothing the killed controller started survives it: every session and trial runs under a
        # keeper the kernel signals when the controller dies (even while bwrap is still starting:
        # tests/test_provider_keeper.py). 60 s: a loaded 2-core machine tears sandboxes down slowly;
        # the message names what is left so a real orphan is told from slowness
        try:
            wait_until("no process left working in the run directory", lambda: not processes_under(rdir), 60)
        except AssertionError as exc:
            left = {pid: (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200], cwd)
                    for pid, cwd in processes_under(rdir).items() if Path(f"/proc/{pid}").exists()}
            raise AssertionError(f"{exc}: {left}") from None
        release()

        out = sweep("tick", "--campaign", str(d), env=env).stdout
        rec = record(d, run_id)
        assert rec.state is RunState.queued and rec.phase.value == phase and rec.attempts == 1, (out, rec)
        assert read_lease(rdir) is None
        assert any(e["kind"] == "requeued" and killed_job in e["detail"] for e in events(d, run_id))

        sweep("tick", "--campaign", str(d), env=env)
        second = record(d, run_id)
        assert second.state is RunState.active and second.job_id != killed_job
        st = tick_until_done(d, env=env, timeout=120)

    rec = record(d, run_id)
    assert rec.outcome is Outcome.verified, (rec, st)
    assert rec.attempts == 1 and read_lease(rdir) is None
    evs = events(d, run_id)
    k = PHASES.index(phase)
    for name in PHASES:
        started, done = count(evs, "phase_started", name), count(evs, "phase_done", name)
        expect_started = 2 if name == phase else 1
        assert (started, done) == (expect_started, 1 if name != "evaluate" else 0), (name, started, done)
        if PHASES.index(name) < k:
            # a finished phase ran under the first job only
            assert {e["by"] for e in evs if e["kind"] == "phase_started" and e.get("phase") == name} == \
                {f"job:{killed_job}"}
    sessions = sorted(p.name for p in (rdir / "sessions").iterdir())
    roles = [s.split("-", 1)[1] for s in sessions]
    for ph, role in ROLE_OF.items():
        # an agent reviewer also judges the rollouts, in one more reviewer session after the solver's
        rollout_review = 1 if role == "reviewer" and phase == "review" else 0
        assert roles.count(role) == (2 if ph == phase else 1) + rollout_review, sessions
    if phase in ROLE_OF:
        # the killed session left no result, and its reservation stays counted as uncertain
        killed = next(s for s in sessions if s.endswith(ROLE_OF[phase]))
        assert not (rdir / "sessions" / killed / "result.json").exists()
        assert any(e["kind"] == "uncertain" and killed in e["detail"] for e in evs)
    if phase == "intake":
        assert len(gh.requests_for("/pulls/7")) >= 2          # the killed request, then the resumed one


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_sigterm_mid_session_leaves_a_clean_checkpoint_and_no_session(isolation, tmp_path, hold):
    """`none` is a host without bubblewrap: no pid namespace takes the session down with the
    controller, so only the controller stopping it keeps it from running on unsupervised."""
    from sweep.scheduler import make_scheduler
    marker = f"marker-{uuid.uuid4().hex}"
    src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
    options = {"author": agent_options("author", "--repo", src["repo"], f"--hold-while={hold}",
                                       "--marker", marker)}
    plan = local_plan([candidate("pr", src)], defaults={"runtimes": {"author": "command"}, "runtime_options": options})
    if isolation == "none":
        plan["tick"]["controller_command"] = [sys.executable, str(FAKE_CONTROLLER), "--no-bwrap"]
        plan["isolation"] = "none"      # without bwrap only a plan that says so runs anything
    d = init(tmp_path, plan)
    rdir = run_dir(d, "pr")
    sweep("tick", "--campaign", str(d))
    wait_until("the author session to be running",
               lambda: count(events(d, "pr"), "session_started", "author") and processes_with(marker), 60)
    session_dir = next((rdir / "sessions").iterdir())
    assert orjson.loads((session_dir / "argv.json").read_bytes())["isolation"] == isolation
    session_groups = set(processes_with(marker).values())
    job_id = record(d, "pr").job_id
    pid = local_job(d, job_id)["pid"]

    # what scancel does on the local backend: TERM to the job's process group, KILL after 5 s
    c = load_campaign(d)
    make_scheduler(c.settings.scheduler, d, c.job_prefix).cancel([job_id])
    wait_until("the controller to exit", lambda: gone(pid), 10)

    rec = record(d, "pr")
    assert rec.state is RunState.queued and rec.phase.value == "author" and rec.attempts == 1, rec
    assert "interrupted by SIGTERM during phase author" in rec.last_error
    assert read_lease(rdir) is None and not (rdir / "lease.json").exists()
    assert not processes_with(marker), processes_with(marker)
    assert not any(group_alive(g) for g in session_groups)
    assert not processes_under(rdir)
    evs = events(d, "pr")
    kinds = [e["kind"] for e in evs]
    # the job wrote its own checkpoint (no tick ran), after stopping its session
    assert kinds.index("session_stopped") < kinds.index("attempt_failed")
    assert {e["by"] for e in evs if e["kind"] in ("session_stopped", "attempt_failed")} == {f"job:{job_id}"}

    # and the run carries on from there
    hold.unlink()
    tick_until_done(d, timeout=120)
    rec = record(d, "pr")
    assert rec.outcome is Outcome.verified and rec.attempts == 1
    assert count(events(d, "pr"), "phase_started", "intake") == 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the gates run one trial at a time on one CPU")
def test_sigterm_while_gate_trials_run_at_once_stops_them_all(tmp_path, hold):
    """The gates' reference and empty trials run at once (sweep/controller/concurrent.py), each in
    a worker thread: a SIGTERM stops both, the controller writes its checkpoint, nothing is left."""
    from sweep.scheduler import make_scheduler
    with FakeGitHub() as gh:
        plan, run_id, env, _, release = setup_phase("gates", tmp_path, hold, gh)
    d = init(tmp_path, plan, env)
    rdir = run_dir(d, run_id)
    sweep("tick", "--campaign", str(d), env=env)
    work = rdir / "work"
    wait_until("reference-0 and empty-0 both under way",
               lambda: all((work / f"gates-r0001-{k}-0" / "observed" / "test.stdout").exists()
                           for k in ("reference", "empty")), 60)
    job_id = record(d, run_id).job_id
    pid = local_job(d, job_id)["pid"]
    c = load_campaign(d)
    make_scheduler(c.settings.scheduler, d, c.job_prefix).cancel([job_id])
    wait_until("the controller to exit", lambda: gone(pid), 10)
    rec = record(d, run_id)
    assert rec.state is RunState.queued and rec.phase.value == "gates" and rec.attempts == 1, rec
    assert "interrupted by SIGTERM during phase gates" in rec.last_error
    assert read_lease(rdir) is None
    assert not processes_under(rdir), processes_under(rdir)
    stopped = [e for e in events(d, run_id) if e["kind"] == "session_stopped"]
    assert stopped and len(stopped[0]["detail"].split(", ")) >= 2, stopped     # both trials' groups
    release()


@pytest.mark.slurm
def test_scancel_on_slurm_leaves_a_clean_checkpoint_and_no_session(slurm_cluster, tmp_path, hold):
    """The same through real sbatch and scancel (TERM to the job, KILL after KillWait)."""
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    marker = f"marker-{uuid.uuid4().hex}"
    src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
    options = {"author": agent_options("author", "--repo", src["repo"], f"--hold-while={hold}",
                                       "--marker", marker)}
    plan = local_plan([candidate("pr", src)], defaults={"runtimes": {"author": "command"}, "runtime_options": options})
    plan["scheduler"] = {"backend": "slurm", "lanes": {"cpu": {"partition": "cpu", "time": "10"},
                                                       "gpu": {"partition": "gpu", "time": "10"}}}
    d = init(tmp_path, plan, env)
    rdir = run_dir(d, "pr")
    sweep("tick", "--campaign", str(d), env=env)
    wait_until("the author session to be running",
               lambda: count(events(d, "pr"), "session_started", "author") and processes_with(marker), 60)
    job_id = record(d, "pr").job_id
    slurm_cluster.run("scancel", job_id)
    wait_until("the job to leave the queue",
               lambda: job_id not in slurm_cluster.run("squeue", "-h", "-o", "%i").stdout.split(), 60)
    wait_until("the controller's checkpoint", lambda: record(d, "pr").state is RunState.queued, 30)
    rec = record(d, "pr")
    assert rec.phase.value == "author" and rec.attempts == 1, rec
    assert "interrupted by SIGTERM during phase author" in rec.last_error
    assert read_lease(rdir) is None
    wait_until("no session process", lambda: not processes_with(marker) and not processes_under(rdir), 10)
    assert any(e["kind"] == "attempt_failed" and e["by"] == f"job:{job_id}" for e in events(d, "pr"))
