"""sweep.git: one environment policy, and tree export through tarfile's data filter (real git)."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

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


def test_export_tree_of_a_missing_commit_fails_naming_git_archive(tmp_path):
    repo, _ = repo_with(tmp_path, lambda r: (r / "f").write_text("x"))
    with pytest.raises(GitFailed) as info:
        export_tree(repo, "0" * 40, tmp_path / "out")
    assert "git archive" in info.value.message and not info.value.unsafe


def test_run_git_names_the_subcommand_and_keeps_the_environment_minimal(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEP_TEST_LEAK", "secret-value")
    env = git_env()
    assert "SWEEP_TEST_LEAK" not in env and env["GIT_TERMINAL_PROMPT"] == "0" and env["LC_ALL"] == "C"
    with pytest.raises(GitFailed) as info:
        run_git(["-c", "core.quotepath=off", "log", "-1"], repo=tmp_path)     # not a repository
    assert info.value.message.startswith("git log failed:")
    repo, sha = repo_with(tmp_path, lambda r: (r / "f").write_text("x"))
    assert run_git(["rev-parse", "HEAD"], repo=repo).decode().strip() == sha
