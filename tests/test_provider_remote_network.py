"""Network `api` on the remote providers: narrowed to the configured endpoints' addresses.

The real `daytona` SDK over real HTTP to tests/fakes/daytona_api.py and the real `modal` SDK
over real gRPC to tests/fakes/modal_api.py: the tests assert what the provider's API RECEIVES
(the allow list as CIDRs, block-all for `none`), and that `api` is refused, before anything is
created, when the endpoints cannot be expressed. The fakes do not enforce an allow list, and
nothing here can check that Daytona or Modal do: that is the provider's side (docs/security.md).

Positive cases use address literals from the documentation ranges (RFC 5737/3849): resolving
a real name needs DNS, which these machines do not have. `.invalid` never resolves (RFC 6761).
"""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sweep.execution import ExecSpec
from sweep.providers.base import SandboxError, SandboxSpec, sandbox_name
from sweep.providers.container import ContainerRunner
from sweep.providers.remote import resolve_allow_list


def test_allow_list_is_the_endpoints_addresses_as_host_cidrs():
    got = resolve_allow_list(["203.0.113.7:443", "198.51.100.9:8443", "203.0.113.7:80"], provider="p", families=(4,))
    assert got == ("198.51.100.9/32", "203.0.113.7/32")
    assert resolve_allow_list(["[2001:db8::5]:443", "192.0.2.1:443"], provider="p", families=(4, 6)) == \
        ("192.0.2.1/32", "2001:db8::5/128")
    assert resolve_allow_list([], provider="p", families=(4,)) == ()


@pytest.mark.parametrize("entry, words", [
    ("no-such-host.invalid:443", ["'no-such-host.invalid'", "does not resolve"]),
    ("127.0.0.1:8080", ["loopback"]),
    ("localhost:8080", ["loopback"]),
    ("api.example.com:443=127.0.0.1:9000", ["NAME:PORT=HOST:PORT"]),
    ("api.example.com", ["not HOST:PORT"]),
    ("[2001:db8::5]:443", ["no IPv4 address", "2001:db8::5"]),
])
def test_what_cannot_be_narrowed_is_a_config_error_naming_it(entry, words):
    with pytest.raises(SandboxError) as err:
        resolve_allow_list([entry], provider="daytona", families=(4,))
    assert err.value.error_class == "config"
    for w in words:
        assert w in str(err.value)


def _ids(role="author"):
    return dict(campaign_id="ab12cd34", run_id="r0001", job_id="77", role=role, attempt=1)


def _runner(sandboxes, tmp_path: Path) -> tuple[ContainerRunner, Path]:
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM python:3.12-slim\n")
    run_dir = tmp_path / "camp" / "runs" / "r0001"
    (run_dir / "ws").mkdir(parents=True)
    return ContainerRunner(sandboxes, environment_dir=env, run_dir=run_dir, **_ids()), run_dir


# --- Daytona: the whole ContainerRunner path --------------------------------------------------

@pytest.fixture
def daytona(tmp_path):
    pytest.importorskip("daytona")
    from sweep.providers import get_sandbox_provider
    from tests.fakes.daytona_api import FakeDaytona
    fake = FakeDaytona().start()
    key = tmp_path / "daytona.key"
    key.write_text(fake.api_key + "\n")
    yield fake, get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    fake.stop()


def _creates(fake) -> list[dict]:
    return [body for method, path, body in fake.requests
            if method == "POST" and path.rstrip("/").endswith("/sandbox") and body is not None]


def test_daytona_api_session_gets_only_the_endpoints_addresses(daytona, tmp_path):
    fake, provider = daytona
    runner, run_dir = _runner(provider, tmp_path)
    r = runner.run(ExecSpec(argv=["true"], cwd=run_dir / "ws", timeout_s=60, network="api",
                            endpoints=("203.0.113.7:443", "198.51.100.9:8443")))
    assert r.rc == 0, r.stderr_tail
    [body] = _creates(fake)
    assert body.get("networkAllowList") == "198.51.100.9/32,203.0.113.7/32"
    assert not body.get("networkBlockAll")
    assert r.network == "api" and r.network_allow == ["198.51.100.9/32", "203.0.113.7/32"]
    assert r.endpoints == ["203.0.113.7:443", "198.51.100.9:8443"]
    assert runner.network_policies == [{"network": "api", "endpoints": ["203.0.113.7:443", "198.51.100.9:8443"],
                                        "network_allow": ["198.51.100.9/32", "203.0.113.7/32"], "block_all": False}]


