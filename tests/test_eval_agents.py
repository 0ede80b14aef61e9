"""Evaluation arms played by the REAL agent CLIs against fake model servers (claude: the fake
Anthropic server; codex: the fake Responses API): an arm's key comes from the plan's [secrets] (a
0600 file named by path, or a variable of the runner's environment), its spend is bounded by its
budget.max_usd (handed to the CLI and to the wire relay, which meters every response), and each
cell records the cost the relay metered. The dataset is one task of the hand-made Harbor dataset of
tests/test_eval_harbor.py (add-numbers: calc.add subtracts)."""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from tests.agent_sessions import FAKE_KEY, needs_claude
from tests.campaigns import sweep, tick_until_done
from tests.fakes.anthropic_api import FakeAnthropic, Script, text, tool_calls
from tests.fakes.sse_server import key_digest
from tests.test_eval_harbor import CHECK, make_dataset
from tests.test_export_harbor import harbor  # noqa: F401  (the fixture)

FIXED = "def add(a, b):\n    return a + b\n"


def fixing_solver() -> Script:
    """Reads repo/calc.py (claude's Write refuses a file the session has not read), writes the fix."""
    def step(request: dict, n: int) -> dict:
        path = f"{request['cwd']}/repo/calc.py"
        if n == 0:
            return tool_calls([("Read", {"file_path": path})])
        if n == 1:
            return tool_calls([("Write", {"file_path": path, "content": FIXED})])
        return text("Fixed.")
    return Script(dynamic=step)


def one_task_dataset(root: Path) -> Path:
    make_dataset(root / "all")
    shutil.copytree(root / "all" / "add-numbers", root / "ds" / "add-numbers")
    return root / "ds"


def write_plan(root: Path, fake: FakeAnthropic, *, repeats: int, max_usd: float | None,
               secrets: bool = True, name: str = "claude-eval") -> Path:
    budget = f"budget = {{ wall_s = 300, max_usd = {max_usd} }}" if max_usd is not None else ""
    plan = root / f"{name}.toml"
    plan.write_text(f"""
name = "{name}"
dataset = "ds"
repeats = {repeats}
seed = 3
""" + ("""
[secrets]
anthropic = { file = "keys/anthropic.key" }
""" if secrets else "") + f"""
[[arms]]
name = "claude"
runtime = "claude-code"
model = "claude-sonnet-4-5"
runtime_options = {{ base_url = "{fake.url('solver')}", max_retries = 0, stall_s = 60 }}
{budget}
""")
    return plan


@pytest.fixture
def root(tmp_path):
    one_task_dataset(tmp_path)
    key = tmp_path / "keys" / "anthropic.key"
    key.parent.mkdir()
    key.write_text(FAKE_KEY + "\n")
    key.chmod(0o600)
    return tmp_path


@pytest.fixture
def fake():
    server = FakeAnthropic()
    yield server
    server.close()


def _no_key_in(camp: Path) -> None:
    for path in camp.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path


