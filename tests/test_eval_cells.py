"""Evaluation cells are runs of the file-state machinery (docs/eval.md "Cells are runs"): each cell a
run directory with state.json and an O_EXCL lease, admitted by `sweep tick`, its controller a job of
the plan's scheduler, checkpointed after its solver sessions.

The arms are command solvers that count themselves: every solver session connects to a counter the
test listens on (127.0.0.1, the one endpoint its network allows) and sends its cell's id, so a test
can tell exactly which cell's session ran how many times, whatever the cell's directory went
through. A session is held open while its flag file `hold-solve-<cell>` exists (under /var/tmp: a
sandbox's /tmp is private); a trial's sandbox shows nothing of the host, so a session whose flag
`slow-verify-<cell>` exists leaves a `.slow-verify` file in the repository, and the task's verifier
then takes 8 s: a kill -9 lands inside the phase it is about.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import pytest

from runstate import load_record, run_dir
from tests.campaigns import sweep, tick_until_done
from tests.fakes.runs import gone, processes_with, wait_until
from tests.test_eval_harbor import TASKS, make_dataset

SOLVER = """import os, pathlib, socket, sys, time
ws, mode, flags, port = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3]), int(sys.argv[4])
# the session sees its workspace at a fixed path; the mount table's source column (the one place a
# sandbox still sees a host path, docs/security.md) names the cell's workspace on the host
host_ws = next((pathlib.Path(f[3]) for f in (ln.split() for ln in open("/proc/self/mountinfo"))
                if len(f) > 4 and f[4] == str(ws)), ws)
cell = host_ws.parent.parent.name
with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
    s.sendall(f"{cell}\\n".encode())
    assert s.recv(16) == b"ok\\n"          # counted: the line reached the counter
deadline = time.monotonic() + 120
while ((flags / f"hold-solve-{cell}").exists() or (flags / "hold-solve-all").exists()) and time.monotonic() < deadline:
    time.sleep(0.05)
repo = ws / "repo"
if (flags / f"slow-verify-{cell}").exists():
    (repo / ".slow-verify").write_text("8\\n")
if mode == "fix":
    if (repo / "calc.py").exists():
        (repo / "calc.py").write_text("def add(a, b):\\n    return a + b\\n")
    elif (repo / "greet.py").exists():
        (repo / "greet.py").write_text("def greet(name):\\n    return 'Hello, ' + name + '!'\\n")
    else:
        (repo / "VERSION").write_text("1.2.3\\n")
"""


class SolveCounter:
    """A TCP listener on 127.0.0.1 that counts the cell ids solver sessions send it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._count, args=(conn,), daemon=True).start()

    def _count(self, conn):
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(256)
                if not chunk:
                    return          # not a whole line: not counted (the solver then fails its session)
                data += chunk
            self.seen.append(data.decode().strip())
            conn.sendall(b"ok\n")

    def counts(self) -> Counter:
        return Counter(self.seen)


@pytest.fixture
def lab(tmp_path):
    """The hand-made Harbor dataset with verifiers that take 8 s on a repository holding
    `.slow-verify`, the counting solver, its counter, and the flags' directory."""
    flags = Path(tempfile.mkdtemp(prefix="sweep-test-cells-", dir="/var/tmp"))
    ds = make_dataset(tmp_path / "ds")
    for task in TASKS:
        test = ds / task / "tests" / "test.sh"
        test.write_text(test.read_text().replace("#!/bin/bash\n", (
            "#!/bin/bash\n"
            "if [ -e /app/.slow-verify ]; then sleep 8; fi\n"), 1))
    (tmp_path / "solver.py").write_text(SOLVER)
    counter = SolveCounter()
    yield {"root": tmp_path, "flags": flags, "counter": counter}
    counter.sock.close()
    shutil.rmtree(flags)


def hold(lab, name: str) -> Path:
    """A flag: `hold-solve-<cell>` holds that cell's solver session open, `slow-verify-<cell>` makes
    its verifier slow."""
    flag = lab["flags"] / name
    flag.write_text("hold\n")
    return flag


