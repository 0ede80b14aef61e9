"""`sweep show RUN`'s session lines: argv.json and result.json read through their models
(SessionLaunch, SessionRecord); a killed session, an older file and a malformed one each said so."""
from __future__ import annotations

import json

from runstate import run_dir
from tests.campaigns import payload_plan, sweep, write_plan


def test_session_lines_from_the_session_records(tmp_path):
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", payload_plan(1))), "--campaign", str(d))
    sessions = run_dir(d, "pr-000") / "sessions"
    launch = {"role": "author", "runtime": "claude-code", "manifest_sha256": "m" * 64, "argv": ["claude"],
              "isolation": "bwrap", "network": "api", "endpoints": ["api.anthropic.com:443"]}
    done = sessions / "0001-author"
    done.mkdir(parents=True)
    (done / "argv.json").write_text(json.dumps(launch))
    (done / "result.json").write_text(json.dumps({**launch, "status": "ok", "cost_usd": 0.5, "turns": 3}))
    killed = sessions / "0002-reviewer"          # killed before it ended: only argv.json
    killed.mkdir()
    (killed / "argv.json").write_text(json.dumps({**launch, "role": "reviewer", "runtime": "codex",
                                                  "isolation": "none", "network": "host", "endpoints": []}))
    old = sessions / "0003-solver"               # an older sweep: network as a bool, no endpoints
    old.mkdir()
    (old / "result.json").write_text(json.dumps({"role": "solver", "runtime": "oracle", "status": "failed",
                                                 "isolation": "bwrap", "network": False}))
    bad = sessions / "0004-author"
    bad.mkdir()
    (bad / "argv.json").write_text(json.dumps(launch))
    (bad / "result.json").write_text(json.dumps({"status": ["ok"]}))
    remote = sessions / "0005-solver"            # on a remote provider: the allow list it was given
    remote.mkdir()
    (remote / "result.json").write_text(json.dumps({"role": "solver", "runtime": "command", "status": "ok",
                                                    "isolation": "container", "network": "api",
                                                    "endpoints": ["api.example.com:443"],
                                                    "network_allow": ["203.0.113.7/32", "203.0.113.8/32"]}))
    out = sweep("show", "pr-000", "--campaign", str(d)).stdout
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  000")}
    assert lines["0001-author"].split()[1:3] == ["claude-code", "ok"], out
    assert "isolation bwrap  network api (api.anthropic.com:443)" in lines["0001-author"]
    assert lines["0002-reviewer"].split()[1:3] == ["codex", "running?"]
    assert "UNSANDBOXED" in lines["0002-reviewer"] and "HOST NETWORK" in lines["0002-reviewer"]
    assert lines["0003-solver"].split()[1:3] == ["oracle", "failed"] and "network ?" in lines["0003-solver"]
    assert "result.json unreadable" in lines["0004-author"] and "status" in lines["0004-author"], out
    assert lines["0004-author"].split()[1:3] == ["claude-code", "running?"]
    assert ("isolation container  network api (api.example.com:443, allow 203.0.113.7/32 203.0.113.8/32)"
            in lines["0005-solver"]), out