@needs_claude
def test_a_claude_arm_solves_every_cell_and_records_the_metered_cost(root, fake, monkeypatch, harbor):  # noqa: F811
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)     # the key comes from the plan's file, nowhere else
    fake.script("solver", fixing_solver())
    camp = root / "camp"
    out = sweep("eval", "init", str(write_plan(root, fake, repeats=2, max_usd=2.0)), "--campaign", str(camp)).stdout
    assert "2 cells (1 tasks x 1 arms x 2 repeats)" in out
    assert "ran 2 cells" in sweep("eval", "run", "--campaign", str(camp), timeout=600).stdout
    frozen = json.loads((camp / "eval.json").read_text())
    # the secret is frozen as its resolved path, never its value
    assert frozen["plan"]["secrets"] == {"anthropic": {"file": str(root / "keys" / "anthropic.key"),
                                                       "env": None, "variable": None}}
    cells = json.loads((camp / "manifest.json").read_text())["cells"]
    for cell in cells:
        result = json.loads((camp / "cells" / cell["cell_id"] / "result.json").read_text())
        assert (result["reward"], result["solved"], result["session_status"]) == (1.0, True, "ok"), result
        assert result["runtime"] == "claude-code" and result["cli_version"] == "2.1.197"
        assert result["model"] == result["model_reported"] == "claude-sonnet-4-5"
        # three main responses of 2000 input + 300 output tokens each, as the CLI's stream counted them
        assert (result["tokens"]["input_tokens"], result["tokens"]["output_tokens"]) == (6000, 900)
        session = json.loads((camp / "cells" / cell["cell_id"] / "sessions" / "0001-solver" / "result.json")
                             .read_text())
        wire = session["wire"]
        assert wire["complete"] and wire["metered_cost_usd"] > 0
        # the cell's cost is what the relay metered on the wire, and the limit it was given is the arm's
        assert result["cost_usd"] == result["metered_cost_usd"] == pytest.approx(wire["metered_cost_usd"])
        assert wire["limit_usd"] == 2.0
        assert json.loads((camp / "cells" / cell["cell_id"] / "sessions" / "0001-solver" / "argv.json")
                          .read_text())["argv"].count("--max-budget-usd") == 1
        # its Harbor trial carries the same cost and the CLI's provenance
        trial = json.loads((camp / "jobs" / "claude-eval" / f"add-numbers__{cell['cell_id']}" / "result.json")
                           .read_text())
        assert trial["agent_result"]["cost_usd"] == result["cost_usd"]
        meta = trial["agent_result"]["metadata"]
        assert (meta["cli_version"], meta["model_reported"], meta["metered_cost_usd"]) == \
            ("2.1.197", "claude-sonnet-4-5", result["metered_cost_usd"])
        assert (trial["agent_result"]["n_input_tokens"], trial["agent_result"]["n_cache_tokens"],
                trial["agent_result"]["n_output_tokens"]) == (6000, 0, 900)
    # the fake model saw the plan's key (through the relay) on every main request
    main = fake.main_requests("solver")
    assert len(main) >= 6 and {r["api_key_sha256"] for r in main} == {key_digest(FAKE_KEY)}
    report = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json").stdout)
    arm = report["arms"][0]
    assert (arm["arm"], arm["cells"], arm["solved"]) == ("claude", 2, 2)
    assert arm["cost_per_solved_usd"] == pytest.approx(sum(
        json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text())["cost_usd"] for c in cells) / 2)
    _no_key_in(camp)
    # Harbor's own models read the trials: their cost and tokens as Harbor totals them
    r = subprocess.run([str(harbor / "python"), str(CHECK), str(camp / "jobs")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    trials = json.loads(r.stdout)["jobs"]["claude-eval"]["trials"].values()
    assert sorted((t["cost_usd"], tuple(t["tokens"]), t["rewards"]["reward"]) for t in trials) == sorted(
        (json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text())["cost_usd"], (6000, 0, 900), 1.0)
        for c in cells)


@needs_claude
def test_the_arms_max_usd_stops_the_session(root, fake, monkeypatch):
    """Each main response bills 2000 input + 300 output tokens (0.0105 USD at the default price):
    with max_usd = 0.005 the CLI's own cap (--max-budget-usd, checked after a turn) stops it after the
    first (the relay, given the same limit, would refuse the next request), the session ends
    max_budget, the cell scores 0 and records the one response the relay metered."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    fake.script("solver", fixing_solver())
    camp = root / "tight"
    sweep("eval", "init", str(write_plan(root, fake, repeats=1, max_usd=0.005, name="tight")), "--campaign", str(camp))
    sweep("eval", "run", "--campaign", str(camp), timeout=600)
    result = json.loads((camp / "cells" / "c00000" / "result.json").read_text())
    assert (result["reward"], result["session_status"]) == (0.0, "failed"), result
    assert "max_budget" in result["detail"]
    session = json.loads((camp / "cells" / "c00000" / "sessions" / "0001-solver" / "result.json").read_text())
    assert session["wire"]["limit_usd"] == 0.005
    assert result["cost_usd"] == pytest.approx(session["wire"]["metered_cost_usd"]) == pytest.approx(0.0105)
    _no_key_in(camp)


@needs_claude      # a CLI that is not installed is refused first
def test_init_refuses_a_claude_arm_without_its_secret_or_its_cost_cap(root, fake):
    r = sweep("eval", "init", str(write_plan(root, fake, repeats=1, max_usd=1.0, secrets=False)),
              "--campaign", str(root / "a"), check=False)
    assert r.returncode == 2
    assert "arm claude" in r.stderr and "claude-code" in r.stderr and "anthropic" in r.stderr, r.stderr
    assert "secrets" in r.stderr
    r = sweep("eval", "init", str(write_plan(root, fake, repeats=1, max_usd=None)), "--campaign", str(root / "b"),
              check=False)
    assert r.returncode == 2 and "arms.0.budget.max_usd" in r.stderr and "arm claude" in r.stderr, r.stderr
    (root / "keys" / "anthropic.key").chmod(0o644)
    r = sweep("eval", "init", str(write_plan(root, fake, repeats=1, max_usd=1.0)), "--campaign", str(root / "c"),
              check=False)
    assert r.returncode == 2 and "secrets.anthropic.file" in r.stderr and "chmod 600" in r.stderr, r.stderr
    assert not any((root / d).exists() for d in ("a", "b", "c"))


OPENAI_KEY = "sk-openai-fake-0123456789"
needs_codex = pytest.mark.skipif(shutil.which("codex") is None, reason="the codex CLI is not installed")


@needs_codex
def test_a_codex_arm_gets_the_openai_secret_from_the_environment_and_solves(root, fake):
    """The same, played by the REAL codex CLI against the fake Responses API: the openai family's
    secret named by a variable of the runner's environment, the cost metered at the plan's prices."""
    import base64

    from tests.fakes.openai_api import FakeOpenAI
    from tests.fakes.openai_api import Script as OpenAIScript
    from tests.fakes.openai_api import call, say
    openai = FakeOpenAI()
    try:
        fix = base64.b64encode(FIXED.encode()).decode()
        openai.script("solver", OpenAIScript(steps=[call("exec_command", {"cmd": f"printf %s {fix} | base64 -d > "
                                                                                "repo/calc.py"}), say("Fixed.")]))
        (root / "codex.toml").write_text(f"""
name = "codex-eval"
dataset = "ds"
repeats = 2
seed = 5

[secrets]
openai = {{ env = "EVAL_OPENAI_KEY" }}

[[arms]]
name = "codex"
runtime = "codex"
model = "gpt-5"
runtime_options = {{ base_url = "{openai.url('solver')}", max_retries = 0, stall_s = 60, prices = {{ input_per_mtok = 1.25, output_per_mtok = 10.0 }} }}
budget = {{ wall_s = 300, max_usd = 1.0 }}
""")
        camp = root / "codex-camp"
        env = {"EVAL_OPENAI_KEY": OPENAI_KEY}
        sweep("eval", "init", str(root / "codex.toml"), "--campaign", str(camp), env=env)
        assert "ran 2 cells" in sweep("eval", "run", "--campaign", str(camp), env=env, timeout=600).stdout
        for cell in json.loads((camp / "manifest.json").read_text())["cells"]:
            cdir = camp / "cells" / cell["cell_id"]
            result = json.loads((cdir / "result.json").read_text())
            assert (result["reward"], result["runtime"], result["session_status"]) == (1.0, "codex", "ok"), result
            wire = json.loads((cdir / "sessions" / "0001-solver" / "result.json").read_text())["wire"]
            assert wire["complete"] and wire["limit_usd"] == 1.0
            # 2000 input + 300 output tokens per response at 1.25 / 10 USD per Mtok: 0.0055 each
            assert result["cost_usd"] == pytest.approx(wire["metered_cost_usd"]) and result["cost_usd"] > 0
        assert {r["auth_sha256"] for r in openai.requests if r["route"] == "solver"} == {key_digest(f"Bearer {OPENAI_KEY}")}
        for path in camp.rglob("*"):
            if path.is_file():
                assert OPENAI_KEY.encode() not in path.read_bytes(), path
    finally:
        openai.close()


FIX_COMMAND = "printf 'def add(a, b):\\n    return a + b\\n' > repo/calc.py"
FEEDBACK = "## Verifier feedback (cycle 1)"


def told_solver() -> Script:
    """Answers without touching the repository until the verifier's feedback reaches it (in the same
    conversation, resumed), then fixes calc.py with one shell command (claude's Write would want
    the file read in this process first)."""
    def step(request: dict, n: int) -> dict:
        said = json.dumps(request["messages"])
        if FEEDBACK not in said:
            return text("Done.")
        if "tool_result" not in said.split(FEEDBACK, 1)[1]:
            return tool_calls([("Bash", {"command": FIX_COMMAND, "description": "fix add"})])
        return text("Fixed.")
    return Script(dynamic=step)


@needs_claude
def test_max_usd_is_the_cells_envelope_over_its_feedback_sessions(root, fake, monkeypatch):
    """gate_feedback = 1: the first session changes nothing (one response, 0.0105 USD), the verifier's
    failures go to the same session resumed (claude --resume: the model sees the first conversation,
    under the same session id), which may spend only what the envelope has left."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    fake.script("solver", told_solver())
    results, requests = {}, {}
    for name, max_usd in (("roomy", 1.0), ("tight2", 0.015)):
        plan = write_plan(root, fake, repeats=1, max_usd=max_usd, name=name)
        plan.write_text(plan.read_text().replace('runtime = "claude-code"', 'runtime = "claude-code"\ngate_feedback = 1'))
        camp = root / name
        sweep("eval", "init", str(plan), "--campaign", str(camp))
        before = len(fake.main_requests("solver"))
        sweep("eval", "run", "--campaign", str(camp), timeout=600)
        requests[name] = fake.main_requests("solver")[before:]
        cdir = camp / "cells" / "c00000"
        wires = [json.loads((cdir / "sessions" / s / "result.json").read_text())["wire"]
                 for s in ("0001-solver", "0002-feedback")]
        results[name] = (json.loads((cdir / "result.json").read_text()), wires)
        _no_key_in(camp)
    roomy, (first, second) = results["roomy"]
    assert (roomy["reward"], roomy["sessions"], roomy["feedback"][0]["fed_back"]) == (1.0, 2, True), roomy
    # the cycle resumed the first session: the fed-back request carries its conversation and its id
    sid = json.loads((root / "roomy" / "cells" / "c00000" / "sessions" / "0001-solver" / "result.json")
                     .read_text())["session_id"]
    assert (roomy["feedback"][0]["resumed"], roomy["feedback"][0]["resumed_session_id"]) == (True, sid)
    told = next(r for r in requests["roomy"] if FEEDBACK in json.dumps(r["messages"]))
    earlier = json.dumps(told["messages"]).split(FEEDBACK)[0]
    assert "Done." in earlier and "add-numbers" in earlier or "calc" in earlier, earlier[-2000:]
    assert {r["session_id"] for r in requests["roomy"]} == {sid}
    prompt = (root / "roomy" / "cells" / "c00000" / "sessions" / "0002-feedback" / "prompt.md").read_text()
    assert prompt.startswith(FEEDBACK)          # the task is in the resumed conversation already
    assert first["metered_cost_usd"] == pytest.approx(0.0105)
    assert (first["limit_usd"], second["limit_usd"]) == (1.0, pytest.approx(1.0 - 0.0105))
    assert roomy["cost_usd"] == pytest.approx(first["metered_cost_usd"] + second["metered_cost_usd"])
    tight, (first, second) = results["tight2"]
    # 0.0045 USD left: the feedback session stops at its first response, and the cell scores 0
    assert second["limit_usd"] == pytest.approx(0.015 - 0.0105)
    assert (tight["reward"], tight["sessions"], tight["session_status"]) == (0.0, 2, "failed"), tight
    assert tight["cost_usd"] == pytest.approx(0.021)