def write_eval(lab, *, name: str, repeats: int, max_parallel: int, scheduler: str = "", tasks: int = 3,
               settings: str = "") -> Path:
    root = lab["root"]
    for extra in sorted(TASKS)[tasks:]:
        shutil.rmtree(root / "ds" / extra, ignore_errors=True)
    arms = "".join(f"""
[[arms]]
name = "{arm}"
runtime = "command"
runtime_options = {{ argv = ["{sys.executable}", "{root / 'solver.py'}", "{{workspace}}", "{mode}", "{lab['flags']}", "{lab['counter'].port}"], network = "api", endpoints = ["127.0.0.1:{lab['counter'].port}"] }}
budget = {{ wall_s = 120 }}
""" for arm, mode in (("oracle", "fix"), ("nop", "nop")))
    plan = root / f"{name}.toml"
    plan.write_text(f'name = "{name}"\ndataset = "ds"\nrepeats = {repeats}\nseed = 5\n'
                    f"max_parallel = {max_parallel}\n{settings}{scheduler}\n{arms}")
    camp = root / name
    sweep("eval", "init", str(plan), "--campaign", str(camp))
    return camp


def manifest(camp: Path) -> list[dict]:
    return json.loads((camp / "manifest.json").read_text())["cells"]


def results(camp: Path) -> dict[str, dict]:
    return {c["cell_id"]: json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text())
            for c in manifest(camp) if (camp / "cells" / c["cell_id"] / "result.json").exists()}


def tick(camp: Path, env: dict | None = None) -> None:
    sweep("tick", "--campaign", str(camp), env=env)


def kill_controller(camp: Path, cell: str) -> str:
    """SIGKILL the cell's controller's whole process group (a node dying, the OOM killer); its job id.
    The controller is found by its submission token, which its argv holds (a local job or a Slurm
    job's batch script, which execs it)."""
    rec = load_record(run_dir(camp, cell)).value
    found = wait_until("the cell's controller process", lambda: processes_with(f"--token\0{rec.submit_token}\0"), 30)
    for pid, pgid in found.items():
        os.killpg(pgid, signal.SIGKILL)
        wait_until("the killed controller to be gone", lambda pid=pid: gone(pid), 10)
    return rec.job_id


def state(camp: Path, cell: str) -> tuple[str, str]:
    rec = load_record(run_dir(camp, cell)).value
    return rec.state.value, rec.phase


def test_a_killed_cell_resumes_at_its_phase_and_no_finished_work_runs_again(lab):
    """One cell's controller killed (SIGKILL) inside its solver session, and its successor's killed
    inside the final verifier: the cell's solver session runs again only where it had not finished
    (the first kill), never after it finished (the second kill resumes at cell_verify); the other
    cell's session runs exactly once; a further `sweep eval run` runs nothing."""
    camp = write_eval(lab, name="killed", repeats=1, max_parallel=2, tasks=1)    # 2 cells
    kill_twice(lab, camp)
    got = results(camp)
    before = {c: (camp / "cells" / c / "result.json").read_bytes() for c in got}
    seen = lab["counter"].counts()
    assert "ran 0 cells (2 had ended before)" in sweep("eval", "run", "--campaign", str(camp)).stdout
    assert lab["counter"].counts() == seen
    assert {c: (camp / "cells" / c / "result.json").read_bytes() for c in got} == before


