"""Modal exec, upload and download through a recorded-call fake at the SDK boundary.

The gRPC fake (tests/fakes/modal_api.py) cannot serve exec or the filesystem API (Modal routes
them through a separate task command router), so here `modal.Sandbox.from_id` returns a stand-in
with the SDK's surface (`exec(*args, workdir=, env=, timeout=, text=)` -> a process with
`stdin.write/write_eof/drain`, iterable `stdout`, `stderr.read()`, `wait()`; `filesystem.write_bytes`
and `read_bytes` with absolute paths) that runs real processes in a directory and records every
call. What this shows: our adapter's use of that surface. What it cannot show: that Modal's real
service behaves like the stand-in (the live test, when credentials exist, is the check).
"""
from __future__ import annotations

import subprocess
import threading
import uuid
from pathlib import Path

import pytest

modal = pytest.importorskip("modal")

from sweep.providers import get_sandbox_provider  # noqa: E402
from sweep.providers.base import SandboxSpec, sandbox_name  # noqa: E402
from tests.fakes.modal_api import FakeModal  # noqa: E402


class _Stdin:
    def __init__(self, proc, calls):
        self.proc, self.calls = proc, calls

    def write(self, data):
        self.calls.append(("stdin.write", len(data)))
        self.proc.stdin.write(data if isinstance(data, bytes) else data.encode())

    def write_eof(self):
        self.calls.append(("stdin.write_eof",))
        self.proc.stdin.close()

    def drain(self):
        self.calls.append(("stdin.drain",))


class _Stderr:
    def __init__(self, proc):
        self.proc = proc

    def read(self):
        return self.proc.stderr.read().decode()


class _Process:
    def __init__(self, argv, cwd, env, timeout, calls):
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.timed_out = False
        self.timer = threading.Timer(timeout, self._expire)
        self.timer.start()
        self.stdin = _Stdin(self.proc, calls)
        self.stderr = _Stderr(self.proc)

    def _expire(self):
        self.timed_out = True
        self.proc.kill()

    @property
    def stdout(self):
        for line in self.proc.stdout:
            yield line.decode()

    def wait(self):
        rc = self.proc.wait()
        self.timer.cancel()
        return -1 if self.timed_out else rc        # the SDK reports its exec deadline as -1


class _Filesystem:
    def __init__(self, sb):
        self.sb = sb

    def write_bytes(self, data, remote_path):
        assert remote_path.startswith("/"), "the SDK wants absolute paths"
        self.sb.calls.append(("fs.write_bytes", remote_path, len(data)))
        p = self.sb.path(remote_path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes(data))

    def read_bytes(self, remote_path):
        assert remote_path.startswith("/"), "the SDK wants absolute paths"
        self.sb.calls.append(("fs.read_bytes", remote_path))
        return self.sb.path(remote_path).read_bytes()


class RecordedSandbox:
    def __init__(self, root: Path):
        self.root = root
        self.calls: list[tuple] = []
        self.processes: list[_Process] = []
        self.filesystem = _Filesystem(self)

    def path(self, remote: str) -> Path:
        return self.root / remote.lstrip("/")

    def exec(self, *args, workdir=None, env=None, timeout=None, text=True):
        self.calls.append(("exec", args, workdir, dict(env or {}), timeout, text))
        cwd = self.path(workdir or "/")
        cwd.mkdir(parents=True, exist_ok=True)
        proc = _Process(list(args), cwd, {"PATH": "/usr/bin:/bin", **(env or {})}, timeout, self.calls)
        self.processes.append(proc)
        return proc