RESUMED = "## Resumed after an interruption"


def fault_solver(hold: threading.Event) -> Script:
    """The first session reads calc.py with one shell call (its 1st tool call), and its next request
    is held until the fault has stopped it; resumed (the resume instruction in its conversation), it
    writes the fix. Every later session writes the fix at once."""
    held: list[str] = []

    def step(request: dict, n: int) -> dict:
        said = json.dumps(request["messages"])
        tail = said.split(RESUMED, 1)[1] if RESUMED in said else said
        if "tool_result" not in tail:
            if RESUMED in said or held:
                return tool_calls([("Bash", {"command": FIX_COMMAND, "description": "fix add"})])
            return tool_calls([("Bash", {"command": "cat repo/calc.py", "description": "read"})])
        if RESUMED not in said and not held:
            held.append(request["session_id"])
            hold.wait(30)          # the fault stops the session meanwhile
            return text("too late")
        return text("Fixed.")
    return Script(dynamic=step)


@needs_claude
def test_a_fault_interrupts_a_cell_which_resumes_and_still_gets_its_reward(root, fake, monkeypatch):
    """[[faults]] cells = ["c00000"], after_tool_calls = 1: that cell's session is stopped after its
    first tool call (recorded with its time), resumed with the resume instruction (claude --resume:
    the model sees the call and its output, under the same session id) and solves; the report marks
    it, and --exclude-faults leaves it out: 2 of 2 solved (Wilson low 2 / (2 + z^2) = 0.342, pass@2
    = 1, cost per solved unknown: the cut request was never metered) become 1 of 1 (low 1 / (1 + z^2)
    = 0.207, no task with both repeats: no pass@k, cost per solved the other cell's metered cost)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    hold = threading.Event()
    fake.script("solver", fault_solver(hold))
    plan = write_plan(root, fake, repeats=2, max_usd=1.0, name="faulted")
    # one cell at a time: the fake tells the faulted session from the other by which comes first
    plan.write_text(plan.read_text().replace("seed = 3\n", "seed = 3\nmax_parallel = 1\n")
                    + '\n[[faults]]\ncells = ["c00000"]\nafter_tool_calls = 1\n')
    camp = root / "faulted"
    sweep("eval", "init", str(plan), "--campaign", str(camp))
    try:
        assert "ran 2 cells" in sweep("eval", "run", "--campaign", str(camp), timeout=600).stdout
    finally:
        hold.set()
    cdir = camp / "cells" / "c00000"
    r0, r1 = (json.loads((camp / "cells" / c / "result.json").read_text()) for c in ("c00000", "c00001"))
    assert (r0["reward"], r0["sessions"], r1["reward"], r1["sessions"], r1["fault"]) == (1.0, 2, 1.0, 1, None), r0
    assert sorted(p.name for p in (cdir / "sessions").iterdir()) == ["0001-solver", "0002-resume"]
    interrupted = json.loads((cdir / "sessions" / "0001-solver" / "result.json").read_text())
    fault = r0["fault"]
    assert (fault["fired"], fault["after_tool_calls"], fault["tool_calls"], fault["session"], fault["resumed"]) == \
        (True, 1, 1, "0001-solver", True)
    assert (interrupted["reason"], interrupted["fault"]["at"]) == ("fault", fault["at"])
    # the cells' Harbor trials carry the same: the fault, or none
    trials = {c: json.loads((camp / "jobs" / "faulted" / f"add-numbers__{c}" / "result.json").read_text())
              for c in ("c00000", "c00001")}
    assert trials["c00000"]["agent_result"]["metadata"]["fault"] == fault
    assert trials["c00001"]["agent_result"]["metadata"]["fault"] is None
    assert interrupted["started_at"] < fault["at"] < interrupted["ended_at"]
    resumed = [r for r in fake.main_requests("solver") if RESUMED in json.dumps(r["messages"])]
    assert resumed and {r["session_id"] for r in resumed} == {interrupted["session_id"]} == \
        {fault["resumed_session_id"]}
    before = json.dumps(resumed[0]["messages"]).split(RESUMED)[0]
    assert "cat repo/calc.py" in before and "return a - b" in before      # the call and its output came back
    z2 = 1.959963984540054 ** 2
    report = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json").stdout)
    arm = report["arms"][0]
    assert (arm["cells"], arm["solved"], arm["pass_at_k"]) == (2, 2, {"1": 1.0, "2": 1.0})
    assert arm["ci95"][0] == pytest.approx(2 / (2 + z2)) and not report["faults_excluded"]
    assert [(f["cell_id"], f["after_tool_calls"], f["resumed"], f["solved"]) for f in report["faults"]] == \
        [("c00000", 1, True, True)]
    # the request the fault cut was never answered, so the relay could not meter it: the faulted cell's
    # cost is unknown (never $0), and so is the arm's cost per solved cell while it counts
    assert r0["cost_usd"] is None and r1["cost_usd"] > 0 and arm["cost_per_solved_usd"] is None
    resumed_wire = json.loads((cdir / "sessions" / "0002-resume" / "result.json").read_text())["wire"]
    assert resumed_wire["limit_usd"] == pytest.approx(1.0 - interrupted["wire"]["metered_cost_usd"])
    excluded = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json", "--exclude-faults").stdout)
    arm = excluded["arms"][0]
    assert (arm["cells"], arm["solved"], arm["pass_at_k"], excluded["faults_excluded"]) == (1, 1, {}, True)
    assert arm["ci95"][0] == pytest.approx(1 / (1 + z2)) and arm["cost_per_solved_usd"] == pytest.approx(r1["cost_usd"])
    assert (excluded["ended"], excluded["counted"], len(excluded["faults"])) == (2, 1, 1)
    text_report = sweep("eval", "report", "--campaign", str(camp), "--exclude-faults").stdout
    assert "faults: 1 cell(s) interrupted and resumed; the figures exclude them" in text_report
    assert "c00000 claude add-numbers after 1 resumed solved" in text_report
    page = root / "faulted.html"
    sweep("eval", "report", "--campaign", str(camp), "--html", str(page))
    html = page.read_text()
    assert "Cells interrupted by the plan&#x27;s faults" in html or "Cells interrupted by the plan's faults" in html
    assert "<td>c00000</td>" in html and "counted in the figures above" in html
    _no_key_in(camp)


@needs_codex
def test_a_codex_cell_is_faulted_resumed_and_fed_back_in_one_thread(root):
    """The same with the REAL codex CLI: the cell's session is stopped after its first command, resumed
    (codex exec resume) with the resume instruction, which changes nothing; the verifier's failures
    then go to the same thread resumed again, which fixes calc.py. Every request names one thread,
    and the fed-back one carries the whole conversation: the first command's output and the resume."""
    from tests.fakes.openai_api import FakeOpenAI
    from tests.fakes.openai_api import Script as OpenAIScript
    from tests.fakes.openai_api import call, say
    openai = FakeOpenAI()
    hold = threading.Event()
    held: list[bool] = []

    def step(request: dict, n: int) -> dict:
        said = json.dumps(request["input"])
        if FEEDBACK in said:
            return say("Fixed.") if "function_call_output" in said.split(FEEDBACK, 1)[1] else \
                call("exec_command", {"cmd": FIX_COMMAND})
        if RESUMED in said:
            return say("Done.")              # the resumed session changes nothing: the verifier says so
        if "function_call_output" not in said:
            return call("exec_command", {"cmd": "cat repo/calc.py"})
        if not held:
            held.append(True)
            hold.wait(30)                    # the fault stops the session meanwhile
        return say("too late")
    try:
        openai.script("solver", OpenAIScript(dynamic=step))
        (root / "codex-fault.toml").write_text(f"""
name = "codex-fault"
dataset = "ds"
seed = 5

[secrets]
openai = {{ env = "EVAL_OPENAI_KEY" }}

[[arms]]
name = "codex"
runtime = "codex"
model = "gpt-5"
gate_feedback = 1
runtime_options = {{ base_url = "{openai.url('solver')}", max_retries = 0, stall_s = 60, prices = {{ input_per_mtok = 1.25, output_per_mtok = 10.0 }} }}
budget = {{ wall_s = 300, max_usd = 1.0 }}

[[faults]]
arms = ["codex"]
after_tool_calls = 1
""")
        camp = root / "codex-fault"
        env = {"EVAL_OPENAI_KEY": OPENAI_KEY}
        sweep("eval", "init", str(root / "codex-fault.toml"), "--campaign", str(camp), env=env)
        try:
            sweep("eval", "run", "--campaign", str(camp), env=env, timeout=600)
        finally:
            hold.set()
        cdir = camp / "cells" / "c00000"
        r = json.loads((cdir / "result.json").read_text())
        assert (r["reward"], r["sessions"]) == (1.0, 3), r
        assert sorted(p.name for p in (cdir / "sessions").iterdir()) == ["0001-solver", "0002-resume", "0003-feedback"]
        thread = json.loads((cdir / "sessions" / "0001-solver" / "result.json").read_text())["session_id"]
        assert (r["fault"]["fired"], r["fault"]["tool_calls"], r["fault"]["resumed_session_id"]) == (True, 1, thread)
        assert (r["feedback"][0]["fed_back"], r["feedback"][0]["resumed"]) == (True, True)
        assert r["feedback"][0]["resumed_session_id"] == thread
        requests = [q for q in openai.requests if q["route"] == "solver"]
        assert {q["session_id"] for q in requests} == {thread}
        told = json.dumps(next(q for q in requests if FEEDBACK in json.dumps(q["input"]))["input"])
        assert "return a - b" in told and told.index(RESUMED) < told.index(FEEDBACK)
        for path in camp.rglob("*"):
            if path.is_file():
                assert OPENAI_KEY.encode() not in path.read_bytes(), path
    finally:
        openai.close()