def kill_twice(lab, camp: Path, env: dict | None = None) -> None:
    """The first cell's controller killed in its solver session, then its successor in its final
    verifier; ticks (with `env`) until every cell ended; what each kill must leave, checked."""
    counter = lab["counter"]
    first, other = (c["cell_id"] for c in manifest(camp))
    held = hold(lab, f"hold-solve-{first}")

    def other_ended():
        tick(camp, env)
        return state(camp, other)[0] == "ended" and counter.counts()[first] == 1
    wait_until("the other cell to end while the first is in its session", other_ended, 90, poll=0.5)
    assert state(camp, first) == ("active", "cell_solve") and (run_dir(camp, first) / "lease.json").exists()
    kill_controller(camp, first)
    held.unlink()
    hold(lab, f"slow-verify-{first}")

    def at_the_verifier():
        tick(camp, env)      # the job seen gone: requeued at cell_solve (an attempt); then admitted again
        return state(camp, first) == ("active", "cell_verify")
    wait_until("the final verifier of the first cell", at_the_verifier, 90, poll=0.2)
    rec = load_record(run_dir(camp, first)).value
    assert rec.attempts == 1 and rec.checkpoints["cell_solve"]["ok"] is True, rec
    assert counter.counts()[first] == 2           # the killed session, then the one that finished
    kill_controller(camp, first)                      # inside its 8 s verifier run
    assert state(camp, first) == ("active", "cell_verify") and not (camp / "cells" / first / "result.json").exists()
    tick_until_done(camp, env=env, timeout=180)
    # the finished solver session was not run again: the successor went straight to the verifier
    assert counter.counts() == Counter({first: 2, other: 1}), counter.seen
    rec = load_record(run_dir(camp, first)).value
    assert (rec.state.value, rec.outcome.value, rec.attempts) == ("ended", "verified", 2)
    events = [json.loads(line)["kind"] for line in (run_dir(camp, first) / "events.jsonl").read_text().splitlines()]
    assert events.count("admitted") == 3 and events.count("requeued") == 2, events
    got = results(camp)
    assert {c["cell_id"]: got[c["cell_id"]]["reward"] for c in manifest(camp)} == \
        {c["cell_id"]: 1.0 if c["arm"] == "oracle" else 0.0 for c in manifest(camp)}


def test_an_interrupted_cell_is_requeued_without_an_attempt(lab):
    """SIGUSR1 (Slurm's time-limit warning, --signal=B:USR1) to a cell's controller inside its solver
    session: the controller stops the session, writes the interruption and gives the lease back; the
    cell goes back to the queue at cell_solve with no attempt counted, and its next controller solves it."""
    counter = lab["counter"]
    camp = write_eval(lab, name="interrupted", repeats=1, max_parallel=1, tasks=1)
    first = manifest(camp)[0]["cell_id"]
    held = hold(lab, f"hold-solve-{first}")
    tick(camp)
    wait_until("the first solver session", lambda: counter.counts()[first] == 1, 30)
    rec = load_record(run_dir(camp, first)).value
    (pid,) = processes_with(f"--token\0{rec.submit_token}\0")
    os.kill(pid, signal.SIGUSR1)
    wait_until("the interruption to be written", lambda: state(camp, first)[0] == "queued", 30)
    rec = load_record(run_dir(camp, first)).value
    assert (rec.phase, rec.attempts, rec.interruptions, rec.interrupted_by) == ("cell_solve", 0, 1, {"time_limit": 1})
    assert not (run_dir(camp, first) / "lease.json").exists() and not (camp / "cells" / first / "result.json").exists()
    held.unlink()
    tick_until_done(camp, timeout=120)
    rec = load_record(run_dir(camp, first)).value
    assert (rec.state.value, rec.outcome.value, rec.attempts, rec.interruptions) == ("ended", "verified", 0, 1)
    assert counter.counts()[first] == 2
    assert results(camp)[first]["reward"] == (1.0 if manifest(camp)[0]["arm"] == "oracle" else 0.0)


