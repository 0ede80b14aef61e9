"""One contract suite for the sandbox lifecycle, run against the local provider (real processes,
bubblewrap where available) and the daytona provider (the real SDK over HTTP to the local fake)."""
from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from sweep.providers import get_sandbox_provider
from sweep.providers.base import SandboxProvider, SandboxSpec, TerminateOutcome, sandbox_name


@pytest.fixture(params=["local", "daytona"])
def provider(request, tmp_path):
    if request.param == "local":
        # outside /tmp: the local sandbox gives the child a private /tmp, which would hide it
        root = Path(tempfile.mkdtemp(prefix="sweep-sandboxes-", dir="/var/tmp"))
        yield get_sandbox_provider("local", root=root)
        shutil.rmtree(root, ignore_errors=True)
        return
    pytest.importorskip("daytona")
    from tests.fakes.daytona_api import FakeDaytona
    fake = FakeDaytona().start()
    key = tmp_path / "daytona.key"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    p._fake_roots = fake.roots                # test-only: where the fake keeps each sandbox
    p._fake_killed = fake.killed              # and the commands a session delete had to kill
    yield p
    fake.stop()


def tags(campaign="c0ffee00"):
    return {"sweep.campaign": campaign, "sweep.run": "r1", "sweep.job": "5", "sweep.role": "gate",
            "sweep.attempt": "1", "sweep.instance": uuid.uuid4().hex[:12]}


def test_lifecycle(provider, tmp_path):
    assert isinstance(provider, SandboxProvider)
    t = tags()
    h = provider.create(SandboxSpec(name=sandbox_name(t), tags=t))
    assert provider.create(SandboxSpec(name=sandbox_name(t), tags=t)).sandbox_id == h.sandbox_id
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "in.txt").write_text("payload\n")
    provider.upload_archive(h, ws, "/workspace")
    chunks: list[str] = []
    r = provider.exec(h, ["sh", "-c", "read x; cat sub/in.txt; echo \"$x\" > out.txt; echo done"],
                      cwd="/workspace", stdin=b"typed\n", timeout_s=30, on_output=chunks.append)
    assert r.rc == 0 and "payload" in r.stdout_tail and "done" in "".join(chunks)
    bad = provider.exec(h, ["sh", "-c", "exit 3"], cwd="/workspace", timeout_s=30)
    assert bad.rc == 3 and not bad.timed_out
    slow = provider.exec(h, ["sleep", "10"], cwd="/workspace", timeout_s=1)
    assert slow.timed_out and slow.rc is None
    back = tmp_path / "back"
    provider.download_archive(h, "/workspace", back)
    assert (back / "out.txt").read_text() == "typed\n" and (back / "sub" / "in.txt").exists()
    other = tags(campaign="0ther0ca")
    provider.create(SandboxSpec(name=sandbox_name(other), tags=other))
    assert [i.name for i in provider.list_by_tags({"sweep.campaign": "c0ffee00"})] == [h.name]
    assert provider.terminate(h) == TerminateOutcome.CONFIRMED
    assert provider.terminate(h) == TerminateOutcome.ALREADY_GONE
    assert provider.list_by_tags({"sweep.campaign": "c0ffee00"}) == []
    assert len(provider.list_by_tags({"sweep.campaign": "0ther0ca"})) == 1


def _host_dir(provider, h, remote: str) -> Path:
    """Where a sandbox path is on this host (both providers keep a sandbox as a directory here)."""
    if provider.name == "local":
        return provider.root / h.sandbox_id / "fs" / remote.lstrip("/")
    return Path(provider._fake_roots[h.sandbox_id]) / remote.lstrip("/")


def test_exec_streams_output_before_the_command_ends(provider, tmp_path):
    t = tags()
    h = provider.create(SandboxSpec(name=sandbox_name(t), tags=t))
    (tmp_path / "empty").mkdir()
    provider.upload_archive(h, tmp_path / "empty", "/workspace")
    go = _host_dir(provider, h, "/workspace") / "go"
    chunks: list[str] = []

    def seen(chunk: str) -> None:         # the command waits for this file, made on its first output
        chunks.append(chunk)
        go.touch()

    r = provider.exec(h, ["sh", "-c", "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"],
                      cwd="/workspace", timeout_s=60, on_output=seen)
    assert r.rc == 0 and not r.timed_out and r.stopped is None
    assert chunks[0].startswith("first") and "second" in "".join(chunks) and len(chunks) >= 2
    provider.terminate(h)


def test_a_command_that_goes_silent_is_stopped_as_stalled(provider, tmp_path):
    t = tags()
    h = provider.create(SandboxSpec(name=sandbox_name(t), tags=t))
    (tmp_path / "empty").mkdir()
    provider.upload_archive(h, tmp_path / "empty", "/workspace")
    chunks: list[str] = []
    r = provider.exec(h, ["sh", "-c", "echo working; sleep 120; echo never"], cwd="/workspace",
                      timeout_s=120, idle_timeout_s=1.5, on_output=chunks.append)
    assert r.stopped == "stalled" and r.rc is None and not r.timed_out
    assert "working" in "".join(chunks) and "never" not in r.stdout_tail
    assert r.duration_s < 100                 # stopped by the detector, long before the walltime
    if provider.name == "daytona":            # the session delete ended the command itself
        assert any("sleep 120" in c for c in provider._fake_killed)
    walltime = provider.exec(h, ["sh", "-c", "while true; do echo tick; sleep 0.2; done"], cwd="/workspace",
                             timeout_s=2, idle_timeout_s=30)
    assert walltime.timed_out and walltime.stopped is None and walltime.rc is None   # chatty: walltime, not a stall
    env = provider.exec(h, ["sh", "-c", 'echo "$GREETING"'], cwd="/workspace", env={"GREETING": "a b;c"},
                        timeout_s=30)
    assert env.rc == 0 and "a b;c" in env.stdout_tail
    provider.terminate(h)