def test_init_refuses_a_fault_naming_a_cell_the_manifest_lacks(root):
    """The hand-made task with a command arm x 2 repeats has cells c00000 and c00001: a fault naming
    c00007 is refused at init (naming the field), and nothing is written."""
    (root / "f.toml").write_text("""
name = "f"
dataset = "ds"
repeats = 2
seed = 1

[[arms]]
name = "idle"
runtime = "command"
runtime_options = { argv = ["true"], network = "none" }

[[faults]]
cells = ["c00007"]
after_tool_calls = 1
""")
    r = sweep("eval", "init", str(root / "f.toml"), "--campaign", str(root / "fcamp"), check=False)
    assert r.returncode == 2 and "faults.0.cells" in r.stderr and "c00007" in r.stderr, r.stderr
    assert not (root / "fcamp").exists()
    text = (root / "f.toml").read_text().replace('cells = ["c00007"]', 'cells = ["c00001"]')
    (root / "f.toml").write_text(text)
    r = sweep("eval", "init", str(root / "f.toml"), "--campaign", str(root / "fcamp"), check=False)
    assert r.returncode == 2 and "reports no tool calls" in r.stderr and "arm idle" in r.stderr, r.stderr


def test_a_session_of_unknown_cost_spends_the_whole_envelope(root):
    """The command runtime reports no cost: with a max_usd, its spend counts as the whole envelope,
    so no feedback session is started after it (the cycle says why)."""
    (root / "unknown.toml").write_text("""
name = "unknown"
dataset = "ds"
seed = 1

[[arms]]
name = "stubborn"
runtime = "command"
runtime_options = { argv = ["true", "{cost_cap_usd}"], network = "none" }
gate_feedback = 2
budget = { max_usd = 0.5 }
""")
    camp = root / "unknown-camp"
    sweep("eval", "init", str(root / "unknown.toml"), "--campaign", str(camp))
    sweep("eval", "run", "--campaign", str(camp), timeout=300)
    r = json.loads((camp / "cells" / "c00000" / "result.json").read_text())
    assert (r["reward"], r["sessions"], r["cost_usd"]) == (0.0, 1, None)
    assert [(f["cycle"], f["fed_back"], f.get("stopped")) for f in r["feedback"]] == [(1, False, "budget_spent")]


