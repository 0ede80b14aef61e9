"""The modal provider: the real `modal` SDK over real gRPC to a local fake of Modal's control
plane (tests/fakes/modal_api.py), V1 sandbox backend (MODAL_SANDBOX_V2=0).

Covered here: create (tags, timeout, idle_timeout, cpu, memory, GPU reach the API), idempotent
create, list by tags, terminate (confirmed, then already gone), error classes. NOT covered
offline: exec, upload and download (they go through Modal's task command router, a second gRPC
service the fake does not serve), image builds, connection refused (the SDK retries ~56 s first).
"""
from __future__ import annotations

import uuid

import pytest

pytest.importorskip("modal")

from grpclib import Status  # noqa: E402

from sweep.providers import get_sandbox_provider  # noqa: E402
from sweep.providers.base import GpuRequest, SandboxError, SandboxSpec, TerminateOutcome, sandbox_name  # noqa: E402
from tests.fakes.modal_api import FakeModal  # noqa: E402


@pytest.fixture
def fake(monkeypatch):
    f = FakeModal().start()
    monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
    yield f
    f.stop()


def make(fake, tmp_path, secret=None):
    (tmp_path / "id").write_text("ak-fake")
    (tmp_path / "secret").write_text(secret or fake.token_secret)
    return get_sandbox_provider("modal", server_url=fake.url, app_name="sweep-ab12cd34",
                                token_id_file=str(tmp_path / "id"), token_secret_file=str(tmp_path / "secret"))


def tags(campaign="ab12cd34"):
    return {"sweep.campaign": campaign, "sweep.run": "r1", "sweep.job": "9", "sweep.role": "solver",
            "sweep.attempt": "2", "sweep.instance": uuid.uuid4().hex[:12]}


def test_create_list_terminate(fake, tmp_path):
    p = make(fake, tmp_path)
    t = tags()
    h = p.create(SandboxSpec(name=sandbox_name(t), tags=t, timeout_s=1200, idle_timeout_s=300, cpu=2,
                             memory_mb=3000, gpu=GpuRequest(count=1, type="H100")))
    s = fake.sandboxes[h.sandbox_id]
    d = s["definition"]
    assert s["tags"] == t and d.name == sandbox_name(t)
    assert d.timeout_secs == 1200 and d.idle_timeout_secs == 300
    assert d.resources.milli_cpu == 2000 and d.resources.memory_mb == 3000
    assert d.resources.gpu_config.count == 1 and d.resources.gpu_config.gpu_type == "H100"
    assert p.create(SandboxSpec(name=sandbox_name(t), tags=t)).sandbox_id == h.sandbox_id
    assert len(fake.sandboxes) == 1
    other = tags(campaign="0ther0ca")
    p.create(SandboxSpec(name=sandbox_name(other), tags=other))
    listed = p.list_by_tags({"sweep.campaign": "ab12cd34"})
    assert [(i.sandbox_id, i.name, i.tags) for i in listed] == [(h.sandbox_id, h.name, t)]
    assert p.terminate(h) == TerminateOutcome.CONFIRMED
    assert p.terminate(h) == TerminateOutcome.ALREADY_GONE
    assert p.list_by_tags({"sweep.campaign": "ab12cd34"}) == []
    assert len(p.list_by_tags({"sweep.campaign": "0ther0ca"})) == 1
    assert h.sandbox_id in p.terminated_by_us


def test_a_taken_name_with_another_instance_is_refused(fake, tmp_path):
    p = make(fake, tmp_path)
    t = tags()
    p.create(SandboxSpec(name=sandbox_name(t), tags=t))
    with pytest.raises(SandboxError) as e:
        p.create(SandboxSpec(name=sandbox_name(t), tags=dict(t, **{"sweep.instance": "0000deadbeef"})))
    assert e.value.error_class == "failure"


@pytest.mark.parametrize("status, expected", [(Status.RESOURCE_EXHAUSTED, "throttle"),
                                              (Status.UNAVAILABLE, "outage"), (Status.INTERNAL, "outage"),
                                              (Status.PERMISSION_DENIED, "config"),
                                              (Status.INVALID_ARGUMENT, "failure")])
def test_grpc_errors_are_classified(fake, tmp_path, monkeypatch, status, expected):
    monkeypatch.setenv("MODAL_MAX_THROTTLE_WAIT", "0")
    p = make(fake, tmp_path)
    fake.fail("SandboxCreate", status, times=20)
    t = tags()
    with pytest.raises(SandboxError) as e:
        p.create(SandboxSpec(name=sandbox_name(t), tags=t))
    assert e.value.error_class == expected, e.value.evidence


def test_wrong_token_is_config(fake, tmp_path):
    p = make(fake, tmp_path, secret="not-the-secret")
    with pytest.raises(SandboxError) as e:
        p.list_by_tags({"sweep.campaign": "ab12cd34"})
    assert e.value.error_class == "config" and "not-the-secret" not in str(e.value)


def test_missing_token_is_config(fake, monkeypatch):
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    with pytest.raises(SandboxError) as e:
        get_sandbox_provider("modal", server_url=fake.url)
    assert e.value.error_class == "config" and "MODAL_TOKEN_ID" in str(e.value)


def test_the_task_image_spec_reaches_modal_with_the_cli_layer_and_no_network(fake, tmp_path):
    from sweep.providers.image import image_spec
    env = tmp_path / "environment"
    (env / "repo").mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM python:3.11-slim\nRUN echo toolchain\nWORKDIR /app\nCOPY repo/ /app/\n")
    p = make(fake, tmp_path)
    t = tags()
    from sweep.runtimes.facts import facts_of
    codex = facts_of("codex").cli.npm_spec
    h = p.create(SandboxSpec(name=sandbox_name(t), tags=t, dockerfile=env / "Dockerfile", agent_cli=codex,
                             network_block_all=True))
    commands = "\n".join("\n".join(layer) for layer in fake.images)     # every layer Modal asked for
    assert "RUN echo toolchain" in commands and "@openai/codex@" in commands and "COPY repo" not in commands
    assert "BLOCKED" in str(fake.sandboxes[h.sandbox_id]["definition"].network_access)
    assert h.image == image_spec(env, agent_cli=codex).identity
