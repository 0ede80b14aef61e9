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
- reviewer: writes an `accept` verdict to the output file;
- solver: changes nothing (its rollout scores 0, which is evidence, not a failure);
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
    print(json.dumps({"fake_author": "wrote task/", "tests": report.test_files}))
    return 0


def reviewer(args, workspace: Path) -> int:
    verdict = {"verdict": "accept", "findings": [], "rationale": "the fake reviewer accepts every bundle"}
    with open(args.output, "w", encoding="utf-8") as fh:      # in place: an inherited descriptor
        json.dump(verdict, fh)
    print(json.dumps(verdict))
    return 0


def solver(args, workspace: Path) -> int:
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
