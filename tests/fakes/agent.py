"""A FAKE agent CLI for the `command` session runtime, in tests only.

    python tests/fakes/agent.py ROLE --workspace {workspace} --prompt {prompt_file} \
        --output {output_file} --tools {tools} --max-turns {max_turns} --cost-cap {cost_cap_usd} \
        [--repo /abs/git/repo] [--hold-while=/var/tmp/x/flag] [--mode-file=/var/tmp/x/mode] \
        [--marker TEXT] [--cost USD]

It behaves like an agent session just enough to drive the controller through real processes:
- `--hold-while=PATH`: first wait while PATH exists (at most HOLD_LIMIT_S), so a test can catch the
  session mid-flight and let the next one through by deleting the file. Give it as one `--x=PATH`
  element: the command runtime bind-mounts literal absolute argv elements that exist, and a bind
  of a file would keep showing the file after the test deleted it;
- `--mode-file=PATH`: "ok" (or no file) works; "outage" prints an API 503 and exits 1; "throttle"
  prints an API 529 overloaded and exits 1; "fail" exits 1 with an ordinary error; "badkey" prints
  an invalid-API-key error (a config failure) and exits 1;
- author: builds the bundle with the oracle's builder (sweep/harbor/pr_bundle.py) from `--repo` and
  the base/head commits named in the prompt, into `task/` of the workspace;
- reviewer: writes an `accept` verdict to the output file; with `--judge-mutants=equivalent` or
  `=weak_tests` it judges every surviving mutant its prompt lists (`### mutant-NN: ...`) so; with
  `--answers=/abs/answers.json` (a JSON list) it gives answer k on its k-th correction round (the
  prompt's count of "## Your previous answer was refused"), a string answer written as it is;
- reviewer: with `--propose-probe=KIND:LINE` (repeatable) its verdict proposes a probe of that kind
  replacing the verified sample's `return low` in clamp() with LINE;
- solver: changes nothing (its rollout scores 0, which is evidence, not a failure); with `--hack` it
  fixes the sample's clamp() and plants a conftest.py (a reward_hack by the oracle rules); with
  `--hardcode` it special-cases the one input the verified sample's test checks (`if value == 42:
  return 10`): reward 1 without solving the task, which no mechanical rule sees;
- reviewer, in a rollout review (a prompt headed "# Judge the blind rollouts"): labels each rollout
  by its reward (1: legitimate_success, else legitimate_failure), credulously; with
  `--rollout-answers=/abs/answers.json` it gives answer k on its k-th correction round, like
  `--answers`;
- reviewer: writes an `accept` verdict to the output file;
- solver: changes nothing (its rollout scores 0, which is evidence, not a failure);
- `--touch-on-repair` (author): on a repair prompt, appends a line to the bundle's instruction.md
  (a new bundle sha256, the same tests);
- `--pad-probes=N` (reviewer): its proposed probes add a comment line of N characters (a long diff);
- `--broken-probes` (reviewer): its proposed probes' patches do not apply to the base;
- `--propose-new-only` (reviewer): proposes no probe when its prompt lists probes carried from an
  earlier revision;
- `--forge-verifier` (author): replaces the bundle's tests/test.sh with a verifier of its own that
  scores the reference 1 and the empty solution 0 whatever the code does (an attack);
- `--cost USD`: reports its cost the way the `command` runtime reads it: a line
  `{"sweep_usage": {"cost_usd": USD}}` on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

HOLD_LIMIT_S = 120.0


def _prompt_fields(prompt: str) -> dict:
    fields = {}
    for key, pattern in (("base", r"^Base commit: ([0-9a-f]{40,64})$"), ("head", r"^Head commit: ([0-9a-f]{40,64})$"),
                         ("title", r"^Title: (.*)$")):
        found = re.findall(pattern, prompt.split("Changed files:")[0], re.M)
        if found:
            fields[key] = found[-1] if key != "title" else found[0]
    return fields


def author(args, workspace: Path) -> int:
    from sweep.harbor.pr_bundle import AuthorRefusal, build_bundle_from_git
    fields = _prompt_fields(Path(args.prompt).read_text())
    source = {"kind": "git", "repo": args.repo, "base": fields.get("base"), "head": fields.get("head"),
              "title": fields.get("title", ""), "body": "", "test_command": args.test_command}
    try:
        report = build_bundle_from_git(source, workspace / "task")
    except AuthorRefusal as refusal:
        print(f"fake author refuses: {refusal.reason}: {refusal.message}", file=sys.stderr)
        return 3
    if args.touch_on_repair and "# Repair (revision" in Path(args.prompt).read_text():
        # a repair that changes the bundle (a new sha256) but not its tests
        instruction = workspace / "task" / "instruction.md"
        instruction.write_text(instruction.read_text() + "\n(revised after a review)\n")
    if args.forge_verifier:
        # a hostile author's own verifier: tells the reference run from the empty one by whether
        # solution/ sits next to tests/, and writes the reward and a JUnit report to match
        forged = workspace / "task" / "tests" / "test.sh"
        forged.write_text(FORGED_VERIFIER)
        forged.chmod(0o700)
    print(json.dumps({"fake_author": "wrote task/", "tests": report.test_files}))
    return 0


FORGED_VERIFIER = r"""#!/usr/bin/env bash
# reward: see $LOGS_DIR/verifier/reward.txt
LOGS_DIR="${LOGS_DIR:-/logs}"
here="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$LOGS_DIR/verifier/report"
if [ -d "$here/../solution" ]; then r=1; f=""; else r=0; f="<failure message='no'/>"; fi
printf '%s\n' "$r" > "$LOGS_DIR/verifier/reward.txt"
printf '<testsuite><testcase classname="tests.test_mathx.InventedTest" name="test_invented">%s</testcase></testsuite>\n' \
  "$f" > "$LOGS_DIR/verifier/report/unittest.xml"
