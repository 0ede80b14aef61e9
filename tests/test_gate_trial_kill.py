"""A gate trial killed from outside is no verdict about the PR.

A scancel (or a node's shutdown) sends SIGTERM to the job, and the TERM can reach a gate trial's
test runner before the controller: the trial then reads as the PR's verdict (the reference gives
no per-test results) and the run ended gates_failed, a wrong ending the infrastructure caused. A
trial whose script died by TERM, KILL, INT or HUP that sweep did not send runs once more; killed
again, the attempt fails as check_interrupted. A test that crashes (SIGSEGV) is still a verdict.

The kill is real: a `bwrap` on the controller's PATH that kills itself with the signal on its first
N runs in a gate trial (its solve.sh or test.sh: their binds name the trial's gates-r... directory), then execs the real one (tests/fakes/controller.py --bwrap-killed=N:gates-r
--bwrap-signal=SIG). A test inside the sandbox cannot do it itself once: each trial has its own
copy of the repository, and nothing outside it is writable."""
import pytest

from runstate.models import Outcome, RunState
from sweep.providers.local.bwrap import probe_bwrap
from tests.fakes.runs import record
from tests.test_breaker_probe_kill import campaign, first_controller_done

pytestmark = pytest.mark.skipif(probe_bwrap()[0] is None, reason="bubblewrap is not usable here")


def test_a_gate_trial_terminated_once_runs_again_and_the_run_is_verified(tmp_path):
    d, run_id = campaign(tmp_path, "--bwrap-killed=1:bash /tests/test.sh*gates-r0001-reference-0", "--bwrap-signal=TERM")
    evs = first_controller_done(d, run_id)
    rec = record(d, run_id)
    assert rec.outcome is Outcome.verified and rec.attempts == 0, (rec, [e for e in evs if e["kind"] == "ended"])
    killed = [e["detail"] for e in evs if e["kind"] == "gate_trial_killed"]
    assert len(killed) == 1 and "signal 15" in killed[0] and "reference-0" in killed[0] and "tests exited -15" in killed[0], killed
    assert not [e for e in evs if e["kind"] in ("parked", "attempt_failed", "repair")]


def test_a_gate_trial_terminated_every_time_fails_the_attempt_not_the_gates(tmp_path):
    d, run_id = campaign(tmp_path, "--bwrap-killed=1000:gates-r", "--bwrap-signal=TERM")
    evs = first_controller_done(d, run_id)
    rec = record(d, run_id)
    assert rec.state is RunState.queued and rec.attempts == 1 and rec.cause == "check_interrupted", rec
    assert "killed by signal 15 twice" in rec.last_error, rec.last_error
    assert rec.outcome is None and not [e for e in evs if e["kind"] in ("ended", "parked")]


def test_a_gate_trial_that_crashes_with_sigsegv_is_still_the_verdict(tmp_path):
    d, run_id = campaign(tmp_path, "--bwrap-killed=1000:gates-r", "--bwrap-signal=SEGV")
    evs = first_controller_done(d, run_id)
    rec = record(d, run_id)
    assert rec.outcome is Outcome.generated_unverified and rec.reason == "gates_failed", rec
    assert not [e for e in evs if e["kind"] == "gate_trial_killed"]


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_what_reads_as_a_kill_from_outside(tmp_path, isolation):
    """Under bwrap a runner that died by TERM shows as test.sh's exit 143 (bash, then bwrap, report
    128+N); without a sandbox the keeper dies by the signal itself. Both read as a kill from outside;
    a crash (SEGV), a plain failure and sweep's own timeout do not."""
    from sweep.execution import ExecSpec
    from sweep.harbor.trial import outside_kill
    from sweep.providers.local import LocalProvider
    provider = LocalProvider(isolation=isolation, kill_grace_s=1.0)

    def run(script: str, timeout_s: float = 30):
        return provider.run(ExecSpec(argv=["bash", "-c", script], cwd=tmp_path, timeout_s=timeout_s))
    through_bash = run('sh -c \'kill -TERM $$\'; exit $?')
    assert through_bash.rc == 143 and outside_kill(through_bash) == 15, through_bash
    # a HUP the runner does not ignore (a CI started under nohup hands every child an ignored HUP,
    # which a shell cannot reset)
    itself = run("exec python3 -c 'import os, signal; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
                 "os.kill(os.getpid(), signal.SIGHUP)'")
    assert outside_kill(itself) == 1, itself
    assert outside_kill(run("kill -SEGV $$")) is None
    assert outside_kill(run("exit 1")) is None
    timed_out = run("sleep 30", timeout_s=1)
    assert timed_out.timed_out and outside_kill(timed_out) is None, timed_out