def test_a_cell_out_of_attempts_ends_and_sweep_retry_runs_it_again(lab):
    """Three kills (each an attempt) end a cell `blocked: max_attempted` (a generation plan's default
    max_attempts, 3) with no result; `sweep retry` puts it back at cell_solve, and it is solved."""
    counter = lab["counter"]
    camp = write_eval(lab, name="attempts", repeats=1, max_parallel=1, tasks=1)
    first = manifest(camp)[0]["cell_id"]
    held = hold(lab, f"hold-solve-{first}")
    for n in range(1, 4):
        def in_session(n=n):
            tick(camp)
            return state(camp, first) == ("active", "cell_solve") and counter.counts()[first] == n
        wait_until(f"solver session {n}", in_session, 60, poll=0.3)
        kill_controller(camp, first)
    wait_until("the cell to end", lambda: tick(camp) or state(camp, first)[0] == "ended", 60, poll=0.5)
    rec = load_record(run_dir(camp, first)).value
    assert (rec.outcome.value, rec.reason, rec.attempts) == ("blocked", "max_attempted", 3), rec
    assert not (camp / "cells" / first / "result.json").exists()
    held.unlink()
    sweep("retry", first, "--campaign", str(camp))
    assert state(camp, first) == ("queued", "cell_solve")
    tick_until_done(camp, timeout=120)
    rec = load_record(run_dir(camp, first)).value
    assert (rec.outcome.value, rec.attempts) == ("verified", 0) and counter.counts()[first] == 4
    assert first in results(camp)


def test_the_plans_max_attempts_and_max_interruptions_bound_a_cell(lab):
    """`max_attempts = 1`: one kill of a cell's controller (an attempt) ends it blocked:
    max_attempted; `max_interruptions = 1`: one SIGUSR1 (an interruption) ends the other cell
    blocked: max_interrupted. Neither has a result (the defaults, 3 and 10, would requeue both)."""
    counter = lab["counter"]
    camp = write_eval(lab, name="bounds", repeats=1, max_parallel=2, tasks=1,
                      settings="max_attempts = 1\nmax_interruptions = 1\n")
    first, other = (c["cell_id"] for c in manifest(camp))
    held = [hold(lab, "hold-solve-all")]      # every session held open

    def both_in_session():
        tick(camp)
        return len(counter.seen) == 2 and all(state(camp, c)[0] == "active" for c in (first, other))
    wait_until("both solver sessions", both_in_session, 60, poll=0.3)
    kill_controller(camp, first)
    rec = load_record(run_dir(camp, other)).value
    (pid,) = processes_with(f"--token\0{rec.submit_token}\0")
    os.kill(pid, signal.SIGUSR1)
    wait_until("the interrupted cell to end", lambda: state(camp, other)[0] == "ended", 30)
    for flag in held:
        flag.unlink()
    wait_until("the killed cell to end", lambda: tick(camp) or state(camp, first)[0] == "ended", 60, poll=0.5)
    a, b = load_record(run_dir(camp, first)).value, load_record(run_dir(camp, other)).value
    assert (a.outcome.value, a.reason, a.attempts, a.max_attempts) == ("blocked", "max_attempted", 1, 1), a
    assert (b.outcome.value, b.reason, b.interruptions, b.max_interruptions) == \
        ("blocked", "max_interrupted", 1, 1), b
    assert not results(camp) and len(counter.seen) == 2


def test_the_plans_environment_is_the_controller_jobs(lab):
    """[environment] as in a generation plan: a cell's controller job runs with the toolchain's PATH
    first and its variables, whatever the tick's environment; a toolchain `bind` is refused (nothing
    is bound into an evaluation's sandboxes)."""
    tools = lab["root"] / "tools" / "bin"
    tools.mkdir(parents=True)
    env_toml = (f'[environment.toolchains.tools]\npath = ["{tools}"]\n'
                'variables = { EVAL_TOOLCHAIN = "from-the-plan" }\n')
    camp = write_eval(lab, name="envd", repeats=1, max_parallel=1, tasks=1, settings=env_toml)
    first = manifest(camp)[0]["cell_id"]
    held = hold(lab, "hold-solve-all")
    wait_until("the first solver session", lambda: tick(camp, {"EVAL_TOOLCHAIN": "from-the-tick"})
               or len(lab["counter"].seen) == 1, 60, poll=0.3)
    rec = load_record(run_dir(camp, first)).value
    (pid,) = processes_with(f"--token\0{rec.submit_token}\0")
    environ = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
    assert environ["EVAL_TOOLCHAIN"] == "from-the-plan"
    assert environ["PATH"].split(":")[0] == str(tools), environ["PATH"]
    held.unlink()
    tick_until_done(camp, timeout=120)
    assert len(results(camp)) == 2
    plan = lab["root"] / "bind.toml"
    plan.write_text((lab["root"] / "envd.toml").read_text().replace(
        'variables = {', f'bind = ["{tools}"]\nvariables = {{', 1).replace('name = "envd"', 'name = "bind"'))
    r = sweep("eval", "init", str(plan), "--campaign", str(lab["root"] / "bind"), check=False)
    assert r.returncode == 2 and "environment.toolchains.tools.bind" in r.stderr, r.stderr


