"""Small real git repositories for tests: a thin re-export of sweep.harbor.samples.

The builders live in the package (not here) because `sweep demo` builds the same repositories at
runtime. Each returns the author's `source` input dict.
"""
from sweep.harbor.samples import (SAMPLE_BUILDERS, TEST_COMMAND, make_flaky_pr, make_pr_repo,
                                  make_pr_tests_pass_before, make_pr_without_tests, make_verified_pr)

__all__ = ["make_pr_repo", "make_verified_pr", "make_pr_without_tests", "make_pr_tests_pass_before",
           "make_flaky_pr", "SAMPLE_BUILDERS", "TEST_COMMAND"]


# ---- a candidate repository whose git configuration and attributes try to run programs ----------

import os  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

HOSTILE_KNOBS = ("filter-clean", "filter-smudge", "filter-process", "textconv", "diff-command", "diff-external",
                 "fsmonitor", "hook", "pager", "attributes-file-filter")
VERSION_TEXT = "version = '$Format:%H %D$'\n"      # what export-subst would rewrite


def make_hostile_git_pr(root: Path, marks: Path, canary_repo: Path) -> dict:
    """A verified PR (sweep's mathx sample) whose base adds `.gitattributes` (every path through a
    filter, a diff driver and export-subst; `version.txt` with a $Format$ placeholder) and a
    `file://` submodule whose URL is `canary_repo`; its `.git/config` defines each program git
    could run (filter clean/smudge/process, textconv, diff command, diff.external, fsmonitor,
    hooksPath, pager, an attributes file naming another filter). Each program, if run, creates
    `marks/<knob>`: a test asserts that `marks` stays empty."""
    src = make_verified_pr(root / "repos", "mathx")
    repo = Path(src["repo"])
    marks.mkdir(parents=True, exist_ok=True)
    bin_dir = root / "bin"
    (bin_dir / "hooks").mkdir(parents=True, exist_ok=True)

    def program(knob: str, name: str | None = None) -> str:
        path = bin_dir / (name or knob)
        path.write_text(f"#!/bin/sh\ntouch {marks}/{knob}\ncat\n")
        os.chmod(path, 0o755)
        return str(path)
    for hook in ("pre-commit", "post-checkout", "pre-auto-gc", "reference-transaction", "post-index-change"):
        program("hook", f"hooks/{hook}")
    canary_repo.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str, cwd: Path = repo) -> str:
        return subprocess.run(["git", "-C", str(cwd), *args], env=env, check=True, capture_output=True,
                              text=True).stdout.strip()
    git("init", "-q", str(canary_repo), cwd=root)
    (canary_repo / "secret.txt").write_text("canary-submodule\n")
    git("add", "secret.txt", cwd=canary_repo)
    git("commit", "-q", "-m", "canary", cwd=canary_repo)
    canary_sha = git("rev-parse", "HEAD", cwd=canary_repo)
    git("checkout", "-q", src["base"])
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\nversion.txt export-subst\n")
    (repo / "version.txt").write_text(VERSION_TEXT)
    (repo / ".gitmodules").write_text(f'[submodule "vendor"]\n\tpath = vendor\n\turl = file://{canary_repo}\n')
    git("add", ".gitattributes", "version.txt", ".gitmodules")
    git("update-index", "--add", "--cacheinfo", f"160000,{canary_sha},vendor")
    git("commit", "-q", "-m", "attributes, a version file and a submodule")
    base = git("rev-parse", "HEAD")
    git("cherry-pick", f"{src['base']}..{src['head']}")
    head = git("rev-parse", "HEAD")
    (root / "attributes").write_text("* filter=evil2\n")
    settings = {
        "filter.evil.clean": program("filter-clean"), "filter.evil.smudge": program("filter-smudge"),
        "filter.evil.process": program("filter-process"), "filter.evil.required": "true",
        "filter.evil2.clean": program("attributes-file-filter"), "filter.evil2.smudge": program("attributes-file-filter"),
        "diff.evil.textconv": program("textconv"), "diff.evil.command": program("diff-command"),
        "diff.external": program("diff-external"), "core.fsmonitor": program("fsmonitor"),
        "core.hooksPath": str(bin_dir / "hooks"), "core.pager": program("pager"),
        "core.attributesFile": str(root / "attributes"), "pager.diff": "true",
        "uploadpack.packObjectsHook": program("pack-objects-hook"),
    }
    for key, value in settings.items():
        git("config", key, value)
    return {**src, "base": base, "head": head}


def hostile_git_home(root: Path, marks: Path) -> dict[str, str]:
    """An operator environment whose global and system git config define the same programs: what a
    controller started with it must ignore."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    hook = root / "global-program"
    hook.write_text(f"#!/bin/sh\ntouch {marks}/global-config\ncat\n")
    os.chmod(hook, 0o755)
    text = (f"[diff]\n\texternal = {hook}\n[core]\n\tpager = {hook}\n\tfsmonitor = {hook}\n"
            f"[filter \"evil\"]\n\tclean = {hook}\n\tsmudge = {hook}\n[diff \"evil\"]\n\ttextconv = {hook}\n")
    (home / ".gitconfig").write_text(text)
    (root / "system-gitconfig").write_text(text)
    return {"HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
            "GIT_CONFIG_SYSTEM": str(root / "system-gitconfig"), "XDG_CONFIG_HOME": str(home)}
