"""The local provider with real processes: environment allowlist, secrets, walltime kills,
bubblewrap walls, isolation settings, and the redactor."""
from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from runstate.errors import ConfigError, ProviderError
from sweep.providers import ExecSpec, get_provider
from sweep.providers.local import LocalProvider, child_path
from sweep.providers.local.bwrap import probe_bwrap
from sweep.providers.local.process import Redactor

local_module_name = "sweep.providers.local"

HAVE_BWRAP = probe_bwrap()[0] is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not usable here (.ci/run installs it)")
ISOLATIONS = [pytest.param("bwrap", marks=needs_bwrap), "none"]


def py(code: str) -> list[str]:
    return ["python3", "-c", code]


@pytest.fixture(params=ISOLATIONS)
def provider(request) -> LocalProvider:
    return LocalProvider(isolation=request.param, kill_grace_s=0.5)


def run(provider, tmp_path, argv, **kw):
    kw.setdefault("cwd", tmp_path)
    kw.setdefault("timeout_s", 30)
    kw.setdefault("stdout_path", tmp_path / "stdout.txt")
    kw.setdefault("stderr_path", tmp_path / "stderr.txt")
    return provider.run(ExecSpec(argv=argv, **kw))


def live_processes_with(marker: str) -> list[int]:
    """Pids whose command line contains `marker` and that are not zombies."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry))
    return found


def live_members_of_group(pgid: int) -> list[int]:
    """Pids in process group `pgid` that are not zombies (a killed orphan stays a zombie until
    init reaps it; it runs nothing)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            found.append(int(entry))
    return found


# --- environment -------------------------------------------------------------------------------

@needs_bwrap
def test_the_sandbox_path_keeps_only_entries_it_shows(tmp_path, monkeypatch):
    """PATH inside bwrap: entries under a system directory, sweep's runtime or a declared read path
    (in any spelling of them), nothing else of the caller's, and not a directory that merely
    starts with the same letters."""
    shown = tmp_path / "tools"
    (shown / "bin").mkdir(parents=True)
    monkeypatch.setenv("PATH", f"/usr/bin/:/usrx/bin:/opt/hidden/bin:{shown}/bin:{shown}x/bin:/usr//local/bin:/bin")
    out = run(LocalProvider(isolation="bwrap", kill_grace_s=0.5), tmp_path, ["/bin/sh", "-c", 'echo "$PATH"'],
              read_paths=(shown,))
    assert out.rc == 0, out.stderr_tail
    assert out.stdout_tail.strip() == f"/usr/bin/:{shown}/bin:/usr//local/bin:/bin"

