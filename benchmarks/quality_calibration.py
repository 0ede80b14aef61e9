#!/usr/bin/env python
"""Does "verified" catch planted defects, without blocking clean tasks? (issue 22, the mechanical path)

Builds a panel of small real pull requests on the sample `mathx` repository (sweep/harbor/samples.py):
each either carries one planted defect or is clean, then runs the whole pipeline with the oracle
roles (gates, probes with the mechanical mutants, oracle review, one oracle rollout) through
`sweep init` + `sweep tick` on the local backend, and reports:

- detection rate: planted-defect tasks that did not end `verified`, per defect class;
- false-block rate: clean tasks that did not end `verified`.

Defect classes (each task fails before the fix and passes after it, so the gates' "empty scores 0"
and FAIL_TO_PASS do not catch it by themselves, except where noted):
- accepts_constant: the test checks only that the result is not the old wrong value
  (`assertNotEqual(clamp(42, 0, 10), 0)`), so `return None` passes;
- untested_hunk: a two-function fix whose test checks one function (the weak_tests sample);
- format_only: the verifier checks only the shape of the output (`describe()` returns digits),
  not the value, so the clamp() hunk can be left out;
- flaky: the test depends on the hash seed (the flaky sample; the repeat gate's job);
- rejects_valid_alternative and leaks_fix: a test pinned to one spelling of the fix, and an
  instruction that contains the fix: the mechanical path has no valid-alternative probe and no
  instruction check, so these measure what it does NOT catch (an agent reviewer's or a prepared
  probe's job).

With `--prepared`, pinned and the two clean tasks carry a prepared valid-alternative probe (the plan's
`prepared_probes`, bound to each bundle's sha256, which a first campaign with a placeholder hash
gets, as docs/campaign.md says): pinned must then be caught, the clean tasks must still verify.

With `--reviewer credulous` or `--reviewer diligent` the reviewer is an agent: the real `claude`
CLI (runtime claude-code) against the fake Anthropic server (tests/fakes/anthropic_api.py), which
plays the reviewer by a fixed script, for the task review and the rollout review alike. A fake
measures sweep's handling of what a reviewer says, not a model's judgement:
- credulous: accepts every bundle (no finding, no mutant judged, no probe) and labels every
  rollout by its reward. What still keeps a task from `verified` is what the mechanical checks
  catch on the agent path: the gates, the mutants (an accept that leaves a surviving mutant
  unjudged is refused, corrected once, then fails the attempt), the rollout consistency rules;
- diligent (`diligent_review` below): reads `task/instruction.md`, `task/tests/test_files.txt` and
  each listed test file through the CLI's Read tool, then judges every surviving mutant
  `weak_tests`, asks for a revision when the instruction holds a line the PR's diff adds to a
  non-test file (a leaked fix; citing instruction.md with that line as the quote) or when a test
  reads the source of the code under test (`inspect.getsource`: a test pinned to one spelling,
  citing that test line), and otherwise accepts; in a rollout review it labels a reward-1 rollout
  whose diff touches a test or conftest file `reward_hack` (citing the diff), the rest by reward.

- vouching: credulous, and judges every surviving mutant `equivalent` with a reason: what its
  claims excuse is bounded by the plan's quality.max_equivalent_mutants (`--max-equivalent N`;
  default 0: none), and a return_constant mutant is never excused.

Usage (from the repository root; about 5 minutes on an idle 2-core machine):
    .venv/bin/python benchmarks/quality_calibration.py [--root /var/tmp/quality-calibration] [--prepared]
        [--reviewer oracle|credulous|vouching|diligent] [--max-equivalent N]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sweep.harbor import samples  # noqa: E402

ABOVE = samples.TEST_BASE + '''

class ClampAboveTest(unittest.TestCase):
    def test_above_range_is_not_the_lower_bound(self):
        self.assertNotEqual(clamp(42, 0, 10), 0)
'''

DESCRIBE_BUGGY = '''

def describe(value, low, high):
    """The clamped value, as digits."""
    return "value: " + str(clamp(value, low, high))
'''
DESCRIBE_FIXED = DESCRIBE_BUGGY.replace('return "value: " + str(', "return str(")
FORMAT_TEST = samples.TEST_BASE.replace("from mathx import clamp, mean", "from mathx import clamp, describe, mean") + '''

class DescribeTest(unittest.TestCase):
    def test_describe_gives_digits(self):
        self.assertRegex(describe(42, 0, 10), r"^[0-9]+$")
'''

PINNED_TEST = samples.TEST_BASE + '''

class ClampSourceTest(unittest.TestCase):
    def test_above_range_gives_high(self):
        self.assertEqual(clamp(42, 0, 10), 10)

    def test_the_fix_is_spelled_return_high(self):
        import inspect
        import mathx
        self.assertIn("return high", inspect.getsource(mathx.clamp))
'''

BOTH_TESTED = samples.TEST_BASE + samples.TEST_ABOVE + '''

class MidpointTest(unittest.TestCase):
    def test_midpoint(self):
        from mathx import midpoint
        self.assertEqual(midpoint(0, 10), 5)
        self.assertEqual(midpoint(4, 8), 6)
'''


def _pr(root: Path, name: str, base_files: dict[str, str], head_files: dict[str, str], title: str,
        body: str) -> dict:
    repo = samples._new_repo(root, name)
    base = samples._commit(repo, {"README.md": "# mathx\n", "tests/__init__.py": "", **base_files}, "base",
                           "2024-01-01T00:00:00+00:00")
    head = samples._commit(repo, head_files, title, "2024-01-02T00:00:00+00:00")
    return samples._source(repo, base, head, title, body)


def panel(root: Path) -> list[tuple[str, str, dict]]:
    """(run id, class, source) for every task: the defect class, or "clean"."""
    base = {"mathx.py": samples.MATHX_BUGGY, "tests/test_mathx.py": samples.TEST_BASE}
    two = {"mathx.py": samples.MATHX_BUGGY + samples.MIDPOINT_BUGGY, "tests/test_mathx.py": samples.TEST_BASE}
    fixed_two = samples.MATHX_FIXED + samples.MIDPOINT_BUGGY.replace("// 3", "// 2")
    out = [
        ("constant", "accepts_constant", _pr(root, "constant", base, {"mathx.py": samples.MATHX_FIXED,
                                                                      "tests/test_mathx.py": ABOVE},
                                             "Fix clamp() above the range", "clamp(42, 0, 10) should be 10.")),
        ("untested-hunk", "untested_hunk", samples.make_weak_tests_pr(root, "untested-hunk")),
        ("format-only", "format_only", _pr(root, "format-only",
                                           {"mathx.py": samples.MATHX_BUGGY + DESCRIBE_BUGGY,
                                            "tests/test_mathx.py": samples.TEST_BASE},
                                           {"mathx.py": samples.MATHX_FIXED + DESCRIBE_FIXED,
                                            "tests/test_mathx.py": FORMAT_TEST},
                                           "Fix clamp() above the range; describe() gives digits only",
                                           "describe(42, 0, 10) should be '10'.")),
        ("flaky", "flaky", samples.make_flaky_pr(root, "flaky")),
        ("pinned", "rejects_valid_alternative", _pr(root, "pinned", base, {"mathx.py": samples.MATHX_FIXED,
                                                                           "tests/test_mathx.py": PINNED_TEST},
                                                    "Fix clamp() above the range", "clamp(42, 0, 10) should be 10.")),
        ("leaky", "leaks_fix", _pr(root, "leaky", base, {"mathx.py": samples.MATHX_FIXED,
                                                         "tests/test_mathx.py": samples.TEST_BASE + samples.TEST_ABOVE},
                                   "Fix clamp() above the range",
                                   "In clamp(), replace `return low` under `if value > high:` with `return high`.")),
        ("clean-clamp", "clean", samples.make_verified_pr(root, "clean-clamp")),
        ("clean-two", "clean", _pr(root, "clean-two", two, {"mathx.py": fixed_two, "tests/test_mathx.py": BOTH_TESTED},
                                   "Fix clamp() and midpoint()", "Both were wrong.")),
    ]
    return out


def _alternative(base: str, fixed: str) -> str:
    """A valid alternative to a fix: the whole fix (a probe replaces the reference solution), with
    clamp()'s `return high` spelled `return min(value, high)`; a diff of mathx.py from the base."""
    import difflib
    other = fixed.replace("        return high\n", "        return min(value, high)\n")
    return "".join(difflib.unified_diff(base.splitlines(True), other.splitlines(True), "a/mathx.py", "b/mathx.py"))


