"""Secrets through whole campaigns: real ticks, real controller jobs (local backend), real sessions
and gates in the real sandbox, campaigns outside /tmp.

Each attack is its own test:
- oracle and nop sessions and the gates' PR test code see no secret, in their environment or in
  any file they can read, although the controller holds one (a plan file and the legacy variable);
- a key family taken from an environment variable reaches its role's agent and nothing else;
- an agent that prints its key (plain, base64, split across lines) into its output and fails:
  every stored text is redacted (transcripts, result.json, events, state, report.md);
- an agent that writes its key into task/instruction.md: the run ends blocked: secret_in_bundle
  and the kept bundle is redacted.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from runstate import run_dir
from sweep.harbor.samples import make_verified_pr
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, local_plan, record

REPO = Path(__file__).resolve().parents[1]
FAKES = REPO / "tests" / "fakes"
CANARY = "sk-canary-"

# PR test code that looks for credentials where a gate could find them and prints what it found.
PROBE_TEST = '''import os
import unittest

CANARY = "-".join(["sk", "canary", ""])     # built at run time: neither this file nor its .pyc matches
FAMILIES = ("ANTHROPIC", "OPENAI", "CLAUDE", "CODEX", "GITHUB")


def scan():
    keys = sorted(k for k in os.environ if k.startswith(FAMILIES))
    env_hits = sum(CANARY in v for v in os.environ.values())
    file_hits = []
    roots = {os.getcwd(), os.environ.get("HOME", ""), os.environ.get("TMPDIR", "/tmp"),
             os.environ.get("LOGS_DIR", ""), "/tmp"}
    for root in filter(None, roots):
        for dirpath, _, names in os.walk(root):
            for name in names:
                try:
                    with open(os.path.join(dirpath, name), "rb") as fh:
                        if CANARY.encode() in fh.read(1 << 20):
                            file_hits.append(os.path.join(dirpath, name))
                except OSError:
                    pass
    return keys, env_hits, file_hits


class ProbeTest(unittest.TestCase):
    def test_probe(self):
        keys, env_hits, file_hits = scan()
        print(f"PROBE gate keys={','.join(keys) or '-'} envhits={env_hits} "
              f"filehits={len(file_hits)} {file_hits[:1]}", flush=True)
'''

# A `true` that reports what a nop session could see (nop runs `true` from PATH).
PROBE_TRUE = '''#!/bin/sh
keys=$(env | grep -E '^(ANTHROPIC|OPENAI|CLAUDE|CODEX|GITHUB)' | cut -d= -f1 | tr '\\n' ',')
envhits=$(env | grep -c "sk-canary""-")
filehits=$(grep -rl "sk-canary""-" "$HOME" "$PWD" "${TMPDIR:-/tmp}" 2>/dev/null | wc -l)
echo "PROBE nop keys=${keys:--} envhits=$envhits filehits=$filehits"
exit 0
'''

# An author agent that leaks its key, then (unless told to fail) does the fake author's real job.
LEAKY_AGENT = f'''import base64, json, os, sys
from pathlib import Path
sys.path.insert(0, {str(FAKES)!r})
import agent

leaks = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--leak=")).split(",")
argv = [a for a in sys.argv[1:] if not a.startswith("--leak=")]
key = os.environ.get("ANTHROPIC_API_KEY", "")
print("KEYSHA", __import__("hashlib").sha256(key.encode()).hexdigest(), flush=True)
text = "\\n".join(["plain: " + key,
                   "b64: " + base64.b64encode(b"token=" + key.encode()).decode(),
                   "split:", "\\n".join(key[i:i + 6] for i in range(0, len(key), 6))])
if "stdout" in leaks:
    print(text, flush=True)
if "stderr" in leaks:
    print(text, file=sys.stderr, flush=True)
if "output" in leaks:
    with open(argv[argv.index("--output") + 1], "w") as fh:
        fh.write(json.dumps({{"note": text}}))
if "fail" in leaks:
    sys.exit(1)
rc = agent.main(argv)
if "repo" in leaks:
    (Path(argv[argv.index("--workspace") + 1]) / "repo" / "notes.txt").write_text(text + "\\n")
if "instruction" in leaks:
    with open(Path(argv[argv.index("--workspace") + 1]) / "task" / "instruction.md", "a") as fh:
        fh.write("\\n" + text + "\\n")
sys.exit(rc)
'''


@pytest.fixture
def scratch():
    """Outside /tmp (like a cluster's shared filesystem): a sandbox hiding only /tmp gains nothing."""
    base = REPO / ".scratch"
    base.mkdir(exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="secrets-", dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def new_key() -> str:
    return CANARY + uuid.uuid4().hex + uuid.uuid4().hex[:8]


def key_file(scratch: Path, value: str) -> Path:
    path = scratch / "keys" / "anthropic.key"
    path.parent.mkdir(exist_ok=True)
    path.write_text(value + "\n")
    os.chmod(path, 0o600)
    return path


def leaky_options(scratch: Path, src: dict, leaks: str, role: str = "author") -> dict:
    script = scratch / "leaky_agent.py"
    script.write_text(LEAKY_AGENT)
    options = agent_options(role, "--repo", src["repo"], f"--leak={leaks}")
    options["argv"][1] = str(script)
    options["read_paths"] = [*options.get("read_paths", []), str(FAKES)]   # it imports tests/fakes/agent.py
    return options


def spellings(value: str) -> list[bytes]:
    """What the leaky agent wrote, computed here independently of sweep's redactor."""
    return [value.encode(), base64.b64encode(b"token=" + value.encode()),
            "\n".join(value[i:i + 6] for i in range(0, len(value), 6)).encode(),
            json.dumps("\n".join(value[i:i + 6] for i in range(0, len(value), 6)))[1:-1].encode(),
            value[:20].encode()]


def stored_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def assert_nowhere(root: Path, value: str) -> None:
    for path in stored_files(root):
        data = path.read_bytes()
        for form in spellings(value):
            assert form not in data, f"{path} holds the secret ({form[:12]!r}...)"


def campaign(scratch: Path, src: dict, *, runtimes: dict, secrets: dict, env: dict,
             runtime_options: dict | None = None, **settings) -> Path:
    cand = candidate("pr-0", src, **({"runtime_options": runtime_options} if runtime_options else {}))
    plan = local_plan([cand], defaults={"runtimes": runtimes}, secrets=secrets, **settings)
    d = scratch / "camp"
    sweep("init", str(write_plan(scratch / "plan.json", plan)), "--campaign", str(d), env=env)
    return d


def sessions(d: Path, role: str) -> list[Path]:
    return sorted(p for p in (run_dir(d, "pr-0") / "sessions").iterdir() if p.name.endswith(role))


def test_oracle_nop_sessions_and_gates_see_no_secret(scratch):
    value = new_key()
    bindir = scratch / "bin"
    bindir.mkdir()
    (bindir / "true").write_text(PROBE_TRUE)
    os.chmod(bindir / "true", 0o755)
    src = make_verified_pr(scratch / "repos", "mathx", extra_files={"tests/test_probe.py": PROBE_TEST})
    # the controller holds the key twice: from the plan's file and as the legacy variable
    env = {"ANTHROPIC_API_KEY": value, "PATH": f"{bindir}:{os.environ['PATH']}"}
    d = campaign(scratch, src, runtimes={"author": "oracle", "reviewer": "oracle", "solver": "nop"},
                 secrets={"anthropic": {"file": str(key_file(scratch, value))}}, env=env)
    tick_until_done(d, env=env, timeout=420)
    rec = record(d, "pr-0")
    assert rec.outcome.value == "verified", (rec.reason, rec.last_error)

    gates = json.loads((run_dir(d, "pr-0") / "evidence" / "gates-r0001.json").read_text())
    reference = gates["gates"]["reference"]["detail"]
    assert "PROBE gate keys=- envhits=0 filehits=0 []" in reference, reference      # the probe ran, found nothing

    nop = sessions(d, "solver")
    assert nop
    transcript = (nop[0] / "stdout.txt").read_text()
    assert "PROBE nop keys=- envhits=0 filehits=0" in transcript, transcript

    for session in sessions(d, "author") + sessions(d, "reviewer") + nop:
        argv = json.loads((session / "argv.json").read_text())
        result = json.loads((session / "result.json").read_text())
        assert argv["env_passthrough"] == [] and argv["secrets"] == [], session
        assert not [n for n in result["env_names"] if n.startswith(("ANTHROPIC", "OPENAI", "CLAUDE"))], session
    assert_nowhere(d, value)


def test_an_env_var_family_reaches_its_agent_and_is_stored_nowhere(scratch):
    value = new_key()
    src = make_verified_pr(scratch / "repos", "mathx")
    env = {"SWEEP_TEST_ANTHROPIC": value}
    d = campaign(scratch, src, runtimes={"author": "command", "reviewer": "oracle", "solver": "nop"},
                 secrets={"anthropic": {"env": "SWEEP_TEST_ANTHROPIC"}}, env=env,
                 runtime_options={"author": leaky_options(scratch, src, "none")})
    assert "SWEEP_TEST_ANTHROPIC" in (d / "campaign.toml").read_text()
    tick_until_done(d, env=env, timeout=420)
    rec = record(d, "pr-0")
    assert rec.outcome.value == "verified", (rec.reason, rec.last_error)
    author = sessions(d, "author")[0]
    assert f"KEYSHA {hashlib.sha256(value.encode()).hexdigest()}" in (author / "stdout.txt").read_text()
    assert json.loads((author / "argv.json").read_text())["secrets"] == ["ANTHROPIC_API_KEY"]
    for session in sessions(d, "reviewer") + sessions(d, "solver"):
        assert "ANTHROPIC_API_KEY" not in json.loads((session / "result.json").read_text())["env_names"]
    assert_nowhere(d, value)


def test_an_env_var_family_that_is_not_set_parks_the_role_with_a_config_reason(scratch):
    src = make_verified_pr(scratch / "repos", "mathx")
    d = campaign(scratch, src, runtimes={"author": "command", "reviewer": "oracle", "solver": "nop"},
                 secrets={"anthropic": {"env": "SWEEP_TEST_UNSET_KEY"}}, env={},
                 runtime_options={"author": leaky_options(scratch, src, "none")})
    sweep("tick", "--campaign", str(d), env={})
    from tests.fakes.runs import wait_until
    wait_until("the run to park", lambda: record(d, "pr-0").parked_until, 300)
    assert "secrets.anthropic.env" in record(d, "pr-0").last_error
    assert "SWEEP_TEST_UNSET_KEY" in record(d, "pr-0").last_error


def test_a_secret_file_made_readable_after_init_parks_the_role_naming_field_and_file(scratch):
    value = new_key()
    src = make_verified_pr(scratch / "repos", "mathx")
    path = key_file(scratch, value)
    d = campaign(scratch, src, runtimes={"author": "command", "reviewer": "oracle", "solver": "nop"},
                 secrets={"anthropic": {"file": str(path)}}, env={},
                 runtime_options={"author": leaky_options(scratch, src, "none")})
    os.chmod(path, 0o644)
    sweep("tick", "--campaign", str(d), env={})
    from tests.fakes.runs import wait_until
    wait_until("the run to park", lambda: record(d, "pr-0").parked_until, 300)
    err = record(d, "pr-0").last_error
    assert "secrets.anthropic.file" in err and str(path) in err and "0644" in err
    assert not sessions(d, "author")[0].joinpath("stdout.txt").exists()     # nothing ran


def test_an_agent_printing_its_key_in_every_spelling_is_redacted_everywhere(scratch):
    value = new_key()
    src = make_verified_pr(scratch / "repos", "mathx")
    d = campaign(scratch, src, runtimes={"author": "command", "reviewer": "oracle", "solver": "nop"},
                 secrets={"anthropic": {"file": str(key_file(scratch, value))}}, env={}, max_attempts=1,
                 runtime_options={"author": leaky_options(scratch, src, "stdout,stderr,output,fail")})
    tick_until_done(d, env={}, timeout=420)
    rec = record(d, "pr-0")
    assert (rec.outcome.value, rec.reason) == ("blocked", "max_attempted")
    author = sessions(d, "author")[0]
    stderr = (author / "stderr.txt").read_text()
    assert stderr.count("[REDACTED]") >= 3, stderr          # the agent did leak, in three spellings
    assert "[REDACTED]" in (author / "stdout.txt").read_text()
    assert "[REDACTED]" in (run_dir(d, "pr-0") / "events.jsonl").read_text()
    assert (run_dir(d, "pr-0") / "report.md").exists()
    assert_nowhere(d, value)
    shown = sweep("show", "pr-0", "--campaign", str(d)).stdout
    assert value not in shown and value[:20] not in shown


def test_a_key_written_into_the_bundle_blocks_the_run_secret_in_bundle(scratch):
    value = new_key()
    src = make_verified_pr(scratch / "repos", "mathx")
    d = campaign(scratch, src, runtimes={"author": "command", "reviewer": "oracle", "solver": "nop"},
                 secrets={"anthropic": {"file": str(key_file(scratch, value))}}, env={},
                 runtime_options={"author": leaky_options(scratch, src, "stdout,instruction")})
    tick_until_done(d, env={}, timeout=420)
    rec = record(d, "pr-0")
    assert (rec.outcome.value, rec.reason) == ("blocked", "secret_in_bundle"), rec.last_error
    instruction = (run_dir(d, "pr-0") / "task" / "instruction.md").read_text()
    assert instruction.count("[REDACTED]") >= 3          # plain, base64 and split: all redacted in place
    scan = json.loads((run_dir(d, "pr-0") / "evidence" / "secret-scan-r0001.json").read_text())
    assert scan["files"] == ["instruction.md"]
    assert not (run_dir(d, "pr-0") / "evidence" / "gates-r0001.json").exists()     # no gate ran on it
    assert_nowhere(d, value)
    assert "secret_in_bundle" in sweep("show", "pr-0", "--campaign", str(d)).stdout


def test_a_solver_writing_its_key_into_its_repository_leaves_it_redacted_in_the_run(scratch):
    value = new_key()
    src = make_verified_pr(scratch / "repos", "mathx")
    d = campaign(scratch, src, runtimes={"author": "oracle", "reviewer": "oracle", "solver": "command"},
                 secrets={"anthropic": {"file": str(key_file(scratch, value))}}, env={},
                 runtime_options={"solver": leaky_options(scratch, src, "repo", role="solver")})
    tick_until_done(d, env={}, timeout=420)
    rec = record(d, "pr-0")
    assert rec.outcome.value == "verified", (rec.reason, rec.last_error)
    notes = list((run_dir(d, "pr-0") / "work").rglob("notes.txt"))
    assert notes and all("[REDACTED]" in p.read_text() for p in notes)     # the solver did write it
    assert_nowhere(d, value)
