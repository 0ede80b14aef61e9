"""A pull request, mechanically, as a Harbor task: what the oracle author does.

- the PR's test changes become `tests/` (files/<path> + the lists test.sh reads);
- its non-test diff becomes the reference `solution/` (a binary git patch + solve.sh);
- title and body become `instruction.md`;
- the repository at the base commit becomes `environment/repo/`, and the test command's language
  decides `environment/Dockerfile` (sweep/harbor/images.py).

Everything from the PR is untrusted: paths from the diff are validated before use and only ever
passed to git after `--` with literal pathspecs, or written into data files; title and body are only
written as file content. git runs with argv lists, never through a shell. A PR that changes no test
file, or only test files, is refused with a reason the controller records (`blocked`).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sweep.git import GitFailed, diff_restoring, export_tree, raw_changes, run_git, write_blobs
from sweep.harbor import images, layout, scripts
from sweep.harbor.harness import TEST_SH, resolve, write_harness
from sweep.harbor.runners import UnknownRunner

_SHA_RE = re.compile(r"^[0-9a-fA-F]{7,64}$")
GIT_TIMEOUT_S = 300


# Refusals that depend only on the PR: retrying the same PR cannot change them, so the controller
# should end the run `blocked` rather than spend another attempt. (`git_failed` may be transient.)
PERMANENT_REFUSALS = frozenset({"no_test_changes", "no_source_changes", "unsafe_path", "bad_source"})


class AuthorRefusal(Exception):
    """The PR cannot become a task; `reason` is a short machine code, the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class BundleReport:
    test_files: list[str] = field(default_factory=list)
    deleted_test_files: list[str] = field(default_factory=list)
    solution_files: list[str] = field(default_factory=list)
    base: str = ""
    head: str = ""

    def as_dict(self) -> dict:
        return {"test_files": self.test_files, "deleted_test_files": self.deleted_test_files,
                "solution_files": self.solution_files, "base": self.base, "head": self.head}


def _git(repo: Path, *args: str, binary: bool = False) -> bytes:
    # Literal pathspecs: a file named ':(glob)**' is a file name, not pathspec magic.
    try:
        return run_git(["--literal-pathspecs", *args], repo=repo, timeout=GIT_TIMEOUT_S)
    except GitFailed as exc:
        raise AuthorRefusal("git_failed", exc.message) from None


def _check_source(source: object) -> tuple[Path, str, str, str, str, list[str], str | None]:
    if not isinstance(source, dict) or source.get("kind") != "git":
        raise AuthorRefusal("bad_source", "the source must be {'kind': 'git', ...}")
    repo = source.get("repo")
    if not isinstance(repo, str) or not os.path.isabs(repo) or not os.path.isdir(repo):
        raise AuthorRefusal("bad_source", "source.repo must be the absolute path of a git repository")
    base, head = source.get("base"), source.get("head")
    if not isinstance(base, str) or not _SHA_RE.match(base):
        raise AuthorRefusal("bad_source", "source.base must be a commit sha (hex)")
    if not isinstance(head, str) or not _SHA_RE.match(head):
        raise AuthorRefusal("bad_source", "source.head must be a commit sha (hex)")
    title = source.get("title") or ""
    body = source.get("body") or ""
    if not isinstance(title, str) or not isinstance(body, str):
        raise AuthorRefusal("bad_source", "source.title and source.body must be text")
    command = source.get("test_command")
    if not isinstance(command, str) or not command.strip():
        raise AuthorRefusal("bad_source", "source.test_command must be a command line, e.g. 'python3 -m unittest -q'")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise AuthorRefusal("bad_source", f"source.test_command does not parse: {exc}") from None
    if any("\n" in a or "\r" in a or "\x00" in a for a in argv):
        raise AuthorRefusal("bad_source", "source.test_command has an argument with a line break")
    workdir = source.get("test_workdir")
    if workdir is not None and (not isinstance(workdir, str) or not workdir or layout.unsafe_relpath(workdir)):
        raise AuthorRefusal("bad_source", "source.test_workdir must be a relative directory inside the repository")
    runner = source.get("test_runner")
    if runner is not None and not isinstance(runner, str):
        raise AuthorRefusal("bad_source", "source.test_runner must be a runner's name")
    return Path(repo), base, head, title, body, argv, runner


def _changed_paths(repo: Path, base: str, head: str) -> list[tuple[str, ...]]:
    """(status, path, old mode, old sha, new mode, new sha) per changed path, each path checked."""
    try:
        changes = raw_changes(repo, base, head, timeout=GIT_TIMEOUT_S)
    except GitFailed as exc:
        raise AuthorRefusal("git_failed", exc.message) from None
    for change in changes:
        path = change[1]
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise AuthorRefusal("unsafe_path", "the PR changes a path that is not UTF-8") from None
        why = layout.unsafe_relpath(path)
        if why:
            raise AuthorRefusal("unsafe_path", f"the PR changes an unsafe path: {why}")
    return changes


