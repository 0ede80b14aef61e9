"""`sweep status --watch`, the filters and --all: in a real terminal (tmux) and piped.

The terminal is a real tmux pane: the test types the command, reads the pane with capture-pane,
changes the campaign underneath, reads it again, and stops the watch with Ctrl-C. Slurm's clients
on PATH are replaced by scripts that leave a mark if anything calls them.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from runstate import load_record, run_dir
from tests.campaigns import REPO, ctrl_c_default, payload_plan, sweep, tick_until_done, write_plan

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def campaign(tmp_path) -> Path:
    plan = payload_plan(3, target=4, max_parallel=3, gpus={2: 1},
                        extra={"max_spend_usd": 5.0}, scheduler={"local": {"gpu_slots": 1}})
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d))
    (d / "payload.json").write_bytes(orjson.dumps({"sleep": 0, "runs": {"pr-001": {"outcome": "blocked"}}}))
    tick_until_done(d)
    return d


def _no_slurm_path(tmp_path: Path) -> tuple[str, Path]:
    bin_dir = tmp_path / "fake-slurm-bin"
    bin_dir.mkdir()
    mark = tmp_path / "slurm-was-called"
    for name in ("squeue", "sbatch", "scancel", "sacct", "scontrol", "sinfo"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{mark}'\nexit 1\n")
        script.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}", mark


class Pane:
    def __init__(self, tmp_path: Path, env_path: str):
        self.name = f"sweep-watch-{secrets.token_hex(4)}"
        self.socket = str(tmp_path / "tmux.sock")
        self._tmux("new-session", "-d", "-s", self.name, "-x", "120", "-y", "50",
                   f"env PATH='{env_path}' PS1='$ ' bash --norc --noprofile")

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], check=True, capture_output=True,
                              text=True, timeout=20).stdout

    def send(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def capture(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.capture()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared in the pane:\n{screen}")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=20)


def test_watch_in_a_terminal_redraws_with_bars_and_stops_on_ctrl_c(campaign, tmp_path):
    env_path, mark = _no_slurm_path(tmp_path)
    pane = Pane(tmp_path, env_path)
    try:
        pane.send(f"cd {REPO} && {sys.executable} -m sweep status --watch --interval 0.3 --campaign {campaign}; "
                  "echo WATCH-EXIT=$?", "Enter")
        screen = pane.wait_for("Ctrl-C to stop")
        assert "verified     2/4     [" + "#" * 20 + "-" * 20 + "]  50%" in screen, screen
        assert "spend      0.00/5.00     USD [" + "-" * 40 + "]   0%" in screen, screen
        assert "blocked 1" in screen
        # the campaign changes underneath: the next refresh shows it, in place
        rdir = run_dir(campaign, "pr-000")
        rec = load_record(rdir).value
        from runstate.runs import save_record
        save_record(rdir, rec.model_copy(update={"outcome": "blocked", "reason": "changed-under-watch"}))
        screen = pane.wait_for("changed-under-watch")
        assert "verified     1/4" in screen and "blocked 2" in screen, screen
        assert screen.count("campaign t (") == 1, screen          # redrawn, not appended
        pane.send("C-c")
        screen = pane.wait_for("WATCH-EXIT=0")
        assert "Traceback" not in screen
    finally:
        pane.close()
    assert not mark.exists(), f"status --watch called Slurm: {mark.read_text()}"


def test_piped_status_is_plain_text_and_filters_cut_the_lists(campaign, tmp_path):
    env_path, mark = _no_slurm_path(tmp_path)
    env = {"PATH": env_path}
    out = sweep("status", "--all", "--campaign", str(campaign), env=env).stdout
    assert "\x1b" not in out and "[#" not in out and "%" not in out
    assert "verified:" in out and "pr-000" in out and "pr-002" in out
    lane = sweep("status", "--lane", "gpu", "--all", "--campaign", str(campaign), env=env).stdout
    assert "showing runs with lane=gpu" in lane and "pr-002" in lane and "pr-000" not in lane
    blocked = sweep("status", "--outcome", "blocked", "--campaign", str(campaign), env=env).stdout
    assert "pr-001" in blocked and "pr-000" not in blocked and "pr-002" not in blocked
    queued = sweep("status", "--state", "queued", "--campaign", str(campaign), env=env).stdout
    assert "pr-00" not in queued.split("runs:")[1].split("next:")[0]          # nothing queued
    # --watch piped: one plain snapshot per refresh, no escape codes
    proc = subprocess.Popen([sys.executable, "-m", "sweep", "status", "--watch", "--interval", "0.2",
                             "--campaign", str(campaign)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PATH": env_path}, preexec_fn=ctrl_c_default)
    assert proc.stdout is not None
    seen: list[str] = []
    while sum(line.startswith("--- ") for line in seen) < 3:  # three refreshes, however slow the machine
        line = proc.stdout.readline()
        assert line, f"status --watch ended early: {''.join(seen)!r}"
        seen.append(line)
    proc.send_signal(2)                                      # SIGINT, as Ctrl-C
    rest, _ = proc.communicate(timeout=60)
    text = "".join(seen) + rest
    assert proc.returncode == 0
    assert text.count("--- ") >= 3 and "\x1b" not in text and "[#" not in text
    assert not mark.exists()
    j = sweep("status", "--json", "--outcome", "verified", "--campaign", str(campaign), env=env).stdout
    st = orjson.loads(j)
    assert {e["run_id"] for e in st["ended"]} == {"pr-000", "pr-002"} and st["spend"]["cap_usd"] == 5.0
