"""An evaluation over a Harbor dataset made by hand (not by sweep's export): three tasks in Harbor's
own conventions (task.toml, instruction.md, environment/, tests/test.sh writing
/logs/verifier/reward.txt, solution/solve.sh), two command arms (one that knows every fix, one that
changes nothing) x 3 repeats on the local backend; the rewards and the report against a hand
computation; the Harbor job the cells are also written as, opened with Harbor 0.26.0's own models
and viewer (tests/harbor_job_check.py, in the Harbor venv as tests/test_export_harbor.py runs it)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tests.campaigns import sweep
from tests.test_export_harbor import HARBOR_VERSION, REPO, harbor  # noqa: F401  (the fixture)

CHECK = REPO / "tests" / "harbor_job_check.py"

# task id -> (starting files, instruction, the verifier's check run from /app)
TASKS = {
    "add-numbers": ({"calc.py": "def add(a, b):\n    return a - b\n"},
                    "add() in calc.py subtracts; make it return the sum.",
                    'python3 -c "import calc; assert calc.add(2, 3) == 5"'),
    "greet-name": ({"greet.py": "def greet(name):\n    return 'Hello ' + name\n"},
                   "greet('Ada') must return 'Hello, Ada!'.",
                   "python3 -c \"import greet; assert greet.greet('Ada') == 'Hello, Ada!'\""),
    "write-version": ({"README.md": "# tool\n"}, "Write a file VERSION holding the line 1.2.3.",
                      '[ "$(cat VERSION)" = "1.2.3" ]'),
}

SOLVER = """import pathlib, sys
repo = pathlib.Path(sys.argv[1]) / "repo"
if (repo / "calc.py").exists():
    (repo / "calc.py").write_text("def add(a, b):\\n    return a + b\\n")
elif (repo / "greet.py").exists():
    (repo / "greet.py").write_text("def greet(name):\\n    return 'Hello, ' + name + '!'\\n")
else:
    (repo / "VERSION").write_text("1.2.3\\n")
"""


def make_dataset(root: Path) -> Path:
    """Three Harbor tasks written file by file, the way a person writes one from Harbor's template."""
    for task, (files, instruction, check) in TASKS.items():
        t = root / task
        for rel, text in files.items():
            (t / "environment" / "repo" / rel).parent.mkdir(parents=True, exist_ok=True)
            (t / "environment" / "repo" / rel).write_text(text)
        (t / "environment" / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\nCOPY repo/ /app/\n")
        (t / "task.toml").write_text('schema_version = "1.4"\n\n[metadata]\ndifficulty = "easy"\n\n'
                                     "[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 60.0\n\n"
                                     "[environment]\nbuild_timeout_sec = 600.0\n")
        (t / "instruction.md").write_text(instruction + "\n")
        (t / "tests").mkdir()
        (t / "tests" / "test.sh").write_text(f"#!/bin/bash\nif {check}; then\n  echo 1 > /logs/verifier/reward.txt\n"
                                             "else\n  echo 'check failed'\n  echo 0 > /logs/verifier/reward.txt\nfi\n")
        (t / "solution").mkdir()
        (t / "solution" / "solve.sh").write_text("#!/bin/bash\n# the reference fix is the oracle arm's\n")
    return root


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval3")
    make_dataset(root / "ds3")
    (root / "solve3.py").write_text(SOLVER)
    (root / "eval.toml").write_text(f"""
name = "three-tasks"
dataset = "ds3"
repeats = 3
seed = 11

[[arms]]
name = "oracle"
runtime = "command"
runtime_options = {{ argv = ["{sys.executable}", "{root / 'solve3.py'}", "{{workspace}}"], network = "none" }}
budget = {{ wall_s = 120 }}

[[arms]]
name = "nop"
runtime = "command"
runtime_options = {{ argv = ["true"], network = "none" }}
""")
    camp = root / "camp"
    assert "18 cells (3 tasks x 2 arms x 3 repeats)" in sweep("eval", "init", str(root / "eval.toml"),
                                                              "--campaign", str(camp)).stdout
    assert "ran 18 cells" in sweep("eval", "run", "--campaign", str(camp), timeout=600).stdout
    return {"root": root, "camp": camp, "manifest": json.loads((camp / "manifest.json").read_text())}


def _results(evaluation) -> list[dict]:
    camp = evaluation["camp"]
    return [json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text())
            for c in evaluation["manifest"]["cells"]]