def _alternatives() -> dict[str, str]:
    two_base = samples.MATHX_BUGGY + samples.MIDPOINT_BUGGY
    two_fixed = samples.MATHX_FIXED + samples.MIDPOINT_BUGGY.replace("// 3", "// 2")
    one = _alternative(samples.MATHX_BUGGY, samples.MATHX_FIXED)
    return {"pinned": one, "clean-clamp": one, "clean-two": _alternative(two_base, two_fixed)}


def _campaign(root: Path, name: str, cands: list[dict], agent: dict | None = None,
              quality: dict | None = None) -> tuple[dict, Path]:
    """`sweep init` + `sweep tick` until every run ended; the last `status --json` and the campaign.
    `agent`: the plan fields and environment of an agent reviewer (`_agent_reviewer`)."""
    plan = {"name": "calibration", "target_verified": 100, "max_parallel": 2, "max_attempts": 2,
            "defaults": {"quality": {"max_repairs": 0, **(quality or {})}}, "scheduler": {"backend": "local"},
            "tick": {"submit_grace_s": 0}, "candidates": cands}
    env = None
    if agent is not None:
        plan["defaults"].update(agent["defaults"])
        plan.update(agent["plan"])
        env = {**os.environ, **agent["env"]}
    (root / f"{name}.json").write_text(json.dumps(plan))
    sweep = [sys.executable, "-m", "sweep"]
    camp = root / name
    subprocess.run([*sweep, "init", str(root / f"{name}.json"), "--campaign", str(camp)], check=True, cwd=REPO,
                   capture_output=True, env=env)
    started = time.monotonic()
    while True:
        subprocess.run([*sweep, "tick", "--campaign", str(camp)], check=True, cwd=REPO, capture_output=True, env=env)
        st = json.loads(subprocess.run([*sweep, "status", "--json", "--campaign", str(camp)], check=True, cwd=REPO,
                                       capture_output=True, text=True, env=env).stdout)
        if st["counts"]["queued"] == 0 and st["counts"]["active"] == 0:
            return st, camp
        if time.monotonic() - started > 1800:
            raise SystemExit(f"the calibration campaign {name} did not finish in 30 minutes")
        time.sleep(1)


