"""Remote images: the task's Dockerfile named by a content hash, built once and reused (daytona
over the real SDK to tests/fakes/daytona_api.py), and the agent CLI layer a session needs."""
from __future__ import annotations

import uuid

import pytest

from sweep.providers.image import image_spec
from sweep.runtimes.facts import agent_clis, facts_of

AGENT_CLIS = agent_clis()       # runtime -> (npm package, pinned version), from each runtime's facts

# (daytona's fake serves no object storage, so its tests use a Dockerfile without other context)
NO_CONTEXT = "FROM python:3.11-slim\nWORKDIR /app\nCOPY repo/ /app/\n"
DOCKERFILE = "FROM python:3.11-slim\nCOPY requirements.txt /req.txt\nRUN true\nWORKDIR /app\nCOPY repo/ /app/\n"


def env(tmp_path, name="environment", dockerfile=DOCKERFILE, req="pytest\n"):
    d = tmp_path / name
    (d / "repo").mkdir(parents=True)
    (d / "repo" / "a.py").write_text(f"X = {uuid.uuid4().int}\n")   # a different repo every time
    (d / "Dockerfile").write_text(dockerfile)
    (d / "requirements.txt").write_text(req)
    return d


def test_identity_covers_the_dockerfile_and_its_context_but_not_the_uploaded_repo(tmp_path):
    a, b = image_spec(env(tmp_path, "a")), image_spec(env(tmp_path, "b"))
    assert a.identity == b.identity                 # repos differ: the repo is uploaded per run
    assert "COPY repo/" not in a.dockerfile and "COPY requirements.txt" in a.dockerfile
    assert a.context == ("requirements.txt",)
    assert image_spec(env(tmp_path, "c", req="pytest==8\n")).identity != a.identity
    assert image_spec(env(tmp_path, "d", dockerfile=DOCKERFILE + "RUN echo x\n")).identity != a.identity


def test_agent_cli_layer_is_pinned_and_changes_the_identity(tmp_path):
    plain = image_spec(env(tmp_path, "a"))
    for runtime, (package, version) in AGENT_CLIS.items():
        spec = image_spec(env(tmp_path, f"x-{runtime}"), agent_cli=facts_of(runtime).cli.npm_spec)
        last = spec.dockerfile.strip().splitlines()[-1]
        assert last.startswith("RUN ") and f"{package}@{version}" in last
        assert spec.identity != plain.identity


def test_a_copy_of_a_missing_or_outside_file_is_a_config_error_naming_the_dockerfile(tmp_path):
    from runstate.errors import ConfigError
    for i, line in enumerate(("COPY nothing-here.txt /x\n", "COPY ../../etc/passwd /x\n")):
        d = env(tmp_path, f"bad{i}", dockerfile="FROM python:3.11-slim\n" + line)
        with pytest.raises(ConfigError) as exc:
            image_spec(d)
        assert "Dockerfile" in str(exc.value.path) or "Dockerfile" in str(exc.value)


daytona = pytest.importorskip("daytona")
from sweep.providers import get_sandbox_provider  # noqa: E402
from sweep.providers.base import SandboxSpec, sandbox_name  # noqa: E402
from tests.fakes.daytona_api import FakeDaytona  # noqa: E402


@pytest.fixture
def fake():
    f = FakeDaytona(container=True).start()
    yield f
    f.stop()


def _tags(run="r1"):
    return {"sweep.campaign": "ab12cd34", "sweep.run": run, "sweep.job": "1", "sweep.role": "gates",
            "sweep.attempt": "1", "sweep.instance": uuid.uuid4().hex[:12]}


def test_a_second_run_with_the_same_environment_builds_no_image(fake, tmp_path):
    key = tmp_path / "key"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    df = env(tmp_path, "a", dockerfile=NO_CONTEXT) / "Dockerfile"
    t1, t2 = _tags("r1"), _tags("r2")
    h1 = p.create(SandboxSpec(name=sandbox_name(t1), tags=t1, dockerfile=df))
    h2 = p.create(SandboxSpec(name=sandbox_name(t2), tags=t2,
                              dockerfile=env(tmp_path, "b", dockerfile=NO_CONTEXT) / "Dockerfile"))
    assert len(fake.snapshot_builds) == 1 and h1.image == h2.image
    assert fake.sandbox_images[h1.sandbox_id] == fake.sandbox_images[h2.sandbox_id] == h1.image
    t3 = _tags("r3")
    h3 = p.create(SandboxSpec(name=sandbox_name(t3), tags=t3, dockerfile=df,
                              agent_cli=facts_of("claude-code").cli.npm_spec))
    assert len(fake.snapshot_builds) == 2 and h3.image != h1.image
    assert "@anthropic-ai/claude-code@" in fake.snapshot_builds[-1]     # what the build request carried


def test_container_mode_runs_in_the_sandbox_root_not_on_the_host(fake, tmp_path):
    key = tmp_path / "key"
    key.write_text(fake.api_key)
    p = get_sandbox_provider("daytona", api_url=fake.api_url, api_key_file=key)
    t = _tags()
    h = p.create(SandboxSpec(name=sandbox_name(t), tags=t, image="python:3.12-slim"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_text("inside\n")
    p.upload_archive(h, ws, "/sweep/w")
    r = p.exec(h, ["bash", "-c", f"cat /sweep/w/f; test -e {tmp_path} && echo host-visible; echo ok > /sweep/w/g"],
               cwd="/sweep/w", timeout_s=30)
    assert r.rc == 0 and "inside" in r.stdout_tail and "host-visible" not in r.stdout_tail
    out = tmp_path / "out"
    p.download_archive(h, "/sweep/w", out)
    assert (out / "g").read_text() == "ok\n"