@pytest.fixture
def setup(tmp_path, monkeypatch):
    fake = FakeModal().start()
    monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
    (tmp_path / "id").write_text("ak-fake")
    (tmp_path / "secret").write_text(fake.token_secret)
    p = get_sandbox_provider("modal", server_url=fake.url, app_name="sweep-x",
                             token_id_file=str(tmp_path / "id"), token_secret_file=str(tmp_path / "secret"))
    t = {"sweep.campaign": "ab12cd34", "sweep.run": "r1", "sweep.job": "9", "sweep.role": "gate",
         "sweep.attempt": "1", "sweep.instance": uuid.uuid4().hex[:12]}
    h = p.create(SandboxSpec(name=sandbox_name(t), tags=t))
    sb = RecordedSandbox(tmp_path / "remote")
    (tmp_path / "remote").mkdir()
    real_from_id = modal.Sandbox.from_id

    def from_id(sandbox_id, client=None):
        return sb if sandbox_id == h.sandbox_id else real_from_id(sandbox_id, client=client)
    monkeypatch.setattr(modal.Sandbox, "from_id", from_id)
    yield p, h, sb
    fake.stop()


def test_exec_streams_output_and_feeds_stdin(setup):
    p, h, sb = setup
    chunks: list[str] = []
    r = p.exec(h, ["sh", "-c", "echo one; read x; echo \"two:$x\"; echo oops >&2; exit 4"], cwd="/w",
               env={"A": "1"}, stdin=b"typed\n", timeout_s=20, on_output=chunks.append)
    assert r.rc == 4 and not r.timed_out
    assert chunks == ["one\n", "two:typed\n"]                   # one call per chunk, as it arrives
    assert "oops" in r.stderr_tail
    exec_call = sb.calls[0]
    assert exec_call[1] == ("sh", "-c", "echo one; read x; echo \"two:$x\"; echo oops >&2; exit 4")
    assert exec_call[2] == "/w" and exec_call[3] == {"A": "1"} and exec_call[4] == 20
    assert ("stdin.write_eof",) in sb.calls


def test_exec_walltime_is_minus_one(setup):
    p, h, sb = setup
    r = p.exec(h, ["sleep", "10"], cwd="/w", timeout_s=1)
    assert r.timed_out and r.rc is None


def test_exit_137_after_our_terminate_is_not_called_oom(setup):
    p, h, sb = setup
    p.terminated_by_us.add(h.sandbox_id)
    r = p.exec(h, ["sh", "-c", "exit 137"], cwd="/w", timeout_s=10)
    assert r.rc == 137 and "not an out-of-memory kill" in r.stderr_tail


def test_upload_and_download_one_archive_each_way(setup, tmp_path):
    p, h, sb = setup
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "f.txt").write_text("content\n")
    p.upload_archive(h, ws, "/workspace")
    assert (sb.root / "workspace" / "d" / "f.txt").read_text() == "content\n"
    assert [c[0] for c in sb.calls].count("fs.write_bytes") == 1
    p.exec(h, ["sh", "-c", "echo made > new.txt"], cwd="/workspace", timeout_s=10)
    back = tmp_path / "back"
    p.download_archive(h, "/workspace", back)
    assert (back / "new.txt").read_text() == "made\n" and (back / "d" / "f.txt").exists()
    assert [c[0] for c in sb.calls].count("fs.read_bytes") == 1
    assert not (sb.root / "workspace" / ".sweep-download.tar.gz").exists()


def test_a_command_that_goes_silent_is_stopped_as_stalled(setup):
    p, h, sb = setup
    chunks: list[str] = []
    r = p.exec(h, ["sh", "-c", "echo working; sleep 120; echo never"], cwd="/w", timeout_s=120,
               idle_timeout_s=1.5, on_output=chunks.append)
    assert r.stopped == "stalled" and r.rc is None and not r.timed_out
    assert chunks == ["working\n"] and r.duration_s < 100
    first = sb.processes[0].proc
    assert first.wait(timeout=30) is not None              # the command (and its sleep) were stopped
    assert [c[1][:2] for c in sb.calls if c[0] == "exec"][1] == ("bash", "-c")   # by a second exec
    ok = p.exec(h, ["sh", "-c", "echo a; sleep 0.2; echo b"], cwd="/w", timeout_s=30, idle_timeout_s=20,
                on_output=chunks.append)
    assert ok.rc == 0 and ok.stopped is None and "b" in ok.stdout_tail
