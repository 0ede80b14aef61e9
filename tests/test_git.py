"""sweep.git: one hardened policy, a private bare repository, and tree export as exactly the commit's tree (real git)."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

from pathlib import Path

from sweep.git import GitFailed, export_tree, git_env, run_git

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def repo_with(tmp_path, populate) -> tuple:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=ENV)
    populate(repo)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=ENV)
    subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", "commit", "-q", "-m", "x"],
                   check=True, env=ENV)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, env=ENV,
                         capture_output=True, text=True).stdout.strip()
    return repo, sha


def test_export_tree_unpacks_files_modes_and_inner_links(tmp_path):
    def populate(repo):
        (repo / "pkg").mkdir()
        (repo / "pkg" / "a.py").write_text("print(1)\n")
        (repo / "run.sh").write_text("#!/bin/sh\n")
        os.chmod(repo / "run.sh", 0o755)
        os.symlink("pkg/a.py", repo / "link.py")
    repo, sha = repo_with(tmp_path, populate)
    dest = tmp_path / "out"
    export_tree(repo, sha, dest)
    assert (dest / "pkg" / "a.py").read_text() == "print(1)\n"
    assert os.stat(dest / "run.sh").st_mode & stat.S_IXUSR
    assert os.readlink(dest / "link.py") == "pkg/a.py"
    assert not (dest / ".git").exists()


@pytest.mark.parametrize("target", ["/etc/passwd", "../../outside"])
def test_export_tree_refuses_a_link_out_of_the_destination(tmp_path, target):
    def populate(repo):
        (repo / "ok.txt").write_text("ok\n")
        os.symlink(target, repo / "escape")
    repo, sha = repo_with(tmp_path, populate)
    with pytest.raises(GitFailed) as info:
        export_tree(repo, sha, tmp_path / "out")
    assert info.value.unsafe and "unsafe" in info.value.message
    assert not (tmp_path / "out" / "escape").is_symlink()


def test_export_tree_of_a_missing_commit_fails_naming_git(tmp_path):
    repo, _ = repo_with(tmp_path, lambda r: (r / "f").write_text("x"))
    with pytest.raises(GitFailed) as info:
        export_tree(repo, "0" * 40, tmp_path / "out")
    assert "git ls-tree failed" in info.value.message and not info.value.unsafe


def test_run_git_names_the_subcommand_and_keeps_the_environment_minimal(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEP_TEST_LEAK", "secret-value")
    env = git_env()
    assert "SWEEP_TEST_LEAK" not in env and env["GIT_TERMINAL_PROMPT"] == "0" and env["LC_ALL"] == "C"
    with pytest.raises(GitFailed) as info:
        run_git(["-c", "core.quotepath=off", "log", "-1"], repo=tmp_path)     # not a repository
    assert info.value.message.startswith("git log failed:")
    repo, sha = repo_with(tmp_path, lambda r: (r / "f").write_text("x"))
    assert run_git(["rev-parse", "HEAD"], repo=repo).decode().strip() == sha


# ---- the candidate's git configuration never acts on the host ---------------------------------

def test_intake_export_diff_and_bundle_run_none_of_the_candidates_programs(tmp_path, monkeypatch):
    """A candidate whose .git/config, .gitattributes, attributes file, submodule and the operator's
    global and system config all name programs: intake into the private repository, the export of
    the base, the author's diff and the oracle's bundle run none of them, read no submodule, and
    the export is the commit's blobs byte for byte (export-subst not applied)."""
    from sweep.controller.intake import take_in
    from sweep.controller.phases import _pr_diff
    from sweep.harbor.pr_bundle import build_bundle_from_git
    from sweep.models.evidence import SourceEvidence
    from sweep.models.plan import Candidate, FrozenCandidate
    from tests.gitrepos import VERSION_TEXT, hostile_git_home, make_hostile_git_pr
    marks = tmp_path / "marks"
    src = make_hostile_git_pr(tmp_path / "cand", marks, tmp_path / "canary-repo")
    for key, value in hostile_git_home(tmp_path / "op", marks).items():
        monkeypatch.setenv(key, value)
    # the knobs are live: the candidate's own git runs them (`git archive`, the old export; a diff)
    for argv in (["archive", "--format=tar", src["base"]], ["diff", f"{src['base']}~1", src["base"]]):
        subprocess.run(["git", "-C", src["repo"], *argv], capture_output=True)
    assert {"filter-process", "fsmonitor"} <= {p.name for p in marks.iterdir()}, list(marks.iterdir())
    for mark in marks.iterdir():
        mark.unlink()
    rdir = tmp_path / "camp" / "runs" / "pr"
    rdir.mkdir(parents=True)
    cand = Candidate(repo=src["repo"], base=src["base"], head=src["head"])
    fc = FrozenCandidate(run_id="pr", panel_index=0, pr_key=cand.pr_key(), candidate=cand)
    taken = take_in(rdir, fc)
    private = Path(taken.repo)
    assert private == rdir / "source" / "repo" and (private / "HEAD").is_file()
    assert not (private / "hooks").exists() and not (private / "info").exists()
    assert "filter" not in (private / "config").read_text()
    out = tmp_path / "export"
    export_tree(private, taken.base, out)
    assert (out / "version.txt").read_text() == VERSION_TEXT                      # no export-subst
    assert (out / ".gitattributes").is_file() and (out / "vendor").is_dir() and not any((out / "vendor").iterdir())
    for rel in ("mathx.py", ".gitattributes", "version.txt"):
        blob = run_git(["cat-file", "blob", f"{taken.base}:{rel}"], repo=private)
        assert (out / rel).read_bytes() == blob, rel
    diff = _pr_diff(SourceEvidence.model_validate(taken.model_dump()), 200_000)
    assert "mathx.py" in diff
    build_bundle_from_git({"kind": "git", "repo": str(private), "base": taken.base, "head": taken.head,
                           "title": "t", "body": "", "test_command": src["test_command"]}, tmp_path / "task")
    assert (tmp_path / "task" / "environment" / "repo" / "version.txt").read_text() == VERSION_TEXT
    assert sorted(p.name for p in marks.iterdir()) == []
    assert not list(tmp_path.rglob("secret.txt"))[1:]            # only the canary repository's own