@needs_claude
def test_max_spend_usd_stops_the_runner_before_a_cell_it_cannot_cover(root, fake, monkeypatch):
    """Each cell (three responses, 0.0315 USD metered) reserves its arm's 0.05 envelope first and
    settles at its metered cost: 0.05, then 0.0315 + 0.05, fit in 0.1; the third (0.063 + 0.05) does
    not, so its run ends (budget_exhausted) without a result and the runner says so; the ledger and
    the report say what was spent. (max_parallel = 1: one cell at a time, so the ledger's order is
    the manifest's.)"""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    fake.script("solver", fixing_solver())
    plan = write_plan(root, fake, repeats=3, max_usd=0.05, name="capped")
    plan.write_text(plan.read_text().replace("seed = 3\n", "seed = 3\nmax_spend_usd = 0.1\nmax_parallel = 1\n"))
    camp = root / "capped"
    sweep("eval", "init", str(plan), "--campaign", str(camp))
    r = sweep("eval", "run", "--campaign", str(camp), timeout=600, check=False)
    assert r.returncode == 1 and "ran 2 cells" in r.stdout, (r.stdout, r.stderr)
    assert "stopped: max_spend_usd 0.1 reached" in r.stderr and "would reserve 0.05" in r.stderr
    cells = json.loads((camp / "manifest.json").read_text())["cells"]
    costs = [json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text())["cost_usd"] for c in cells[:2]]
    assert costs == [pytest.approx(0.0315)] * 2 and not (camp / "cells" / cells[2]["cell_id"] / "result.json").exists()
    ledger = [json.loads(line) for line in (camp / "spend.jsonl").read_text().splitlines()]
    assert [(e["op"], e["usd"]) for e in ledger] == [("reserve", 0.05), ("settle", costs[0]),
                                                     ("reserve", 0.05), ("settle", costs[1])]
    report = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json").stdout)
    assert report["spend"] == {"spent_usd": pytest.approx(sum(costs)), "max_spend_usd": 0.1}
    # the same runner again stops at the same cell, running nothing
    r = sweep("eval", "run", "--campaign", str(camp), timeout=60, check=False)
    assert r.returncode == 1 and "ran 0 cells (2 had ended before)" in r.stdout