def _extract_tree(repo: Path, commit: str, dest: Path) -> None:
    """Exactly the tree of COMMIT into dest (sweep.git.export_tree: no archive, no filters)."""
    try:
        export_tree(repo, commit, dest, timeout=GIT_TIMEOUT_S)
    except GitFailed as exc:
        raise AuthorRefusal("unsafe_path" if exc.unsafe else "git_failed", exc.message) from None


def _write(path: Path, data: str | bytes, mode: int = 0o600) -> None:
    # private like every file of a run (docs/state.md); scripts 0700. `sweep export` sets the
    # modes of what it publishes itself.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)


def _clear(directory: Path) -> None:
    """Empty `directory` (a previous revision's files must not leak into this one)."""
    directory.mkdir(parents=True, exist_ok=True)
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def build_bundle_from_git(source: object, out: Path) -> BundleReport:
    """Write the task bundle for the PR in `source` into `out` (emptied first). `source` is the
    author's input as given (a dict of the PR's frozen source), checked before anything is read."""
    repo, base, head, title, body, test_argv, runner_name = _check_source(source)
    base = _git(repo, "rev-parse", "--verify", "--end-of-options", base + "^{commit}").decode().strip()
    head = _git(repo, "rev-parse", "--verify", "--end-of-options", head + "^{commit}").decode().strip()
    changes = _changed_paths(repo, base, head)
    tests = [c for c in changes if layout.is_test_path(c[1])]
    others = [c[1] for c in changes if not layout.is_test_path(c[1])]
    if not tests:
        raise AuthorRefusal("no_test_changes",
                            "the PR changes no test file, so nothing can verify a solution "
                            f"({len(changes)} file(s) changed, none under a test directory or named like a test)")
    if not others:
        raise AuthorRefusal("no_source_changes",
                            "the PR changes only test files, so there is no reference solution to verify against")
    report = BundleReport(base=base, head=head, solution_files=others)
    report.test_files = [c[1] for c in tests if c[0] != "D"]
    report.deleted_test_files = [c[1] for c in tests if c[0] == "D"]

    out = Path(out)
    _clear(out)
    _write(out / layout.INSTRUCTION, scripts.instruction_md(title, body))
    # the PR by its URL or `<repository name>@<base>..<head>`, never a host path (the private copy's)
    name = source.get("source_name") if isinstance(source, dict) else None
    public = name if isinstance(name, str) and name and not name.startswith("/") else f"{repo.name}@{base}..{head}"
    _write(out / layout.TASK_TOML, scripts.task_toml(source_repo=public, base=base, head=head,
                                                      test_files=len(report.test_files)))
    _extract_tree(repo, base, out / layout.ENV_REPO)
    # the toolchain the test command needs (sweep/harbor/images.py); what a remote provider builds
    image = images.derive_image(test_argv, images.repo_top_files(out / layout.ENV_REPO), dependencies=False,
                                language=images.task_language(test_argv, out / layout.ENV_REPO))
    _write(out / layout.DOCKERFILE, image.dockerfile)

    _write(out / layout.TEST_FILES, "".join(p + "\n" for p in report.test_files))
    _write(out / layout.DELETED_TEST_FILES, "".join(p + "\n" for p in report.deleted_test_files))
    workdir = source.get("test_workdir") if isinstance(source, dict) else None
    try:
        # sweep's harness (test.sh, the runner's argv, its helpers, test_workdir.txt): what the
        # `verifier` gate expects
        write_harness(out, resolve(test_argv, runner_name, workdir or None))
    except UnknownRunner:
        # no runner for the command: the bundle is still written, and the `verifier` gate says why
        _write(out / layout.TEST_SH, TEST_SH, 0o700)
        _write(out / layout.TEST_COMMAND, "".join(a + "\n" for a in test_argv))
        if workdir:
            _write(out / layout.TEST_WORKDIR, workdir + "\n")
    # the PR's version of each test file, streamed from cat-file (shas on its stdin, never paths on argv)
    try:
        write_blobs(repo, [(c[5], out / layout.TEST_FILES_DIR / c[1]) for c in tests if c[0] != "D"],
                    timeout=GIT_TIMEOUT_S)
        # the reference solution: the diff of everything but the test files, through a tree with
        # them put back as the base has them (100,000 paths would not fit on a command line)
        patch = diff_restoring(repo, base, head, {c[1]: (c[2], c[3]) if c[0] != "A" else None for c in tests},
                               ["--binary", "--full-index", "--no-renames", "--no-ext-diff", "--no-textconv",
                                "--no-color"], timeout=GIT_TIMEOUT_S)
    except GitFailed as exc:
        raise AuthorRefusal("git_failed", exc.message) from None
    _write(out / layout.SOLUTION_PATCH, patch)
    _write(out / layout.SOLVE_SH, scripts.SOLVE_SH, 0o700)
    return report
