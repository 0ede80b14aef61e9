"""Helpers shared by the agent-runtime tests: run one role session of a real agent CLI against a
fake model server, and record its stream as a parser fixture.

Streams are recorded into tests/fixtures/streams/<cli>-<version>/<case>.jsonl when
SWEEP_RECORD_STREAMS=1 (paths of the test's temp directory are replaced by /WORK, so the fixtures
name no machine). The parser tests replay them without the CLI.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from roles import RoleSpec, load_manifest, manifest_sha256, shipped_manifests_dir
from sweep.providers.local import LocalProvider
from sweep.runtimes import SessionRequest, run_session

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "streams"
CLAUDE = shutil.which("claude")
needs_claude = pytest.mark.skipif(CLAUDE is None, reason="the claude CLI is not installed (.ci/run installs it)")
FAKE_KEY = "sk-ant-fake-0123456789"
# a plan's [secrets] naming the controller's environment: `sweep init` refuses a claude-code or
# codex role whose key family has no entry; these campaigns get their keys from the tick's env
ENV_SECRETS = {"anthropic": {"env": "ANTHROPIC_API_KEY"}, "openai": {"env": "OPENAI_API_KEY"}}


def shipped(role: str) -> tuple[RoleSpec, str]:
    path = shipped_manifests_dir() / f"{role}.toml"
    return load_manifest(path), manifest_sha256(path)


def custom_role(role: str, **budget) -> RoleSpec:
    """A shipped role with a different budget (no source file, so no manifest sha check)."""
    spec, _ = shipped(role)
    data = spec.model_dump()
    data["budget"] = {**data["budget"], **budget}
    return RoleSpec.model_validate(data)


def workspace_for(tmp_path: Path, role: str) -> Path:
    ws = tmp_path / "ws"
    (ws / "repo").mkdir(parents=True, exist_ok=True)
    (ws / "repo" / "code.py").write_text("def add(a, b):\n    return a - b\n")
    if role in ("author", "reviewer"):
        (ws / "task").mkdir(exist_ok=True)
        (ws / "task" / "instruction.md").write_text("make add add\n")
    return ws


def run_agent(tmp_path: Path, role: str | RoleSpec, runtime: str, options: dict, *, prompt: str = "do the task",
              secrets: dict | None = None, workspace: Path | None = None, isolation: str = "bwrap",
              session_name: str = "0001", limits=None, resume=None, stop_after_tool_calls=None):
    if isinstance(role, str):
        spec, sha = shipped(role)
    else:
        spec, sha = role, "0" * 64
    ws = workspace or workspace_for(tmp_path, spec.name)
    if secrets is None:
        key = tmp_path / "anthropic.key"
        key.write_text(FAKE_KEY + "\n")
        key.chmod(0o600)
        name = "ANTHROPIC_API_KEY" if spec.key_family == "anthropic" else "OPENAI_API_KEY"
        secrets = {name: key}
    req = SessionRequest(role=spec, manifest_sha256=sha, runtime=runtime, runtime_options=options,
                         workspace=ws, session_dir=tmp_path / "run" / "sessions" / f"{session_name}-{spec.name}",
                         prompt=prompt, inputs={}, secrets=secrets, limits=limits, resume=resume,
                         stop_after_tool_calls=stop_after_tool_calls)
    return run_session(req, LocalProvider(isolation=isolation, kill_grace_s=1.0)), req


def resume_in_view(req: SessionRequest, argv: list[str], env: dict[str, str], *, url: str, stdin: bytes,
                   state: Path, reads: tuple[Path, ...] = ()):
    """Run a kept session's CLI again where it ran: in the sandbox, with the session's fixed view
    (argv.json `view`: its thread names /app and /session paths), its state directory writable
    and the fake model server reachable. (the provider's result, the CLI's stdout)."""
    import json
    from sweep.execution import ExecSpec
    from sweep.runtimes.base import endpoint_of
    session = Path(req.session_dir)
    view = tuple((Path(host), shown) for host, shown in json.loads((session / "argv.json").read_text())["view"])
    assert view, "the session ran without a fixed view"
    (session / "resume-stdin.txt").write_bytes(stdin)
    out = session / "resume-stdout.txt"
    result = LocalProvider(isolation="bwrap", kill_grace_s=1.0).run(ExecSpec(
        argv=argv, cwd=Path(req.workspace), timeout_s=120, write_paths=(Path(req.workspace), state),
        read_paths=reads, network="api", endpoints=(endpoint_of(url),), env=env,
        stdin_path=session / "resume-stdin.txt", stdout_path=out, stderr_path=session / "resume-stderr.txt",
        view=view))
    return result, out.read_bytes()


def record_stream(tmp_path: Path, req: SessionRequest, cli: str, case: str) -> None:
    if os.environ.get("SWEEP_RECORD_STREAMS") != "1":
        return
    out = FIXTURES / cli / f"{case}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = (Path(req.session_dir) / "stdout.txt").read_text()
    text = text.replace(str(tmp_path), "/WORK").replace(str(tmp_path).replace("/", "-"), "-WORK")
    out.write_text(text)