def _prepared(rid: str, sha: str) -> list[dict]:
    return [{"name": "min-high", "kind": "valid_alternative", "focus": "above the range",
             "rationale": "clamp()'s fix spelled min(value, high)", "patch": _alternatives()[rid], "bundle_sha256": sha}]


def _bundle_hashes(root: Path, cands: list[dict]) -> dict[str, str]:
    """Each task's bundle sha256, the way docs/campaign.md tells a plan to get it: a first campaign
    with a placeholder hash ends each run `prepared_probes_stale` after the oracle author, naming it."""
    st, camp = _campaign(root, "hashes", [{**c, "prepared_probes": _prepared(c["id"], "0" * 64)} for c in cands])
    out = {}
    for c in cands:
        detail = json.loads((camp / "runs" / c["id"] / "state.json").read_text())["cause_detail"]
        out[c["id"]] = detail.split("this run built bundle ", 1)[1][:64]
    return out


# ---- the agent reviewer: the real claude CLI against the fake Anthropic server ---------------------

ROLLOUT_REVIEW = "# Judge the blind rollouts"
ACCEPT = {"verdict": "accept", "findings": [], "rationale": "the fake reviewer's verdict"}


def _prompt(request: dict) -> str:
    from tests.fakes.agent_scripts import prompt_of
    return prompt_of(request)


def _tool_texts(request: dict) -> list[str]:
    """The results of every tool call of the conversation so far, in order."""
    out = []
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                text = inner if isinstance(inner, str) else "\n".join(
                    c.get("text", "") for c in inner or [] if isinstance(c, dict))
                # the Read tool numbers its lines ("     1\t..." or "     1→..."): the file's own text back
                out.append("\n".join(re.sub(r"^\s*\d+[\t→]", "", line) for line in text.splitlines()))
    return out


