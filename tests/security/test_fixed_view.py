"""A fixed view (issue 21, item 7): the PR's test code, run by every gate trial in the real sandbox
(local backend, bubblewrap, campaign outside /tmp), checks where it is, its environment, what `/`
and the mount table's mount points hold: the repository at /app (the task container's WORKDIR),
its tests at /tests and logs at /logs, and neither the campaign's path nor the run id, not even in
the command line of the sandbox's pid 1 (bwrap's, which names every bind's source; the mount
table's source column still names a bind's source: docs/security.md). The run
ends verified as the same PR without the probe does, and the exported dataset names no absolute
path of the host (not the campaign, not the plan's repository, not sweep's private copy)."""
from __future__ import annotations

import json

from runstate.models import Outcome
from sweep.harbor.samples import make_verified_pr
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, local_plan, record

RUN_ID = "pr-q7zview"
# the view is the same in every trial (sweep/harbor/trial.py): the gates' trials are enough here
CHEAP = {"quality": {"gate_repeats": 1, "max_mutants": 0, "mutants": "report", "max_probes": 0, "rollouts": 0}}
# The PR's test: what it must not see is handed to it hex-encoded (so the export, which carries the
# test file, holds no host path of its own because of it); a host path in view fails the test, in
# the reference and the empty run alike, and the run would end gates_failed.
PROBE = '''import json, os, unittest

HIDDEN = [bytes.fromhex(h).decode() for h in %r]


def seen():
    mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
    # bwrap is the sandbox's pid 1: its command line (the binds' host paths) must not be readable
    pid1 = open("/proc/1/cmdline", "rb").read().decode(errors="replace")
    return {"cwd": os.getcwd(), "env": dict(os.environ), "root": sorted(os.listdir("/")), "mounts": mounts,
            "pid1": pid1}


class ViewTest(unittest.TestCase):
    def test_a_fixed_view(self):
        view = seen()
        self.assertEqual(view["cwd"], "/app")
        self.assertEqual((os.environ.get("REPO_DIR"), os.environ.get("LOGS_DIR")), ("/app", "/logs"))
        self.assertTrue({"/app", "/tests", "/logs"} <= set(view["mounts"]), view["mounts"])
        self.assertNotIn("var", view["root"])
        text = json.dumps(view)
        for hidden in HIDDEN:
            self.assertNotIn(hidden, text)
            self.assertFalse(os.path.exists(hidden), hidden)
'''


def test_a_trial_sees_a_fixed_view_and_the_export_names_no_host_path(targets):
    root = targets.root / "fixed-view"
    camp = targets.campaign.parent / "fixed-view-campaign"
    hidden = [str(camp), str(targets.root), RUN_ID, str(camp / "runs")]
    probe = PROBE % ([h.encode().hex() for h in hidden],)
    src = make_verified_pr(root / "repos", "mathx", extra_files={"tests/test_view.py": probe})
    sweep("init", str(write_plan(root / "plan.json", local_plan([candidate(RUN_ID, src)], defaults=CHEAP))), "--campaign", str(camp))
    tick_until_done(camp, timeout=300)
    rec = record(camp, RUN_ID)
    assert rec.outcome is Outcome.verified, (rec.reason, rec.last_error)
    gates = json.loads((camp / "runs" / RUN_ID / "evidence" / "gates-r0001.json").read_text())["gates"]
    # the probe ran, and passed, in the reference, the empty and the selected runs
    assert "tests.test_view.ViewTest.test_a_fixed_view" in gates["fail_to_pass"]["pass_to_pass"], gates["fail_to_pass"]
    assert gates["selected"]["ok"] is True
    out = root / "export"
    sweep("export", str(out), "--campaign", str(camp))
    private = camp / "runs" / RUN_ID / "source" / "repo"
    for path in out.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            for host in (str(camp), str(private), str(src["repo"]), str(targets.root)):
                assert host.encode() not in data, (path, host)
    # the bundle the oracle wrote names the PR as the export does, not by sweep's private copy
    bundle_toml = (camp / "runs" / RUN_ID / "task" / "task.toml").read_text()
    assert f'source_repo = "mathx@{src["base"]}..{src["head"]}"' in bundle_toml, bundle_toml
    assert (out / RUN_ID / "task.toml").is_file()
    # the export's metadata names the PR by the plan's repository name and commits, never a path
    (line,) = [json.loads(t) for t in (out / "tasks.jsonl").read_text().splitlines() if t.strip()]
    named = f'mathx@{src["base"]}..{src["head"]}'
    assert (line["source_pr"], line["source_repo"]) == (named, "mathx"), line