def test_export_tree_keeps_zeros_as_holes_and_refuses_a_tree_over_the_bound(tmp_path):
    def populate(repo):
        with open(repo / "zeros.bin", "wb") as fh:
            fh.truncate(8 << 20)
        (repo / "small.txt").write_text("x\n")
    repo, sha = repo_with(tmp_path, populate)
    out = tmp_path / "out"
    assert export_tree(repo, sha, out) == (8 << 20) + 2
    st = os.stat(out / "zeros.bin")
    assert st.st_size == 8 << 20 and st.st_blocks * 512 < 1 << 20
    with pytest.raises(GitFailed) as info:
        export_tree(repo, sha, tmp_path / "out2", max_bytes=1 << 20)
    assert info.value.unsafe and "more than the workspace bound" in info.value.message
    assert not (tmp_path / "out2").exists()


def test_export_tree_writes_nothing_through_a_link_the_tree_itself_plants(tmp_path):
    """A tree holding `d` as a link to a directory outside and `d/x` as a file (two entries a
    string test alone would pass): the file open relative to the directory descriptor of `d`
    fails, nothing is written outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    repo, _ = repo_with(tmp_path, lambda r: (r / "f").write_text("x"))
    blob = run_git(["hash-object", "-w", "--stdin"], repo=repo, input=b"pwned\n").decode().strip()
    link = run_git(["hash-object", "-w", "--stdin"], repo=repo, input=b"../outside").decode().strip()
    sub = run_git(["mktree"], repo=repo, input=f"100644 blob {blob}\tx\n".encode()).decode().strip()
    # git refuses to build this tree from an index; mktree with --missing writes it as given
    tree = run_git(["mktree"], repo=repo, input=f"120000 blob {link}\td\n040000 tree {sub}\td\n".encode()).decode().strip()
    commit = run_git(["commit-tree", "-m", "x", tree], repo=repo, env={
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"})
    with pytest.raises(GitFailed) as info:
        export_tree(repo, commit.decode().strip(), tmp_path / "out")
    assert info.value.unsafe
    assert list(outside.iterdir()) == []