def test_caller_environment_does_not_leak_except_the_allowlist(provider, tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEP_CANARY", "canary-value-1234")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-caller-xyz")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-for-you")
    monkeypatch.setenv("PATH", os.environ["PATH"] + ":relative/bin")
    # sys.executable, not `python3`: a pyenv shim would add its own PYENV_* variables.
    out = run(provider, tmp_path, [sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
              env_passthrough=("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"), env={"EXTRA": "1"})
    assert out.rc == 0, out.stderr_tail
    import json
    seen = json.loads(out.stdout_tail.replace("[REDACTED]", "REDACTED"))
    assert "SWEEP_CANARY" not in seen and "OPENAI_API_KEY" not in seen
    assert seen["ANTHROPIC_API_KEY"] == "REDACTED"      # present in the child, redacted in the transcript
    assert "ANTHROPIC_BASE_URL" not in seen             # not set by the caller: not invented
    assert seen["EXTRA"] == "1"
    assert set(seen) <= {"PATH", "LANG", "HOME", "TMPDIR", "ANTHROPIC_API_KEY", "EXTRA", "PWD", "SHLVL", "_",
                         "LC_CTYPE"}
    assert "relative/bin" not in seen["PATH"]
    assert seen["HOME"] != os.environ.get("HOME")
    assert "sk-ant-from-caller-xyz" not in (tmp_path / "stdout.txt").read_text()
    assert sorted(out.env_names) == sorted({"PATH", "LANG", "HOME", "TMPDIR", "ANTHROPIC_API_KEY", "EXTRA"})


def test_secret_is_injected_from_its_file_and_reaches_no_file(provider, tmp_path):
    secret = "sk-test-" + uuid.uuid4().hex
    secret_file = tmp_path / "key"
    secret_file.write_text(secret + "\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    code = ("import os, hashlib, sys; v = os.environ['ANTHROPIC_API_KEY']; "
            "print('key is', v); print(v[:6], v[6:], file=sys.stderr); "
            "print('sha', hashlib.sha256(v.encode()).hexdigest())")
    out = run(provider, tmp_path, py(code), secret_env={"ANTHROPIC_API_KEY": secret_file},
              stdout_path=logs / "out.txt", stderr_path=logs / "err.txt")
    import hashlib
    assert out.rc == 0
    assert f"sha {hashlib.sha256(secret.encode()).hexdigest()}" in out.stdout_tail
    assert "key is [REDACTED]" in out.stdout_tail
    for path in logs.iterdir():
        assert secret not in path.read_text()
        assert os.stat(path).st_mode & 0o777 == 0o600
    assert secret not in " ".join(out.argv)


def test_missing_or_empty_secret_file_fails_before_running(tmp_path):
    provider = LocalProvider(isolation="none")
    with pytest.raises(ProviderError):
        run(provider, tmp_path, ["true"], secret_env={"ANTHROPIC_API_KEY": tmp_path / "nope"})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ProviderError):
        run(provider, tmp_path, ["true"], secret_env={"ANTHROPIC_API_KEY": tmp_path / "empty"})


def test_stdin_is_closed(provider, tmp_path):
    out = run(provider, tmp_path, py("import sys; print(repr(sys.stdin.read()))"), timeout_s=10)
    assert out.rc == 0 and "''" in out.stdout_tail and not out.timed_out


def test_a_missing_command_is_a_launch_error_not_a_crash(provider, tmp_path):
    out = run(provider, tmp_path, ["no-such-agent-cli-" + uuid.uuid4().hex[:6]])
    assert out.rc is None and out.launch_error and "command not found" in out.launch_error


def test_child_path_drops_relative_entries():
    assert child_path("/usr/bin:.:bin::/bin") == "/usr/bin:/bin"
    assert child_path("") == "/usr/local/bin:/usr/bin:/bin"


# --- walltime ----------------------------------------------------------------------------------

def test_walltime_kills_the_whole_process_group_and_reports_a_timeout(provider, tmp_path):
    marker = f"{700 + os.getpid() % 97}.{uuid.uuid4().int % 10**6}"
    script = f"sleep {marker} & sleep {marker} & python3 -c 'import time; time.sleep(1000)' {marker} ; wait"
    started = time.monotonic()
    out = run(provider, tmp_path, ["sh", "-c", script], timeout_s=1.0)
    assert out.timed_out and time.monotonic() - started < 10
    time.sleep(0.2)
    assert live_processes_with(marker) == []
    assert live_members_of_group(out.pgid) == []


@needs_bwrap
def test_walltime_in_bwrap_also_kills_processes_that_left_the_group(tmp_path):
    marker = f"{800 + os.getpid() % 97}.{uuid.uuid4().int % 10**6}"
    provider = LocalProvider(isolation="bwrap", kill_grace_s=0.5)
    out = run(provider, tmp_path, ["sh", "-c", f"setsid sleep {marker} & sleep {marker}"], timeout_s=1.0)
    assert out.timed_out
    time.sleep(0.3)
    assert live_processes_with(marker) == []   # the pid namespace took the escaped one with it