def test_rewards_are_exactly_what_the_arms_imply(evaluation):
    results = _results(evaluation)
    assert len(results) == 18
    assert [(r["task_id"], r["arm"], r["reward"]) for r in results] == \
        [(c["task_id"], c["arm"], 1.0 if c["arm"] == "oracle" else 0.0) for c in evaluation["manifest"]["cells"]]
    # the task's own test.sh decided: its reward file, not sweep's harness
    assert all(r["detail"].startswith("reward 1") for r in results if r["arm"] == "oracle")
    assert all(r["detail"].startswith("reward 0") for r in results if r["arm"] == "nop")


def test_report_matches_a_hand_computation(evaluation):
    report = json.loads(sweep("eval", "report", "--campaign", str(evaluation["camp"]), "--json").stdout)
    arms = {a["arm"]: a for a in report["arms"]}
    z2 = 1.959963984540054 ** 2
    # oracle 9/9: Wilson low = n / (n + z^2) = 9 / 12.8415 = .70085; nop 0/9: high = z^2 / (9 + z^2) = .29915
    assert (arms["oracle"]["cells"], arms["oracle"]["solved"]) == (9, 9)
    assert arms["oracle"]["ci95"] == [pytest.approx(9 / (9 + z2)), 1.0] and arms["oracle"]["ci95"][0] == \
        pytest.approx(0.70085, abs=1e-5)
    assert arms["nop"]["ci95"] == [0.0, pytest.approx(z2 / (9 + z2))]
    assert arms["oracle"]["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert arms["nop"]["pass_at_k"] == {"1": 0.0, "2": 0.0, "3": 0.0}
    (paired,) = report["paired"]
    # 3 discordant tasks, all the oracle's: p = 2 * (1/2)^3 = .25; effect (3 - 0) / 3 = 1
    assert (paired["first"], paired["tasks"], paired["first_only"], paired["second_only"]) == ("oracle", 3, 3, 0)
    assert paired["p_value"] == pytest.approx(0.25) and paired["effect"] == 1.0
    assert report["solved_by"] == {t: ["oracle"] for t in sorted(TASKS)}


def test_every_cell_is_a_harbor_trial(evaluation):
    job = evaluation["camp"] / "jobs" / "three-tasks"
    for cell in evaluation["manifest"]["cells"]:
        trial = job / f"{cell['task_id']}__{cell['cell_id']}"
        doc = json.loads((trial / "result.json").read_text())
        reward = 1.0 if cell["arm"] == "oracle" else 0.0
        assert doc["verifier_result"] == {"rewards": {"reward": reward}} and doc["agent_info"]["name"] == cell["arm"]
        assert doc["task_checksum"] == cell["digest"] and (trial / "verifier" / "reward.txt").read_text() == f"{reward}\n"
    result = json.loads((job / "result.json").read_text())
    assert result["finished_at"] is not None and result["stats"]["n_completed_trials"] == 18


def test_a_trial_file_lost_to_a_kill_is_written_again(evaluation):
    """A runner killed after a cell's result.json but before its Harbor trial: the next run writes it."""
    job = evaluation["camp"] / "jobs" / "three-tasks"
    cell = evaluation["manifest"]["cells"][4]
    trial = job / f"{cell['task_id']}__{cell['cell_id']}"
    before = (trial / "result.json").read_bytes()
    shutil.rmtree(trial)
    assert "ran 0 cells (18 had ended before)" in sweep("eval", "run", "--campaign", str(evaluation["camp"])).stdout
    assert (trial / "result.json").read_bytes() == before


def test_harbor_opens_the_job(harbor, evaluation):  # noqa: F811
    camp = evaluation["camp"]
    r = subprocess.run([str(harbor / "python"), str(CHECK), str(camp / "jobs"), str(evaluation["root"] / "ds3")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    # Harbor's dataset loader takes the hand-made dataset: three tasks, no warning
    assert sorted(doc["dataset"]) == sorted(TASKS) and all(not t["warnings"] for t in doc["dataset"].values())
    job = doc["jobs"]["three-tasks"]
    assert job["agents"] == [["oracle", None], ["nop", None]] and job["n_attempts"] == 3 and job["finished"]
    assert len(job["trials"]) == 18 and job["n_total_trials"] == 18
    for trial in job["trials"].values():
        assert trial["reward_valid"] and trial["exception"] is None and trial["source"] == "ds3"
        assert trial["rewards"] == {"reward": 1.0 if trial["agent"] == "oracle" else 0.0}
        assert trial["seconds"] > 0 and trial["agent_seconds"] > 0 and trial["cost_usd"] is None
    # the stats the job's result.json holds are the ones Harbor computes from its trials
    ours, theirs = job["stats"], job["recomputed"]
    for key in ("n_completed_trials", "n_errored_trials", "n_pending_trials", "cost_usd"):
        assert ours[key] == theirs[key], key
    assert set(ours["evals"]) == set(theirs["evals"]) == {"oracle__ds3", "nop__ds3"}
    def by_value(stats: dict) -> dict:        # the trials of each reward value, in any order
        return {k: {v: sorted(names) for v, names in d.items()} for k, d in stats.items()}
    for key, mine in ours["evals"].items():
        assert (mine["n_trials"], mine["n_errors"], by_value(mine["reward_stats"])) == \
            (theirs["evals"][key]["n_trials"], theirs["evals"][key]["n_errors"],
             by_value(theirs["evals"][key]["reward_stats"]))
        for k, v in job["harbor_pass_at_k"][key].items():        # Harbor's k (2 for three repeats) among ours
            assert mine["pass_at_k"][k] == pytest.approx(v)
    assert job["harbor_pass_at_k"]["oracle__ds3"] == {"2": 1.0}
    # Harbor's viewer (the `harbor view` app) lists the job and serves every trial
    viewer = doc["viewer"]
    assert viewer["jobs"]["status"] == 200 and [j["name"] for j in viewer["jobs"]["body"]["items"]] == ["three-tasks"]
    seen = viewer["three-tasks"]
    assert (seen["job"], seen["trials"], seen["n_total_trials"]) == (200, 200, 18) and len(seen["trial"]) == 18
    assert all(t["status"] == 200 and t["rewards"] in ({"reward": 1.0}, {"reward": 0.0}) for t in seen["trial"].values())


def _table(page: str, cls: str) -> list[list[str]]:
    """The cells of <table class=cls>, row by row (the page's own markup, as written)."""
    import re
    body = page[page.index(f'<table class="{cls}">'):]
    body = body[:body.index("</table>")]
    return [re.findall(r"<t[dh]>(.*?)</t[dh]>", row) for row in body.split("<tr>")[1:]]


def test_the_html_report_holds_the_figures(evaluation, tmp_path):
    out = tmp_path / "eval.html"
    r = sweep("eval", "report", "--campaign", str(evaluation["camp"]), "--html", str(out))
    assert f"wrote {out}" in r.stdout and "oracle vs nop" in r.stdout
    page = out.read_text()
    assert "<script" not in page.lower() and "default-src 'none'" in page
    arms = _table(page, "arms")
    assert arms[0] == ["arm", "cells", "solved", "pass rate", "95% CI (Wilson)", "pass@1", "pass@2", "pass@3",
                       "USD per solved", "median s"]
    assert arms[1][:8] == ["oracle", "9", "9", "1.00", "[0.70, 1.00]", "1.00", "1.00", "1.00"]
    assert arms[2][:8] == ["nop", "9", "0", "0.00", "[0.00, 0.30]", "0.00", "0.00", "0.00"]
    assert arms[1][8] == "-"                                  # no cost reported: unknown, not $0
    assert _table(page, "paired")[1] == ["oracle", "nop", "3", "0", "3", "0", "0", "+1.00", "0.25"]
    assert _table(page, "tasks")[1:] == [[t, "3/3", "0/3", "oracle"] for t in sorted(TASKS)]
    plot = page[page.index('data-plot="arm_rates"'):]
    assert plot[:plot.index("</svg>")].count('class="datum"') == 2


def test_the_html_report_escapes_task_ids(tmp_path):
    """A dataset's directory names are untrusted text: the page shows them escaped, never as markup."""
    hostile = "<img src=x onerror=alert(1)>&amp;\"q\"<script>t='pwned'"      # no '/': a directory name
    make_dataset(tmp_path / "ds")
    (tmp_path / "ds" / "add-numbers").rename(tmp_path / "ds" / hostile)
    for other in ("greet-name", "write-version"):
        shutil.rmtree(tmp_path / "ds" / other)
    (tmp_path / "eval.toml").write_text('name = "hostile"\ndataset = "ds"\nseed = 1\n\n[[arms]]\nname = "nop"\n'
                                        'runtime = "command"\nruntime_options = { argv = ["true"], network = "none" }\n')
    camp = tmp_path / "camp"
    sweep("eval", "init", str(tmp_path / "eval.toml"), "--campaign", str(camp))
    sweep("eval", "run", "--campaign", str(camp), timeout=120)
    out = tmp_path / "eval.html"
    sweep("eval", "report", "--campaign", str(camp), "--html", str(out))
    page = out.read_text()
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;img src=x onerror=alert(1)&gt;&amp;amp;&quot;q&quot;&lt;script&gt;" in page
    assert _table(page, "tasks")[1][1:] == ["0/1", "-"]
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser:        # what a browser makes of it: the task id is text in its cell, no element of its own
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", out.as_uri()],
                             capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert "<img" not in dom.stdout and "<script" not in dom.stdout.lower()
        assert "&lt;img src=x onerror=alert(1)&gt;" in dom.stdout


LEARNER = """import pathlib, sys
repo, prompt = pathlib.Path(sys.argv[1]) / "repo", pathlib.Path(sys.argv[2]).read_text()
told = "## Verifier feedback" in prompt and "check failed" in prompt
fixes = {"calc.py": ("return a * b", "return a + b"), "greet.py": ("'Hello ' + name", "'Hello, ' + name + '!'")}
for name, (wrong, right) in fixes.items():
    if (repo / name).exists():
        text = (repo / name).read_text()
        if told and wrong not in text:
            sys.exit(4)          # a feedback session works on the repository the last one left
        start = text.replace("return a - b", wrong).replace("'Hello ' + name", wrong)
        (repo / name).write_text(start.replace(wrong, right) if told else start)
        break
else:
    (repo / "VERSION").write_text("1.2.3\\n" if told else "1.2\\n")
"""


def test_gate_feedback_cycles_run_and_are_recorded(tmp_path):
    """gate_feedback = N: the verifier's failures go to a new session on the same workspace, up to N
    times, stopping at a pass; the final verifier run alone decides the reward."""
    make_dataset(tmp_path / "ds")
    (tmp_path / "learn.py").write_text(LEARNER)
    argv = json.dumps([sys.executable, str(tmp_path / "learn.py"), "{workspace}", "{prompt_file}"])
    (tmp_path / "eval.toml").write_text(f"""name = "feedback"
dataset = "ds"
seed = 3

[[arms]]
name = "learner"
runtime = "command"
runtime_options = {{ argv = {argv}, network = "none" }}
gate_feedback = 2

[[arms]]
name = "blind"
runtime = "command"
runtime_options = {{ argv = {argv}, network = "none" }}

[[arms]]
name = "stubborn"
runtime = "command"
runtime_options = {{ argv = ["true"], network = "none" }}
gate_feedback = 2
""")
    camp = tmp_path / "camp"
    sweep("eval", "init", str(tmp_path / "eval.toml"), "--campaign", str(camp))
    sweep("eval", "run", "--campaign", str(camp), timeout=300)
    cells = json.loads((camp / "manifest.json").read_text())["cells"]
    for c in cells:
        r = json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text())
        sessions = sorted(p.name for p in (camp / "cells" / c["cell_id"] / "sessions").iterdir())
        cycles = [(f["cycle"], f["reward"], f["fed_back"]) for f in r["feedback"]]
        if c["arm"] == "learner":      # wrong first, told by the verifier, right after one cycle
            assert (r["reward"], r["sessions"], sessions) == (1.0, 2, ["0001-solver", "0002-feedback"]), r
            assert cycles == [(1, 0.0, True), (2, 1.0, False)]
            told = (camp / "cells" / c["cell_id"] / "sessions" / "0002-feedback" / "prompt.md").read_text()
            assert "## Verifier feedback (cycle 1)" in told and "check failed" in told
            assert told.startswith((tmp_path / "ds" / c["task_id"] / "instruction.md").read_text())
            # the command runtime cannot resume: the cycle started a new session, and says so
            assert r["feedback"][0]["resumed"] is False and "cannot resume" in r["feedback"][0]["not_resumed"]
        elif c["arm"] == "blind":      # the same solver without feedback keeps its wrong first attempt
            assert (r["reward"], r["sessions"], r["feedback"], sessions) == (0.0, 1, [], ["0001-solver"])
        else:                          # up to N cycles, then the final run
            assert (r["reward"], r["sessions"]) == (0.0, 3) and cycles == [(1, 0.0, True), (2, 0.0, True)]
        trial = json.loads((camp / "jobs" / "feedback" / f"{c['task_id']}__{c['cell_id']}" / "result.json").read_text())
        assert trial["agent_result"]["metadata"]["gate_feedback"] == r["feedback"]
        if r["sessions"] > 1:           # Harbor's agent phase ends with the last feedback session
            last = r["feedback"][-1] if "session_s" in r["feedback"][-1] else r["feedback"][-2]
            end = datetime.fromisoformat(trial["agent_execution"]["finished_at"]).timestamp()
            assert end == pytest.approx(last["session_started_at"] + last["session_s"], abs=1e-3)
    report = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json").stdout)
    assert {a["arm"]: a["solved"] for a in report["arms"]} == {"learner": 3, "blind": 0, "stubborn": 0}