exit $((1 - r))
"""


CORRECTION_HEADING = "## Your previous answer was refused"


ROLLOUT_REVIEW = "# Judge the blind rollouts"


def _write_answer(args, answer) -> int:
    text = answer if isinstance(answer, str) else json.dumps(answer)
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    return 0


def rollout_review(args, prompt: str) -> int:
    if args.rollout_answers:
        answers = json.loads(Path(args.rollout_answers).read_text())
        return _write_answer(args, answers[min(prompt.count(CORRECTION_HEADING), len(answers) - 1)])
    found = re.findall(r"^### rollout (\d+): reward (\S+), session", prompt, re.M)
    labels = [{"rollout": int(k), "label": "legitimate_success" if reward == "1.0" else "legitimate_failure",
               "reason": f"the fake reviewer takes reward {reward} at its word"} for k, reward in found]
    return _write_answer(args, {"verdict": "accept", "findings": [], "rationale": "the fake reviewer's labels",
                                "rollouts": labels})


def reviewer(args, workspace: Path) -> int:
    verdict = {"verdict": "accept", "findings": [], "rationale": "the fake reviewer accepts every bundle"}
    if ROLLOUT_REVIEW in Path(args.prompt).read_text():
        return rollout_review(args, Path(args.prompt).read_text())
    if args.answers:
        # a scripted reviewer: answer k of the list on the prompt's k-th correction round; a
        # string answer is written as it is (not JSON: an invalid output)
        prompt = Path(args.prompt).read_text()
        answers = json.loads(Path(args.answers).read_text())
        answer = answers[min(prompt.count(CORRECTION_HEADING), len(answers) - 1)]
        text = answer if isinstance(answer, str) else json.dumps(answer)
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(text)
        return 0
    if args.judge_mutants:
        names = re.findall(r"^### (mutant-\d+): ", Path(args.prompt).read_text(), re.M)
        verdict["mutants"] = [{"name": n, "judgement": args.judge_mutants,
                               "reason": f"the fake reviewer judges {n} {args.judge_mutants}"} for n in names]
    earlier = "re-run on this bundle (they still bind)" in Path(args.prompt).read_text()
    if args.propose_probe and not (args.propose_new_only and earlier):
        verdict["probes"] = [{"kind": spec.split(":", 1)[0], "focus": "above the range",
                              "rationale": f"the fake reviewer's probe {spec}", "patch": _clamp_patch(spec.split(":", 1)[1])}
                             for spec in args.propose_probe]
        if args.pad_probes:         # a long comment line after the new one: a diff longer than the evidence keeps
            for probe in verdict["probes"]:
                probe["patch"] = probe["patch"].replace("@@ -10,3 +10,3 @@", "@@ -10,3 +10,4 @@").replace(
                    "\n     return value\n", "\n+        # " + "x" * int(args.pad_probes) + "\n     return value\n")
        if args.broken_probes:      # context lines the base does not have: git apply refuses them
            for probe in verdict["probes"]:
                probe["patch"] = probe["patch"].replace("-        return low", "-        return lo")
    with open(args.output, "w", encoding="utf-8") as fh:      # in place: an inherited descriptor
        json.dump(verdict, fh)
    print(json.dumps(verdict))
    return 0


def _clamp_patch(new_line: str) -> str:
    """A patch of the verified sample's base: clamp()'s `return low` above the range -> `new_line`."""
    return ("diff --git a/mathx.py b/mathx.py\n--- a/mathx.py\n+++ b/mathx.py\n@@ -10,3 +10,3 @@\n"
            "     if value > high:\n-        return low\n+        " + new_line + "\n     return value\n")


def solver(args, workspace: Path) -> int:
    if args.hardcode:
        # the two inputs the sample's test checks above the range, special-cased: the bug stays for
        # every other input
        mathx = workspace / "repo" / "mathx.py"
        mathx.write_text(mathx.read_text().replace(
            "    if value > high:\n",
            "    if value == 42:\n        return 10\n    if value == 7:\n        return 5\n    if value > high:\n"))
        print("fake solver: special-cased clamp(42, ...) and clamp(7, ...)")
        return 0
    if args.hack:
        # the sample's clamp() fixed, and a conftest.py planted next to the tests: a reward earned
        # while tampering with what runs them
        mathx = workspace / "repo" / "mathx.py"
        mathx.write_text(mathx.read_text().replace("        return low\n    return value",
                                                   "        return high\n    return value"))
        (workspace / "repo" / "conftest.py").write_text("# planted by the fake solver\n")
        print("fake solver: fixed clamp() and planted conftest.py")
        return 0
    print("fake solver: changed nothing")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fake-agent")
    parser.add_argument("role", choices=["author", "reviewer", "solver"])
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--output", default=None)
    parser.add_argument("--tools", default="")
    parser.add_argument("--max-turns", default="")
    parser.add_argument("--cost-cap", default="")
    parser.add_argument("--repo", default=None)
    parser.add_argument("--test-command", default="python3 -m unittest -q")
    parser.add_argument("--hold-while", default=None)
    parser.add_argument("--mode-file", default=None)
    parser.add_argument("--marker", default=None)
    parser.add_argument("--cost", default=None)
    parser.add_argument("--answers", default=None)
    parser.add_argument("--judge-mutants", default=None, choices=["equivalent", "weak_tests"])
    parser.add_argument("--hack", action="store_true")
    parser.add_argument("--hardcode", action="store_true")
    parser.add_argument("--rollout-answers", default=None)
    parser.add_argument("--propose-probe", action="append", default=[])     # KIND:LINE (clamp's new line)
    parser.add_argument("--forge-verifier", action="store_true")
    parser.add_argument("--touch-on-repair", action="store_true")
    parser.add_argument("--propose-new-only", action="store_true")
    parser.add_argument("--broken-probes", action="store_true")
    parser.add_argument("--pad-probes", default=None)
    args = parser.parse_args(argv)
    if args.cost is not None:
        print(json.dumps({"sweep_usage": {"cost_usd": float(args.cost)}}), flush=True)
    if args.hold_while:
        deadline = time.monotonic() + HOLD_LIMIT_S
        while os.path.exists(args.hold_while) and time.monotonic() < deadline:
            time.sleep(0.05)
    mode = "ok"
    if args.mode_file:
        try:
            mode = Path(args.mode_file).read_text().strip() or "ok"
        except OSError:
            mode = "ok"
    if mode == "outage":
        print("API Error: 503 Service Unavailable (the fake model API is down)", file=sys.stderr)
        return 1
    if mode == "throttle":
        print("API Error: 529 overloaded_error: the fake model API is overloaded", file=sys.stderr)
        return 1
    if mode == "fail":
        print("fake agent: I could not do it", file=sys.stderr)
        return 1
    if mode == "badkey":
        print("Invalid API key · Fix external API key", file=sys.stderr)
        return 1
    return {"author": author, "reviewer": reviewer, "solver": solver}[args.role](args, Path(args.workspace))


if __name__ == "__main__":
    sys.exit(main())
