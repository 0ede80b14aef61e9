"""Untrusted text reaches the operator escaped: `sweep status`, `sweep show`, report.md.

Two real campaigns (local backend, real controller jobs, campaigns outside /tmp):
- an author agent (command runtime) that prints `ESC]0;...BEL ESC[2J ESC[H ... ALL GOOD` and then
  an API 503: the run parks and the agent's text is the cooldown detail `status` shows, and the
  session evidence and last error `show` shows;
- a PR whose test prints the same sequence and fails: the gates fail, and the test output is in
  the ending's detail (events, report.md).
Each output is checked byte by byte, piped and under a real pseudo-terminal (python's pty).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runstate import run_dir
from sweep.harbor.samples import make_verified_pr
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, local_plan, record, wait_until

REPO = Path(__file__).resolve().parents[1]
ATTACK = "\x1b]0;pwned\x07\x1b[2J\x1b[H\rALL GOOD\x08\x9b31m\u202e"
FORBIDDEN = [b"\x1b", b"\x07", b"\x08", b"\xc2\x9b", "\u202e".encode()]

OUTAGE_AGENT = f'''import sys
# on the line the outage classifier quotes as evidence
print({ATTACK!r} + " API Error: 503 Service Unavailable", file=sys.stderr)
sys.exit(1)
'''

ATTACK_TEST = f'''import unittest


class AttackTest(unittest.TestCase):
    def test_prints_escapes(self):
        # the failure message ends the test output, which the gate's evidence quotes from its tail
        self.fail(" ".join([{ATTACK!r}] * 12))
'''


@pytest.fixture(scope="module")
def scratch():
    base = REPO / ".scratch"
    base.mkdir(exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="termtext-", dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def parked(scratch) -> Path:
    """A campaign whose only run parked on an author 'outage' carrying the attack text."""
    src = make_verified_pr(scratch / "repos", "parked")
    agent = scratch / "outage_agent.py"
    agent.write_text(OUTAGE_AGENT)
    opts = {"argv": [sys.executable, str(agent), "{tools}", "{max_turns}", "{cost_cap_usd}"]}
    plan = local_plan([candidate("pr-0", src, runtime_options={"author": opts})],
                      defaults={"runtimes": {"author": "command"}})
    d = scratch / "camp-parked"
    sweep("init", str(write_plan(scratch / "plan-parked.json", plan)), "--campaign", str(d))
    sweep("tick", "--campaign", str(d))
    wait_until("the run to park", lambda: record(d, "pr-0").parked_until, 300)
    return d


@pytest.fixture(scope="module")
def ended(scratch) -> Path:
    """A campaign whose only run ended gates_failed with the attack in the test output."""
    src = make_verified_pr(scratch / "repos", "ended", extra_files={"tests/test_attack.py": ATTACK_TEST})
    plan = local_plan([candidate("pr-0", src)])
    d = scratch / "camp-ended"
    sweep("init", str(write_plan(scratch / "plan-ended.json", plan)), "--campaign", str(d))
    tick_until_done(d, timeout=420)
    assert record(d, "pr-0").reason == "gates_failed"
    return d


def piped(*args: str) -> bytes:
    done = subprocess.run([sys.executable, "-m", "sweep", *args], capture_output=True, timeout=60,
                          cwd=REPO, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout


def on_a_pty(*args: str) -> bytes:
    """What a terminal would receive: the verb's stdout and stderr on the slave side of a real pty."""
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=REPO, close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:          # EIO: the slave side closed (the verb exited)
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=30) == 0, out
    return out


def assert_escaped(out: bytes) -> None:
    for bad in FORBIDDEN:
        assert bad not in out, (bad, out[:2000])
    assert b"\r" not in out.replace(b"\r\n", b"")        # a pty turns \n into \r\n; nothing else
    # shown, as visible escapes (a CR may have become a space where whitespace is normalised)
    assert b"\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H" in out, out[:3000]
    assert b"ALL GOOD\\x08\\x9b31m\\u202e" in out, out[:3000]


def test_status_escapes_an_agents_text_when_piped(parked):
    out = piped("status", "--campaign", str(parked))
    assert b"cooldown: author" in out
    assert_escaped(out)


def test_status_escapes_an_agents_text_on_a_terminal(parked):
    out = on_a_pty("status", "--campaign", str(parked))
    assert b"cooldown: author" in out
    assert_escaped(out)


def test_status_json_escapes_c1_and_bidi(parked):
    out = piped("status", "--json", "--campaign", str(parked))
    for bad in FORBIDDEN:
        assert bad not in out
    assert b"\\u001b]0;pwned\\u0007" in out and b"\\u009b31m\\u202e" in out


def test_show_escapes_an_agents_text_when_piped_and_on_a_terminal(parked):
    for out in (piped("show", "pr-0", "--campaign", str(parked)),
                on_a_pty("show", "pr-0", "--campaign", str(parked))):
        assert b"last error: outage in role author" in out
        assert_escaped(out)


def test_show_escapes_test_output_in_the_ending(ended):
    for out in (piped("show", "pr-0", "--campaign", str(ended)),
                on_a_pty("show", "pr-0", "--campaign", str(ended))):
        assert b"gates_failed" in out
        assert_escaped(out)


def test_report_md_escapes_test_output(ended):
    report = (run_dir(ended, "pr-0") / "report.md").read_bytes()
    assert b"gates_failed" in report
    assert_escaped(report)