def _rollout_labels(prompt: str, diligent: bool) -> dict:
    labels = []
    for k, reward in re.findall(r"^### rollout (\d+): reward (\S+), session", prompt, re.M):
        label = {"rollout": int(k), "reason": f"reward {reward}",
                 "label": "legitimate_success" if reward == "1.0" else "legitimate_failure"}
        section = prompt.split(f"### rollout {k}:", 1)[1].split("### rollout ", 1)[0]
        touched = re.findall(r"^\+\+\+ b/(\S*(?:test\S*|conftest\.py))$", section, re.M)
        if diligent and reward == "1.0" and touched:
            label.update(label="reward_hack", reason=f"reward 1 with changes to {touched[0]}",
                         findings=[{"finding": "the solver changed what the tests run",
                                    "file": f"rollouts/{k}/diff.patch", "quote": f"+++ b/{touched[0]}"}])
        labels.append(label)
    return {**ACCEPT, "rollouts": labels}


def _added_code_lines(prompt: str) -> list[str]:
    """Lines the PR's diff adds to non-test files (8 characters or more, stripped)."""
    diff = prompt.split("Diff (base..head):", 1)[-1].split("## The controller's gate results", 1)[0]
    out, path = [], ""
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[4:]
        elif line.startswith("+") and "test" not in path and len(line[1:].strip()) >= 8:
            out.append(line[1:].strip())
    return out


def diligent_review(request: dict, step: int):
    """The diligent fake's task review (see the module's docstring), one tool round at a time."""
    from tests.fakes.anthropic_api import structured, text, tool_calls
    prompt, cwd = _prompt(request), request["cwd"]
    if step == 0:
        return tool_calls([("Read", {"file_path": f"{cwd}/task/instruction.md"}),
                           ("Read", {"file_path": f"{cwd}/task/tests/test_files.txt"})])
    if step == 1:
        _, listed = (_tool_texts(request) + ["", ""])[:2]
        return tool_calls([("Read", {"file_path": f"{cwd}/task/tests/files/{name.strip()}"})
                           for name in listed.splitlines() if name.strip()] or [("Glob", {"pattern": "task/*"})])
    if step > 2:
        return text("verdict given")
    results = _tool_texts(request) + ["", ""]
    instruction = results[0]            # the first round: instruction.md, test_files.txt; then each test file
    listed = [n.strip() for n in results[1].splitlines() if n.strip()]
    tests = dict(zip(listed, results[2:], strict=False))
    findings = [{"finding": "the instruction gives the fix away", "file": "instruction.md", "quote": line}
                for line in _added_code_lines(prompt) if line in instruction][:1]
    for name, body in tests.items():
        pinned = [line.strip() for line in body.splitlines() if "inspect.getsource" in line]
        if pinned:
            findings.append({"finding": "a test pins the spelling of the fix (it reads the source)",
                             "file": f"tests/files/{name}", "quote": pinned[0]})
    mutants = [{"name": n, "judgement": "weak_tests", "reason": "the tests accept this wrong solution"}
               for n in re.findall(r"^### (mutant-\d+): ", prompt, re.M)]
    verdict = {**ACCEPT, "verdict": "revise" if findings else "accept", "findings": findings}
    return structured({**verdict, **({"mutants": mutants} if mutants else {})})


def _reviewer_script(kind: str):
    from tests.fakes.anthropic_api import Script, structured, text

    def step(request: dict, n: int):
        prompt = _prompt(request)
        if ROLLOUT_REVIEW in prompt:
            return structured(_rollout_labels(prompt, kind == "diligent")) if n == 0 else text("labels given")
        if kind == "diligent":
            return diligent_review(request, n)
        if n > 0:
            return text("verdict given")
        if kind == "vouching":      # every surviving mutant judged equivalent, with a reason
            return structured({**ACCEPT, "mutants": [
                {"name": m, "judgement": "equivalent", "reason": "the fake reviewer vouches for it"}
                for m in re.findall(r"^### (mutant-\d+): ", prompt, re.M)]})
        return structured(ACCEPT)
    return Script(dynamic=step)


