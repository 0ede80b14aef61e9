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
    yield get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
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
