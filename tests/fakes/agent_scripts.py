"""Scripts for the fake model servers that make the REAL agent CLIs play sweep's roles well.

- author: builds the bundle the PR implies (with the oracle's builder, on the test side) and
  sends it as tool calls: one `Write` per file (absolute paths under the session's working
  directory, read from the CLI's own system prompt) and one `Bash` call that marks the scripts
  executable (the Write tool creates files 0644);
- reviewer: returns an `accept` verdict through claude's StructuredOutput tool; in a rollout review
  (a prompt headed "# Judge the blind rollouts") it labels each rollout by its reward;
- solver: reads, then writes the PR's head version of each non-test file it changed into `repo/`.
Everything is computed from the PR repository the test built, never from the CLI's output.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tests.fakes.anthropic_api import Script, structured, text, tool_calls

VERDICT = {"verdict": "accept", "findings": [], "rationale": "the tests check exactly what the PR fixed"}


def bundle_files(src: dict) -> tuple[dict[str, str], list[str]]:
    """{relative path: text} of the bundle the oracle would write for `src`, and its executables."""
    from sweep.harbor.pr_bundle import build_bundle_from_git
    with tempfile.TemporaryDirectory(prefix="sweep-fake-author-") as tmp:
        out = Path(tmp) / "task"
        build_bundle_from_git({"kind": "git", "repo": src["repo"], "base": src["base"], "head": src["head"],
                               "title": src.get("title", ""), "body": src.get("body", ""),
                               "test_command": src["test_command"]}, out)
        files, executables = {}, []
        for path in sorted(out.rglob("*")):
            if path.is_file():
                rel = path.relative_to(out).as_posix()
                files[rel] = path.read_text()
                if os.access(path, os.X_OK):
                    executables.append(rel)
    return files, executables


def solution_files(src: dict) -> dict[str, str]:
    """{path: head content} of the PR's non-test changes (what a correct solver writes)."""
    from sweep.harbor import layout
    names = subprocess.run(["git", "-C", src["repo"], "diff", "--name-only", src["base"], src["head"]],
                           capture_output=True, text=True, check=True).stdout.split()
    return {n: subprocess.run(["git", "-C", src["repo"], "show", f"{src['head']}:{n}"], capture_output=True,
                              text=True, check=True).stdout
            for n in names if not layout.is_test_path(n)}


def author_script(src: dict, *, solution_mark: str | None = None) -> Script:
    """`solution_mark`: a comment line added to solution/solve.sh (a canary the solver must never see)."""
    files, executables = bundle_files(src)
    if solution_mark:
        files["solution/solve.sh"] += f"# {solution_mark}\n"

    def step(request: dict, n: int) -> dict:
        cwd = request["cwd"]
        if n == 0:
            return tool_calls([("Write", {"file_path": f"{cwd}/task/{rel}", "content": body})
                               for rel, body in files.items()])
        if n == 1:
            return tool_calls([("Bash", {"command": "chmod +x " + " ".join(f"task/{e}" for e in executables),
                                         "description": "make the bundle's scripts executable"})])
        return text("The task bundle is in task/.")
    return Script(dynamic=step)


def prompt_of(request: dict) -> str:
    """The text of the conversation's first user message (the session's prompt)."""
    for m in request.get("messages") or []:
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict))
    return ""


def rollout_labels(prompt: str) -> dict:
    """A rollout review's answer that takes each rollout's reward at its word."""
    import re
    found = re.findall(r"^### rollout (\d+): reward (\S+), session", prompt, re.M)
    return {**VERDICT, "rollouts": [{"rollout": int(k), "reason": f"reward {reward}",
                                     "label": "legitimate_success" if reward == "1.0" else "legitimate_failure"}
                                    for k, reward in found]}


def reviewer_script() -> Script:
    def step(request: dict, n: int) -> dict:
        prompt = prompt_of(request)
        if n > 0:
            return text("labels given" if "# Judge the blind rollouts" in prompt else "verdict given")
        return structured(rollout_labels(prompt) if "# Judge the blind rollouts" in prompt else VERDICT)
    return Script(dynamic=step)


def solver_script(src: dict) -> Script:
    changes = solution_files(src)

    def step(request: dict, n: int) -> dict:
        if n == 0:     # claude's Write refuses to overwrite a file the session has not read
            return tool_calls([("Read", {"file_path": f"{request['cwd']}/repo/{path}"}) for path in changes])
        if n == 1:
            return tool_calls([("Write", {"file_path": f"{request['cwd']}/repo/{path}", "content": body})
                               for path, body in changes.items()])
        return text("Fixed.")
    return Script(dynamic=step)


def codex_solver_script(src: dict):
    """The same correct solver, for codex: one shell command per file (base64, so no quoting)."""
    import base64
    import shlex

    from tests.fakes.openai_api import Script as OpenAIScript, call, say
    changes = solution_files(src)
    steps = [call("exec_command", {"cmd": f"printf %s {base64.b64encode(body.encode()).decode()} | base64 -d > "
                                          + shlex.quote(f"repo/{path}")})
             for path, body in changes.items()]
    return OpenAIScript(steps=[*steps, say("Fixed.")])