def _agent_reviewer(kind: str):
    """(the fake server, the plan fields and environment of a claude-code reviewer against it)."""
    from tests.agent_sessions import ENV_SECRETS, FAKE_KEY
    from tests.fakes.anthropic_api import FakeAnthropic
    fake = FakeAnthropic()
    fake.script("reviewer", _reviewer_script(kind))
    options = {"base_url": fake.url("reviewer"), "max_retries": 0, "stall_s": 60, "model": "claude-sonnet-4-5"}
    return fake, {"defaults": {"runtimes": {"author": "oracle", "reviewer": "claude-code", "solver": "oracle"},
                               "runtime_options": {"reviewer": options}},
                  "plan": {"max_spend_usd": 50, "secrets": {"anthropic": ENV_SECRETS["anthropic"]}},
                  "env": {"ANTHROPIC_API_KEY": FAKE_KEY}}


def run(root: Path, prepared: bool = False, reviewer: str = "oracle", max_equivalent: int | None = None) -> dict:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    tasks = panel(root / "repos")
    cands = [{"id": rid, "repo": src["repo"], "base": src["base"], "head": src["head"], "title": src["title"],
              "body": src["body"], "options": {"test_command": src["test_command"]}} for rid, _, src in tasks]
    if prepared:
        hashes = _bundle_hashes(root, [c for c in cands if c["id"] in _alternatives()])
        cands = [{**c, "prepared_probes": _prepared(c["id"], hashes[c["id"]])} if c["id"] in hashes else c
                 for c in cands]
    started = time.monotonic()
    fake, agent = _agent_reviewer(reviewer) if reviewer != "oracle" else (None, None)
    try:
        st, camp = _campaign(root, "campaign", cands, agent,
                             {"max_equivalent_mutants": max_equivalent} if max_equivalent is not None else None)
    finally:
        if fake is not None:
            fake.close()
    ended = {e["run_id"]: e for e in st["ended"]}
    rows = []
    for rid, cls, _ in tasks:
        e = ended[rid]
        rows.append({"run_id": rid, "class": cls, "outcome": e["outcome"], "reason": e["reason"],
                     "cause": e.get("cause"), "quality": e.get("quality"),
                     "blocked_verified": e["outcome"] != "verified", "reviews": _review_sessions(camp, rid)})
    return {"rows": rows, "seconds": round(time.monotonic() - started, 1)}


def _review_sessions(camp: Path, rid: str) -> int:
    return sum(1 for _ in (camp / "runs" / rid / "sessions").glob("*-reviewer")) if (camp / "runs" / rid).is_dir() else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default="/var/tmp/quality-calibration")
    parser.add_argument("--prepared", action="store_true",
                        help="give pinned, clean-clamp and clean-two a prepared valid-alternative probe "
                             "(clamp's fix spelled min(value, high)), bound to each bundle's sha256")
    parser.add_argument("--reviewer", choices=["oracle", "credulous", "vouching", "diligent"], default="oracle",
                        help="the oracle reviewer (the mechanical path), or claude-code against the fake "
                             "Anthropic server scripted as a credulous or a diligent reviewer")
    parser.add_argument("--max-equivalent", type=int, default=None,
                        help="the plan's quality.max_equivalent_mutants (default: the plan default, 0)")
    args = parser.parse_args()
    result = run(Path(args.root), prepared=args.prepared, reviewer=args.reviewer, max_equivalent=args.max_equivalent)
    rows = result["rows"]
    print(f"reviewer: {args.reviewer}" + (f", quality.max_equivalent_mutants = {args.max_equivalent}"
                                          if args.max_equivalent is not None else ""))
    print(f"{'run':<15} {'class':<26} {'outcome':<22} {'reason':<16} {'cause':<16} {'reviews':<8} quality")
    for r in rows:
        print(f"{r['run_id']:<15} {r['class']:<26} {r['outcome']:<22} {str(r['reason'] or ''):<16} "
              f"{str(r['cause'] or ''):<16} {r['reviews']:<8} {r['quality'] or ''}")
    planted = [r for r in rows if r["class"] != "clean"]
    weak = [r for r in planted if r["class"] in ("accepts_constant", "untested_hunk", "format_only", "flaky")]
    clean = [r for r in rows if r["class"] == "clean"]
    print(f"\ndetection (all planted defects): {sum(r['blocked_verified'] for r in planted)}/{len(planted)}")
    print(f"detection (weak-test defects: constant, untested hunk, format only, flaky): "
          f"{sum(r['blocked_verified'] for r in weak)}/{len(weak)}")
    print(f"false blocks (clean tasks not verified): {sum(r['blocked_verified'] for r in clean)}/{len(clean)}")
    print(f"campaign wall time: {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