def test_daytona_none_blocks_all_and_api_without_endpoints_too(daytona, tmp_path):
    fake, provider = daytona
    runner, run_dir = _runner(provider, tmp_path)
    runner.run(ExecSpec(argv=["true"], cwd=run_dir / "ws", timeout_s=60, network="none"))
    runner.run(ExecSpec(argv=["true"], cwd=run_dir / "ws", timeout_s=60, network="api"))
    bodies = _creates(fake)
    assert [b.get("networkBlockAll") for b in bodies] == [True, True]
    assert [b.get("networkAllowList") for b in bodies] == [None, None]


def test_daytona_refuses_api_it_cannot_express_before_creating_anything(daytona, tmp_path):
    fake, provider = daytona
    runner, run_dir = _runner(provider, tmp_path)
    for endpoints in (("[2001:db8::5]:443",), ("no-such-host.invalid:443",)):
        with pytest.raises(SandboxError) as err:
            runner.run(ExecSpec(argv=["true"], cwd=run_dir / "ws", timeout_s=60, network="api", endpoints=endpoints))
        assert err.value.error_class == "config"
    assert _creates(fake) == []
    from sweep.providers.receipts import RECEIPTS_DIR
    assert not (run_dir / RECEIPTS_DIR).exists() or not any((run_dir / RECEIPTS_DIR).iterdir())


def test_a_provider_without_an_allow_list_refuses_api_never_full_egress(tmp_path):
    from sweep.providers.local_sandbox import LocalSandboxes
    runner, run_dir = _runner(LocalSandboxes(tmp_path / "sbx", isolation="none"), tmp_path)
    with pytest.raises(SandboxError) as err:
        runner.run(ExecSpec(argv=["true"], cwd=run_dir / "ws", timeout_s=60, network="api",
                            endpoints=("203.0.113.7:443",)))
    assert err.value.error_class == "config" and "refused" in str(err.value)


# --- Modal: create (exec is not served by the fake) --------------------------------------------

@pytest.fixture
def modal(tmp_path, monkeypatch):
    pytest.importorskip("modal")
    from sweep.providers import get_sandbox_provider
    from tests.fakes.modal_api import FakeModal
    fake = FakeModal().start()
    monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
    (tmp_path / "id").write_text("ak-fake")
    (tmp_path / "secret").write_text(fake.token_secret)
    yield fake, get_sandbox_provider("modal", server_url=fake.url, app_name="sweep-ab12cd34",
                                     token_id_file=str(tmp_path / "id"), token_secret_file=str(tmp_path / "secret"))
    fake.stop()


def _tags():
    return {"sweep.campaign": "ab12cd34", "sweep.run": "r1", "sweep.job": "9", "sweep.role": "author",
            "sweep.attempt": "1", "sweep.instance": uuid.uuid4().hex[:12]}


def test_modal_receives_the_cidr_allowlist_and_block_for_none(modal):
    from modal_proto import api_pb2
    fake, provider = modal
    allow = resolve_allow_list(["203.0.113.7:443", "[2001:db8::5]:443"], provider="modal",
                               families=provider.network_allow_families)
    t = _tags()
    h = provider.create(SandboxSpec(name=sandbox_name(t), tags=t, network_allow=allow))
    access = fake.sandboxes[h.sandbox_id]["definition"].network_access
    assert access.network_access_type == api_pb2.NetworkAccess.NetworkAccessType.ALLOWLIST
    assert list(access.allowed_cidrs) == ["203.0.113.7/32", "2001:db8::5/128"]
    assert (h.network, h.network_allow) == ("api", ("203.0.113.7/32", "2001:db8::5/128"))
    t = _tags()
    h = provider.create(SandboxSpec(name=sandbox_name(t), tags=t, network_block_all=True))
    access = fake.sandboxes[h.sandbox_id]["definition"].network_access
    assert access.network_access_type == api_pb2.NetworkAccess.NetworkAccessType.BLOCKED
    assert (h.network, h.network_allow) == ("none", ())
