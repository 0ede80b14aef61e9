"""A FAKE author CLI for the `command` runtime that keeps what it was shown, in tests only.

    python tests/fakes/contract_author.py --workspace {workspace} --prompt {prompt_file} --repo REPO ...

Each session builds the bundle with the oracle's builder from the commits and the test command
its prompt names (so the prompt must state them), and adds `task/seen/revision-N.json`: the prompt
and the files `task/` held when the session started (a repair must start from the previous bundle).
The records of earlier sessions are carried over, so the last bundle holds all of them.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("rest", nargs="*")
    args, _ = ap.parse_known_args()
    from sweep.harbor.pr_bundle import build_bundle_from_git
    task = Path(args.workspace) / "task"
    prompt = Path(args.prompt).read_text()
    before = sorted(str(p.relative_to(task)) for p in task.rglob("*") if p.is_file())
    seen = {p.name: p.read_text() for p in (task / "seen").glob("*.json")} if (task / "seen").is_dir() else {}
    command = re.search(r"^- Test command \(the plan's[^`]*`([^`]+)`$", prompt, re.M)
    base = re.search(r"^Base commit: ([0-9a-f]{40})$", prompt, re.M)
    head = re.search(r"^Head commit: ([0-9a-f]{40})$", prompt, re.M)
    if not (command and base and head):
        print("contract author: the prompt does not name the test command and the commits", file=sys.stderr)
        return 3
    build_bundle_from_git({"kind": "git", "repo": args.repo, "base": base.group(1), "head": head.group(1),
                           "title": "", "body": "", "test_command": command.group(1)}, task)
    (task / "seen").mkdir()
    for name, text in seen.items():
        (task / "seen" / name).write_text(text)
    (task / "seen" / f"revision-{len(seen) + 1}.json").write_text(json.dumps({"prompt": prompt, "before": before}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