def test_a_drained_evaluation_admits_no_cell_until_undrained(lab):
    """`sweep drain` holds every cell of an evaluation in the queue, as it holds a generation run;
    `sweep undrain` lets them run."""
    camp = write_eval(lab, name="drained", repeats=1, max_parallel=2, tasks=1)
    sweep("drain", "--campaign", str(camp), "--reason", "maintenance")
    tick(camp)
    report = json.loads((camp / "tick.json").read_text())
    assert report["draining"] is True and not report["actions"]
    assert sorted(report["waiting"]["draining: no admissions until `sweep undrain`"]) == \
        [c["cell_id"] for c in manifest(camp)]
    assert not lab["counter"].seen
    sweep("undrain", "--campaign", str(camp))
    tick_until_done(camp, timeout=120)
    assert len(results(camp)) == 2


def test_max_parallel_bounds_the_cells_running_at_once(lab):
    """max_parallel = 2 over 6 cells whose sessions are held open: two controllers run, the tick says
    why the others wait, and the rest run as slots free."""
    counter = lab["counter"]
    camp = write_eval(lab, name="bounded", repeats=3, max_parallel=2, tasks=1)
    held = [hold(lab, f"hold-solve-{c['cell_id']}") for c in manifest(camp)]

    def two_sessions():
        tick(camp)
        return len(counter.seen) == 2
    wait_until("two solver sessions", two_sessions, 30, poll=0.5)
    for _ in range(2):
        tick(camp)
    active = [c["cell_id"] for c in manifest(camp) if state(camp, c["cell_id"])[0] == "active"]
    assert active == [c["cell_id"] for c in manifest(camp)[:2]]             # admitted in manifest order
    assert len(counter.seen) == 2
    waiting = json.loads((camp / "tick.json").read_text())["waiting"]
    assert sorted(waiting["limit reached: max_parallel 2 (2 running or in flight)"]) == \
        sorted(c["cell_id"] for c in manifest(camp)[2:])
    for flag in held:
        flag.unlink()
    tick_until_done(camp, timeout=120)
    assert len(results(camp)) == 6 and counter.counts() == Counter(c["cell_id"] for c in manifest(camp))


def test_an_unknown_setting_is_an_error_naming_it(lab):
    root = lab["root"]
    plan = root / "typo.toml"
    plan.write_text('name = "t"\ndataset = "ds"\nseed = 1\nmax_paralel = 2\n[[arms]]\nname = "a"\nruntime = "nop"\n')
    r = sweep("eval", "init", str(plan), "--campaign", str(root / "typo"), check=False)
    assert r.returncode == 2 and "max_paralel: unknown field" in r.stderr, r.stderr
    plan.write_text('name = "t"\ndataset = "ds"\nseed = 1\n[scheduler]\nbackend = "slurm"\nlane = 1\n'
                    '[[arms]]\nname = "a"\nruntime = "nop"\n')
    r = sweep("eval", "init", str(plan), "--campaign", str(root / "typo"), check=False)
    assert r.returncode == 2 and "scheduler.lane: unknown field" in r.stderr, r.stderr