@needs_claude
def test_an_endpoint_failure_is_not_scored_and_the_cell_runs_again(root, fake, monkeypatch):
    """A 500 from the model API (an outage: it says nothing of the arm) leaves the cell without a
    result, parked under the solver role's cooldown, and stops the runner; once the endpoint answers
    and the cooldown is cleared, the next run solves the cell."""
    from tests.fakes.anthropic_api import error
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    fake.script("solver", Script(error=error(500, "api_error", "internal")))
    camp = root / "outage"
    sweep("eval", "init", str(write_plan(root, fake, repeats=1, max_usd=1.0, name="outage")), "--campaign", str(camp))
    r = sweep("eval", "run", "--campaign", str(camp), timeout=600, check=False)
    assert r.returncode == 1 and "ran 0 cells" in r.stdout, (r.stdout, r.stderr)
    assert "cell c00000 (arm claude): its solver session failed on its model endpoint (outage)" in r.stderr
    assert not (camp / "cells" / "c00000" / "result.json").exists()
    # the cell's run is parked under the solver role's outage cooldown of its arm's key family
    # (anthropic), not counted as an attempt
    from runstate import load_record, run_dir
    rec = load_record(run_dir(camp, "c00000")).value
    assert (rec.state.value, rec.parked_role, rec.attempts) == ("queued", "solver-anthropic", 0), rec
    assert json.loads((camp / "outage-solver-anthropic.json").read_text())["kind"] == "outage"
    fake.script("solver", fixing_solver())
    sweep("clear-cooldown", "solver-anthropic", "--campaign", str(camp))    # the operator: the endpoint answers again
    assert "ran 1 cells" in sweep("eval", "run", "--campaign", str(camp), timeout=600).stdout
    assert json.loads((camp / "cells" / "c00000" / "result.json").read_text())["reward"] == 1.0
    _no_key_in(camp)


def every_task_solver() -> Script:
    """A correct solver for each task of the hand-made dataset, told apart by the file its
    instruction names (the workspace it works in is the sandbox's /app, not a host directory)."""
    from tests.test_eval_harbor import SOLVER
    fixes = {"calc.py": FIXED, "greet.py": "def greet(name):\n    return 'Hello, ' + name + '!'\n"}
    assert "return a + b" in SOLVER        # the command oracle arm writes the same fixes

    def step(request: dict, n: int) -> dict:
        repo = Path(request["cwd"]) / "repo"
        prompt = json.dumps(request["messages"][:1])
        name = next((f for f in fixes if f in prompt or f.replace(".py", "('Ada')") in prompt), None)
        if name is None:               # write-version: a new file, nothing to read first
            return tool_calls([("Write", {"file_path": str(repo / "VERSION"), "content": "1.2.3\n"})]) \
                if n == 0 else text("Written.")
        if n == 0:
            return tool_calls([("Read", {"file_path": str(repo / name)})])
        if n == 1:
            return tool_calls([("Write", {"file_path": str(repo / name), "content": fixes[name]})])
        return text("Fixed.")
    return Script(dynamic=step)


