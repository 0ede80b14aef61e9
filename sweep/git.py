"""Every git command sweep runs, under one environment policy (stdlib only).

Repositories are untrusted (a PR's tree, its commit messages, its paths), so:
- argv lists only, never a shell; `--end-of-options` / literal pathspecs are the caller's job;
- a minimal environment: PATH, HOME (for the operator's own git config), LC_ALL=C so messages
  parse the same everywhere, no terminal prompt (a credential prompt would hang a job), no
  optional locks (reads never take the index lock), no system-wide config;
- stdin closed, a timeout on every call;
- trees are exported with `git archive` unpacked by Python's tarfile under the `data` filter
  (no absolute names, no `..`, no links out of the destination, no device files), never by an
  external `tar`.
"""
from __future__ import annotations

import os
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

GIT_TIMEOUT_S = 300


class GitFailed(Exception):
    """A git command failed or timed out; `message` is one line for the run's record."""

    def __init__(self, message: str, *, timed_out: bool = False, unsafe: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.timed_out = timed_out
        self.unsafe = unsafe        # export_tree refused an entry of the tree


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0",
           "GIT_OPTIONAL_LOCKS": "0", "GIT_CONFIG_NOSYSTEM": "1"}
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]
    env.update(extra or {})
    return env


def _last_line(err: bytes, rc: int) -> str:
    lines = err.decode(errors="replace").strip().splitlines()
    return lines[-1][-400:] if lines else f"exit {rc}"


def run_git(args: Sequence[str], *, repo: str | Path | None = None, timeout: float = GIT_TIMEOUT_S,
            env: Mapping[str, str] | None = None) -> bytes:
    """`git [-C repo] ARGS...`; its stdout. Raises GitFailed naming the subcommand."""
    argv = ["git", *(["-C", str(repo)] if repo is not None else []), *args]
    what, skip = "git", False
    for a in args:                      # the subcommand: the first word that is not an option
        if skip or a in ("-c", "-C"):
            skip = not skip
            continue
        if not a.startswith("-"):
            what = a
            break
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              env=git_env(env))
    except subprocess.TimeoutExpired:
        raise GitFailed(f"git {what} timed out after {timeout:.0f}s", timed_out=True) from None
    except OSError as exc:
        raise GitFailed(f"cannot run git: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise GitFailed(f"git {what} failed: {_last_line(done.stderr, done.returncode)}")
    return done.stdout


def export_tree(repo: str | Path, commit: str, dest: Path, *, timeout: float = GIT_TIMEOUT_S) -> None:
    """The tree of `commit` unpacked into `dest` (created if needed), streamed: a large repository
    never sits in memory. Raises GitFailed (unsafe=True for an entry the data filter refuses)."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", "--end-of-options", commit],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=git_env())
    assert proc.stdout is not None and proc.stderr is not None   # noqa: S101 - both are PIPEs
    failure: GitFailed | None = None
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            tar.extractall(dest, filter="data")
    except tarfile.FilterError as exc:
        proc.kill()
        failure = GitFailed(f"the repository has an entry unsafe to unpack: {exc}", unsafe=True)
    except tarfile.TarError as exc:
        proc.kill()
        failure = GitFailed(f"git archive produced no readable tree: {exc}")
    finally:
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    if failure is not None:
        raise failure
    if rc != 0:
        raise GitFailed(f"git archive failed: {_last_line(err, rc)}")
