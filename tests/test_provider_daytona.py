"""The daytona provider: the real `daytona` SDK over real HTTP to a local fake of Daytona's REST
API (tests/fakes/daytona_api.py). What the fake cannot show: image builds, real isolation,
auto-stop actually firing, session (streaming) exec."""
from __future__ import annotations

import socket
import uuid

import pytest

pytest.importorskip("daytona")

from sweep.providers import get_sandbox_provider  # noqa: E402
from sweep.providers.base import (GpuRequest, SandboxError, SandboxSpec, TerminateOutcome,  # noqa: E402
                                  sandbox_name)
from tests.fakes.daytona_api import FakeDaytona  # noqa: E402


@pytest.fixture
def fake():
    f = FakeDaytona().start()
    yield f
    f.stop()


@pytest.fixture
def provider(fake, tmp_path):
    key = tmp_path / "daytona.key"
    key.write_text(fake.api_key + "\n")
    return get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)


def tags(campaign="ab12cd34", run="r0001", job="4242", role="solver", attempt="1", instance=None):
    return {"sweep.campaign": campaign, "sweep.run": run, "sweep.job": job, "sweep.role": role,
            "sweep.attempt": attempt, "sweep.instance": instance or uuid.uuid4().hex[:12]}


def spec(t, **kw):
    return SandboxSpec(name=sandbox_name(t), tags=t, **kw)


def test_whole_flow_create_upload_exec_download_list_terminate(fake, provider, tmp_path):
    dockerfile = tmp_path / "environment" / "Dockerfile"
    dockerfile.parent.mkdir()
    dockerfile.write_text("FROM python:3.12-slim\nRUN pip install pytest\n")
    t = tags()
    h = provider.create(spec(t, dockerfile=dockerfile, cpu=2, memory_mb=4096, timeout_s=1800, idle_timeout_s=600))
    assert h.name == sandbox_name(t) and h.name.startswith("sw-ab12cd34-r0001-solver-a1-")
    create = next(body for m, p, body in fake.requests if m == "POST" and p == "/api/sandbox")
    assert create["name"] == h.name
    assert {k: create["labels"][k] for k in t} == t
    assert create["autoDeleteInterval"] == 0 and create["autoStopInterval"] == 10 and create["ttlMinutes"] == 30
    snap = next(body for m, p, body in fake.requests if m == "POST" and p == "/api/snapshots")
    assert snap["cpu"] == 2 and snap["memory"] == 4 and create["snapshot"] == snap["name"]
    assert "RUN pip install pytest" in snap["buildInfo"]["dockerfileContent"]

    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "a.py").write_text("X = 1\n")
    (ws / "README").write_text("hello\n")
    provider.upload_archive(h, ws, "/workspace")

    seen = []
    r = provider.exec(h, ["bash", "-c", "cat pkg/a.py; read line; echo \"got:$line\"; echo new > made.txt"],
                      cwd="/workspace", stdin=b"from-stdin\n", timeout_s=30, on_output=seen.append)
    assert r.rc == 0 and not r.timed_out
    assert "X = 1" in r.stdout_tail and "got:from-stdin" in r.stdout_tail
    assert seen and "got:from-stdin" in seen[0]

    out = tmp_path / "back"
    provider.download_archive(h, "/workspace", out)
    assert (out / "made.txt").read_text() == "new\n"
    assert (out / "pkg" / "a.py").read_text() == "X = 1\n"
    assert not (out / ".sweep-download.tar.gz").exists()

    listed = provider.list_by_tags({"sweep.campaign": "ab12cd34"})
    assert [i.sandbox_id for i in listed] == [h.sandbox_id]
    assert provider.list_by_tags({"sweep.campaign": "ffffffff"}) == []

    assert provider.terminate(h) == TerminateOutcome.CONFIRMED
    assert provider.terminate(h) == TerminateOutcome.ALREADY_GONE
    assert provider.list_by_tags({"sweep.campaign": "ab12cd34"}) == []


def test_argv_is_quoted_never_shell_syntax(fake, provider, tmp_path):
    h = provider.create(spec(tags()))
    evil = "$(touch pwned); touch pwned2"
    r = provider.exec(h, ["echo", evil], cwd="/w", timeout_s=30)
    assert r.rc == 0 and r.stdout_tail.strip() == evil
    assert not list(fake.roots[h.sandbox_id].rglob("pwned*"))


def test_create_is_idempotent_on_the_name(fake, provider):
    t = tags()
    a = provider.create(spec(t))
    b = provider.create(spec(t))           # a retried create after a lost answer: 409 -> the same one
    assert a.sandbox_id == b.sandbox_id and len(fake.live()) == 1


def test_a_taken_name_with_another_instance_is_refused(fake, provider):
    t = tags()
    provider.create(spec(t))
    other = dict(t, **{"sweep.instance": "0000deadbeef"})
    with pytest.raises(SandboxError) as e:
        provider.create(SandboxSpec(name=sandbox_name(t), tags=other))
    assert e.value.error_class == "failure"


def test_gpu_request_reaches_the_api(fake, provider):
    provider.create(spec(tags(), gpu=GpuRequest(count=1, type="H100")))
    create = next(body for m, p, body in fake.requests if m == "POST" and p == "/api/sandbox")
    assert create["gpu"] == 1 and create["gpuType"] == ["H100"]
    with pytest.raises(SandboxError) as e:
        provider.create(spec(tags(), gpu=GpuRequest(count=1, type="TPU-v9")))
    assert e.value.error_class == "config"


def test_exec_walltime(fake, provider):
    h = provider.create(spec(tags()))
    r = provider.exec(h, ["sleep", "5"], cwd="/w", timeout_s=1)
    assert r.timed_out and r.rc is None


@pytest.mark.parametrize("status, expected", [(429, "throttle"), (503, "outage"), (502, "outage"),
                                              (401, "config"), (403, "config"), (400, "failure")])
def test_http_errors_are_classified(fake, provider, status, expected):
    fake.fail(status, times=10, path_contains="/api/sandbox")
    with pytest.raises(SandboxError) as e:
        provider.create(spec(tags()))
    assert e.value.error_class == expected, e.value.evidence
    assert str(status) in e.value.evidence or expected == "config"


def test_wrong_key_is_config(fake, tmp_path):
    key = tmp_path / "k"
    key.write_text("not-the-key")
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    with pytest.raises(SandboxError) as e:
        p.list_by_tags({"sweep.campaign": "ab12cd34"})
    assert e.value.error_class == "config"


def test_connection_refused_is_outage(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # closed again: nothing listens there
    key = tmp_path / "k"
    key.write_text("k")
    p = get_sandbox_provider("daytona", api_url=f"http://127.0.0.1:{port}/api", api_key_file=key)
    with pytest.raises(SandboxError) as e:
        p.list_by_tags({"sweep.campaign": "ab12cd34"})
    assert e.value.error_class == "outage", e.value.evidence


def test_missing_key_is_config(monkeypatch, fake):
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with pytest.raises(SandboxError) as e:
        get_sandbox_provider("daytona", api_url=fake.api_url)
    assert e.value.error_class == "config" and "DAYTONA_API_KEY" in str(e.value)


def test_secret_key_is_not_in_error_text(fake, provider, tmp_path):
    fake.fail(503, times=10)
    with pytest.raises(SandboxError) as e:
        provider.list_by_tags({"sweep.campaign": "x"})
    assert fake.api_key not in str(e.value) and fake.api_key not in e.value.evidence