@needs_claude
def test_three_arms_with_claude_over_the_three_task_dataset(tmp_path, fake, monkeypatch):
    """The hand-made 3-task Harbor dataset, arms oracle-like (command), nop-like (command) and claude
    x 3 repeats: rewards exactly as the arms imply, and the paired comparison by hand: claude vs nop
    on 3 tasks, all 3 discordant and claude's: exact McNemar p = 2 * (1/2)^3 = 0.25, effect +1."""
    import sys

    from tests.test_eval_harbor import SOLVER
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    make_dataset(tmp_path / "ds3")
    (tmp_path / "solve3.py").write_text(SOLVER)
    key = tmp_path / "anthropic.key"
    key.write_text(FAKE_KEY)
    key.chmod(0o600)
    fake.script("solver", every_task_solver())
    (tmp_path / "eval.toml").write_text(f"""
name = "three-arms"
dataset = "ds3"
repeats = 3
seed = 11

[secrets]
anthropic = {{ file = "anthropic.key" }}

[[arms]]
name = "oracle"
runtime = "command"
runtime_options = {{ argv = ["{sys.executable}", "{tmp_path / 'solve3.py'}", "{{workspace}}"], network = "none" }}

[[arms]]
name = "nop"
runtime = "command"
runtime_options = {{ argv = ["true"], network = "none" }}

[[arms]]
name = "claude"
runtime = "claude-code"
model = "claude-sonnet-4-5"
runtime_options = {{ base_url = "{fake.url('solver')}", max_retries = 0, stall_s = 60 }}
budget = {{ wall_s = 300, max_usd = 1.0 }}
""")
    camp = tmp_path / "camp"
    assert "27 cells (3 tasks x 3 arms x 3 repeats)" in sweep("eval", "init", str(tmp_path / "eval.toml"),
                                                              "--campaign", str(camp)).stdout
    assert "ran 27 cells" in sweep("eval", "run", "--campaign", str(camp), timeout=900).stdout
    cells = json.loads((camp / "manifest.json").read_text())["cells"]
    results = [json.loads((camp / "cells" / c["cell_id"] / "result.json").read_text()) for c in cells]
    assert [(r["arm"], r["reward"]) for r in results] == [(c["arm"], 0.0 if c["arm"] == "nop" else 1.0) for c in cells]
    for c, r in zip(cells, results, strict=True):
        if c["arm"] == "claude":
            wire = json.loads((camp / "cells" / c["cell_id"] / "sessions" / "0001-solver" / "result.json")
                              .read_text())["wire"]
            assert r["cost_usd"] == pytest.approx(wire["metered_cost_usd"]) and r["cost_usd"] > 0
    report = json.loads(sweep("eval", "report", "--campaign", str(camp), "--json").stdout)
    arms = {a["arm"]: a for a in report["arms"]}
    assert {a: (arms[a]["cells"], arms[a]["solved"]) for a in arms} == {"oracle": (9, 9), "nop": (9, 0),
                                                                         "claude": (9, 9)}
    assert arms["claude"]["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    claude_cost = sum(r["cost_usd"] for r in results if r["arm"] == "claude")
    assert arms["claude"]["cost_per_solved_usd"] == pytest.approx(claude_cost / 9)
    pair = next(p for p in report["paired"] if {p["first"], p["second"]} == {"claude", "nop"})
    assert (pair["tasks"], pair["neither"], pair["both"]) == (3, 0, 0)
    assert pair["p_value"] == pytest.approx(0.25) and abs(pair["effect"]) == pytest.approx(1.0)
    assert report["solved_by"] == {t: ["claude", "oracle"] for t in ("add-numbers", "greet-name", "write-version")}
    _no_key_in(camp)


def test_a_secret_the_runner_cannot_read_stops_it_before_any_cell(root, fake, monkeypatch):
    """The plan names the key by a variable the runner's environment does not hold: `sweep eval run`
    says which field, and runs, reserves and writes nothing."""
    monkeypatch.delenv("EVAL_ANTHROPIC_KEY", raising=False)
    plan = write_plan(root, fake, repeats=1, max_usd=1.0, name="unset")
    plan.write_text(plan.read_text().replace('{ file = "keys/anthropic.key" }', '{ env = "EVAL_ANTHROPIC_KEY" }')
                    .replace("seed = 3\n", "seed = 3\nmax_spend_usd = 5\n"))
    camp = root / "unset"
    sweep("eval", "init", str(plan), "--campaign", str(camp))
    r = sweep("eval", "run", "--campaign", str(camp), check=False)
    assert r.returncode == 2 and "secrets.anthropic.env" in r.stderr and "EVAL_ANTHROPIC_KEY" in r.stderr, r.stderr
    assert not (camp / "spend.jsonl").exists() and not (camp / "cells" / "c00000").exists()
    assert not fake.requests


@needs_claude
def test_a_secrets_variable_names_the_credential_the_session_stands_for(root, fake, monkeypatch):
    """`variable = "ANTHROPIC_AUTH_TOKEN"`: the relay sends the key as a bearer token, not x-api-key."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    fake.script("solver", fixing_solver())
    plan = write_plan(root, fake, repeats=1, max_usd=1.0, name="bearer")
    plan.write_text(plan.read_text().replace('{ file = "keys/anthropic.key" }',
                                             '{ file = "keys/anthropic.key", variable = "ANTHROPIC_AUTH_TOKEN" }'))
    camp = root / "bearer"
    sweep("eval", "init", str(plan), "--campaign", str(camp))
    sweep("eval", "run", "--campaign", str(camp), timeout=600)
    assert json.loads((camp / "cells" / "c00000" / "result.json").read_text())["reward"] == 1.0
    wire = json.loads((camp / "cells" / "c00000" / "sessions" / "0001-solver" / "result.json").read_text())["wire"]
    assert wire["credential"] == "ANTHROPIC_AUTH_TOKEN"
    main = fake.main_requests("solver")
    assert main and not any(r["api_key_set"] for r in main)      # no x-api-key header: the bearer token
    _no_key_in(camp)


@needs_claude
@needs_codex
def test_an_outage_of_one_key_family_holds_only_its_arms_cells(root, fake, monkeypatch):
    """Two arms of different key families (claude: anthropic; codex: openai), 2 repeats, one cell at
    a time: the anthropic endpoint answers 500, so the claude cell that runs parks under the anthropic
    family's cooldown (outage-solver-anthropic.json) and the other claude cell is held by it, while the
    codex cells run to their end; `sweep clear-cooldown --family anthropic` releases the claude cells."""
    import base64
    import time

    from runstate import load_record, run_dir
    from tests.fakes.anthropic_api import error
    from tests.fakes.openai_api import FakeOpenAI
    from tests.fakes.openai_api import Script as OpenAIScript
    from tests.fakes.openai_api import call, say
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    fake.script("solver", Script(error=error(500, "api_error", "internal")))
    openai = FakeOpenAI()
    try:
        fix = base64.b64encode(FIXED.encode()).decode()
        openai.script("solver", OpenAIScript(steps=[call("exec_command", {"cmd": f"printf %s {fix} | base64 -d > "
                                                                                "repo/calc.py"}), say("Fixed.")]))
        okey = root / "keys" / "openai.key"
        okey.write_text(OPENAI_KEY + "\n")
        okey.chmod(0o600)
        (root / "families.toml").write_text(f"""
name = "families"
dataset = "ds"
repeats = 2
seed = 5
max_parallel = 1

[secrets]
anthropic = {{ file = "keys/anthropic.key" }}
openai = {{ file = "keys/openai.key" }}

[[arms]]
name = "claude"
runtime = "claude-code"
model = "claude-sonnet-4-5"
runtime_options = {{ base_url = "{fake.url('solver')}", max_retries = 0, stall_s = 60 }}
budget = {{ wall_s = 300, max_usd = 1.0 }}

[[arms]]
name = "codex"
runtime = "codex"
model = "gpt-5"
runtime_options = {{ base_url = "{openai.url('solver')}", max_retries = 0, stall_s = 60, prices = {{ input_per_mtok = 1.25, output_per_mtok = 10.0 }} }}
budget = {{ wall_s = 300, max_usd = 1.0 }}
""")
        camp = root / "families"
        sweep("eval", "init", str(root / "families.toml"), "--campaign", str(camp))
        cells = json.loads((camp / "manifest.json").read_text())["cells"]
        arm_of = {c["cell_id"]: c["arm"] for c in cells}
        # seed 5: both claude cells go first, the codex cells queued behind them
        assert [c["arm"] for c in cells] == ["claude", "claude", "codex", "codex"], cells
        claude = [c for c, a in arm_of.items() if a == "claude"]
        codex = [c for c, a in arm_of.items() if a == "codex"]
        assert {load_record(run_dir(camp, c)).value.key_family for c in claude} == {"anthropic"}
        assert {load_record(run_dir(camp, c)).value.key_family for c in codex} == {"openai"}

        def codex_done() -> bool:
            sweep("tick", "--campaign", str(camp))
            return all(load_record(run_dir(camp, c)).value.state.value == "ended" for c in codex)
        deadline = time.monotonic() + 400
        while not codex_done():
            assert time.monotonic() < deadline, [load_record(run_dir(camp, c)).value for c in arm_of]
            time.sleep(1)
        for c in codex:
            assert json.loads((camp / "cells" / c / "result.json").read_text())["reward"] == 1.0
        stamp = json.loads((camp / "outage-solver-anthropic.json").read_text())
        assert stamp["kind"] == "outage" and not (camp / "outage-solver.json").exists()
        recs = {c: load_record(run_dir(camp, c)).value for c in claude}
        parked = [c for c, r in recs.items() if r.parked_role == "solver-anthropic"]
        assert len(parked) == 1 and all(r.state.value == "queued" and r.attempts == 0 for r in recs.values()), recs
        (held,) = set(claude) - set(parked)
        assert recs[held].hold_reason.startswith("role solver-anthropic cooling down (outage)"), recs[held]
        assert not any((camp / "cells" / c / "result.json").exists() for c in claude)
        fake.script("solver", fixing_solver())     # the endpoint answers again
        out = sweep("clear-cooldown", "--family", "anthropic", "--campaign", str(camp)).stdout
        assert "cooldown cleared for solver-anthropic" in out and "1 parked run(s) released" in out, out
        tick_until_done(camp, timeout=400)
        for c in claude:
            assert json.loads((camp / "cells" / c / "result.json").read_text())["reward"] == 1.0
    finally:
        openai.close()