def test_background_processes_do_not_outlive_a_normal_exit(provider, tmp_path):
    marker = f"{900 + os.getpid() % 97}.{uuid.uuid4().int % 10**6}"
    out = run(provider, tmp_path, ["sh", "-c", f"sleep {marker} > /dev/null 2>&1 & echo started"], timeout_s=20)
    assert out.rc == 0 and not out.timed_out
    time.sleep(0.2)
    assert live_processes_with(marker) == []


def test_a_process_that_ignores_term_is_killed_after_the_grace(provider, tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    started = time.monotonic()
    out = run(provider, tmp_path, py(code), timeout_s=1.0)
    assert out.timed_out and time.monotonic() - started < 8
    assert out.signal in (signal.SIGKILL, signal.SIGTERM) or out.rc is not None


# --- bubblewrap walls --------------------------------------------------------------------------

@needs_bwrap
def test_bwrap_allows_writes_only_in_write_paths(tmp_path):
    provider = LocalProvider(isolation="bwrap")
    ws = tmp_path / "ws"
    (ws / "task").mkdir(parents=True)
    (ws / "repo.txt").write_text("original")
    outside = tmp_path / "outside.txt"       # under /tmp: lands on the sandbox's private tmpfs
    var_tmp = Path("/var/tmp") / f"sweep-escape-{uuid.uuid4().hex[:8]}"
    code = (f"import pathlib\n"
            f"pathlib.Path({str(ws / 'task' / 'ok.txt')!r}).write_text('in scope')\n"
            f"for target in ({str(ws / 'repo.txt')!r}, {str(outside)!r}, '/etc/sweep-test-escape', {str(var_tmp)!r}):\n"
            f"    try:\n"
            f"        pathlib.Path(target).write_text('escaped')\n"
            f"        print('WROTE', target)\n"
            f"    except OSError as exc:\n"
            f"        print('REFUSED', target, exc.strerror)\n")
    out = run(provider, tmp_path, py(code), cwd=ws, write_paths=(ws / "task",))
    assert out.rc == 0, out.stderr_tail
    assert (ws / "task" / "ok.txt").read_text() == "in scope"
    assert (ws / "repo.txt").read_text() == "original"
    assert not outside.exists() and not Path("/etc/sweep-test-escape").exists() and not var_tmp.exists()
    assert out.stdout_tail.count("REFUSED") == 3 and "Read-only file system" in out.stdout_tail


@needs_bwrap
def test_bwrap_sandbox_root_cannot_remount_the_host_writable(tmp_path):
    provider = LocalProvider(isolation="bwrap")
    target = "/etc/sweep-remount-" + uuid.uuid4().hex[:8]
    out = run(provider, tmp_path, ["sh", "-c", f"mount -o remount,bind,rw / ; touch {target}; echo done"])
    assert not Path(target).exists()
    assert "done" in out.stdout_tail


@needs_bwrap
def test_network_none_has_only_its_own_loopback_and_host_is_the_hosts(tmp_path):
    provider = LocalProvider(isolation="bwrap")
    code = "import socket; print(sorted(name for _, name in socket.if_nameindex()))"
    off = run(provider, tmp_path, py(code), network="none")
    assert off.rc == 0 and off.stdout_tail.strip() == "['lo']" and off.network == "none"
    on = run(provider, tmp_path, py(code), network="host")
    assert on.rc == 0 and on.network == "host"
    assert on.stdout_tail.strip() == str(sorted(n for _, n in __import__("socket").if_nameindex()))


@pytest.fixture
def two_http_servers():
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(f"hello-{self.server.server_port}".encode())

        def log_message(self, *args):
            pass

    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield [s.server_port for s in servers]
    for server in servers:
        server.shutdown()
        server.server_close()


FETCH = ("import sys, urllib.request\n"
         "for url in sys.argv[1:]:\n"
         "    try:\n"
         "        print(url, urllib.request.urlopen(url, timeout=5).read().decode())\n"
         "    except Exception as exc:\n"
         "        print(url, 'FAILED', type(exc).__name__)\n")


@needs_bwrap
def test_network_api_reaches_exactly_the_configured_endpoints(tmp_path, two_http_servers):
    allowed, other = two_http_servers
    provider = LocalProvider(isolation="bwrap")
    urls = [f"http://127.0.0.1:{allowed}/", f"http://localhost:{allowed}/", f"http://127.0.0.1:{other}/",
            "http://fakeapi.test:443/", "http://example.com/"]
    out = run(provider, tmp_path, ["python3", "-c", FETCH, *urls], network="api",
              endpoints=(f"127.0.0.1:{allowed}", f"fakeapi.test:443=127.0.0.1:{other}"))
    assert out.rc == 0, out.stderr_tail
    lines = dict(line.split(" ", 1) for line in out.stdout_tail.strip().splitlines())
    assert lines[urls[0]] == lines[urls[1]] == f"hello-{allowed}"
    assert lines[urls[2]].startswith("FAILED")            # another host port: not configured
    assert lines[urls[3]] == f"hello-{other}"             # a name mapped to a local fake server
    assert lines[urls[4]].startswith("FAILED")            # the world: no route, no DNS
    assert out.network == "api" and out.endpoints == [f"127.0.0.1:{allowed}", f"fakeapi.test:443=127.0.0.1:{other}"]


@needs_bwrap
def test_network_api_program_holds_no_capability(tmp_path, two_http_servers):
    provider = LocalProvider(isolation="bwrap")
    out = run(provider, tmp_path, ["grep", "^Cap", "/proc/self/status"], network="api",
              endpoints=("fakeapi.test:443=127.0.0.1:%d" % two_http_servers[0],))
    caps = dict(line.split(":\t") for line in out.stdout_tail.strip().splitlines())
    assert out.rc == 0 and caps["CapEff"] == caps["CapPrm"] == caps["CapInh"] == caps["CapAmb"] == "0000000000000000"


@pytest.mark.parametrize("bad", ["no-port", "10.0.0.1:443", "a:99999", "bad name:80"])
def test_bad_endpoints_are_config_errors(bad):
    from sweep.providers.local.network import parse_endpoints
    with pytest.raises(ConfigError) as info:
        parse_endpoints([bad])
    assert info.value.field == "endpoints"


@needs_bwrap
def test_sandbox_runs_system_python_and_git_with_a_private_home(tmp_path):
    provider = LocalProvider(isolation="bwrap")
    out = run(provider, tmp_path, ["sh", "-c", "python3 -c 'import sys; print(sys.version_info[0])' && git --version "
                                               "&& echo HOME=$HOME && touch $HOME/x && ls /tmp"])
    assert out.rc == 0, out.stderr_tail
    assert "3\n" in out.stdout_tail and "git version" in out.stdout_tail and "HOME=/tmp/sweep-home" in out.stdout_tail


def test_output_channel_carries_output_without_a_writable_mount(provider, tmp_path):
    host = tmp_path / "session" / "output.json"
    host.parent.mkdir()
    channel = provider.open_output_channel(host)
    try:
        out = run(provider, tmp_path, py(f"open({channel.sandbox_path!r}, 'w').write('{{\"v\": 1}}')"),
                  pass_fds=(channel.fd,))
    finally:
        provider.close_output_channel(channel)
    assert out.rc == 0, out.stderr_tail
    assert host.read_text() == '{"v": 1}'


# --- isolation settings ------------------------------------------------------------------------

def test_isolation_bwrap_required_but_unusable_fails_up_front(monkeypatch):
    monkeypatch.setattr(f"{local_module_name}.probe_bwrap", lambda: (None, "bwrap is not installed"))
    with pytest.raises(ProviderError) as info:
        LocalProvider(isolation="bwrap")
    assert info.value.field == "isolation" and "apt-get install bubblewrap" in info.value.hint


def test_isolation_auto_is_refused_with_the_reason():
    with pytest.raises(ConfigError) as info:
        LocalProvider(isolation="auto")
    assert info.value.field == "isolation" and "removed" in str(info.value)


def test_unknown_isolation_and_provider_are_config_errors():
    with pytest.raises(ConfigError):
        LocalProvider(isolation="docker")
    with pytest.raises(ConfigError):
        get_provider("modal")
    with pytest.raises(ConfigError):
        get_provider("local", flavour="x")
    assert get_provider("local", isolation="none").isolation == "none"


def test_importing_the_runtimes_does_not_import_a_provider_backend():
    import subprocess
    code = ("import sys, sweep.runtimes; bad = [m for m in sys.modules if m.startswith("
            "('sweep.providers.local', 'modal', 'daytona', 'pyslurm'))]; print(bad); assert not bad")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# --- redactor ----------------------------------------------------------------------------------

def test_redactor_catches_a_secret_split_across_chunks():
    secret = "sk-abcdef-123456"
    red = Redactor([secret, "xy"])          # too-short values are not redacted
    data = f"before {secret} middle {secret}after xy".encode()
    out = b""
    for i in range(0, len(data), 3):
        out += red.feed(data[i:i + 3])
    out += red.flush()
    assert out == b"before [REDACTED] middle [REDACTED]after xy"


@pytest.mark.skipif(probe_bwrap()[0] is None, reason="bubblewrap is not usable here")
def test_a_fixed_view_shows_its_directories_at_their_fixed_paths(tmp_path):
    from sweep.providers.local.bwrap import view_path
    view = ((tmp_path / "run-7" / "repo", "/app"), (tmp_path / "run-7" / "logs", "/logs"))
    assert view_path(str(tmp_path / "run-7" / "repo" / "a.py"), view) == "/app/a.py"
    assert view_path(str(tmp_path / "run-7" / "repository"), view) == str(tmp_path / "run-7" / "repository")
    for path, _ in view:
        path.mkdir(parents=True)
    script = "pwd; echo $REPO_DIR $1; ls /; cat /logs/seen; grep -c run-7 /proc/self/mountinfo; echo x > /logs/out"
    (view[1][0] / "seen").write_text("from the host\n")
    r = LocalProvider("bwrap").run(ExecSpec(
        argv=["sh", "-c", script, "sh", str(view[0][0] / "a.py")], cwd=view[0][0], timeout_s=30,
        write_paths=(view[1][0],), read_paths=(view[0][0],), env={"REPO_DIR": str(view[0][0])}, view=view))
    lines = r.stdout_tail.splitlines()
    assert r.rc == 0 and lines[:2] == ["/app", "/app /app/a.py"], r.stdout_tail + r.stderr_tail
    assert "from the host" in lines and str(tmp_path) not in "\n".join(lines[:-1])
    assert (view[1][0] / "out").read_text() == "x\n"          # written at /logs, landed in logs/


def test_a_run_returns_when_its_child_exits_not_at_the_next_poll(provider, tmp_path, monkeypatch):
    """The provider waits on the child's exit (a pidfd), not a fixed nap between checks: with the
    nap made 5 s, a run of `true` still returns at once (it took 50 ms a run at the real 0.05 s,
    twice per reference trial; the walltime, idle and bound checks still run every POLL_S)."""
    from sweep.providers.local import process
    if not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open here: the provider falls back to plain naps")
    monkeypatch.setattr(process, "POLL_S", 5.0)
    t0 = time.monotonic()
    r = run(provider, tmp_path, ["true"])
    took = time.monotonic() - t0
    assert r.rc == 0 and took < 2.5, took
    # and a bound is still checked on time: a child outliving its walltime is stopped
    t0 = time.monotonic()
    r = run(provider, tmp_path, ["sleep", "30"], timeout_s=1.0, kill_grace_s=0.2)
    assert r.timed_out and time.monotonic() - t0 < 12, time.monotonic() - t0
