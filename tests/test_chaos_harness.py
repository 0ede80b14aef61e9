"""The chaos harness's own aim (tests/chaos/harness.py): its `kill -9 of a controller` hits the
controller, not a child the controller has just forked (which shows the controller's command line
until it execs). A CI round tripped the circuit breaker on `provider_config` that way: the kill
landed on the bwrap probe's child, and the probe read as "bwrap unusable"."""
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from tests.chaos.harness import Chaos

# a stand-in controller's command line; it forks a child that never execs, as a controller's
# fork for a probe or a session looks in the moment before its exec
FORKS = """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


def test_a_forked_child_still_showing_the_controllers_argv_is_not_a_controller(tmp_path):
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", FORKS, "controller", "--campaign", str(campaign),
                             "--token", "t0", "pr-000"], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        with open(f"/proc/{child}/cmdline", "rb") as fh:       # the child shows the parent's argv
            assert b"--token" in fh.read().split(b"\0")
        chaos = Chaos(SimpleNamespace(conf=tmp_path / "slurm.conf"), tmp_path, seed=1)
        chaos.campaign = campaign
        while chaos.controller_pids() != [proc.pid]:
            assert time.monotonic() < deadline, chaos.controller_pids()
            time.sleep(0.05)
        assert child not in chaos.controller_pids()
    finally:
        proc.kill()
        proc.wait()
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
