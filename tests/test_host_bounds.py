"""Host-side work stays bounded whatever the PR holds (real git, real files): the author's diff is a
size summary plus the first `limits.prompt_diff_kb` of the diff, a 400 MB text file in the PR is
never diffed, a 2 GiB blob in the base is refused before any byte is exported, and 100,000 changed
files never meet a command line. Big objects are made with `git hash-object --stdin` from a
generator (zeros and repeated lines compress to a few MB), so the test stays quick."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweep.controller.phases import _pr_diff
from sweep.git import GitFailed, export_tree, run_git
from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.models.evidence import SourceEvidence

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@e.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], env=ENV, check=True, capture_output=True,
                          input=input).stdout.decode().strip()


def big_blob(repo: Path, size: int, line: bytes) -> str:
    """A blob of `size` bytes of `line` repeated, streamed into `git hash-object -w --stdin`."""
    proc = subprocess.Popen(["git", "-C", str(repo), "hash-object", "-w", "--stdin"], env=ENV,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    chunk = line * ((1 << 20) // len(line))
    left = size
    while left > 0:
        piece = chunk[:left]
        proc.stdin.write(piece)
        left -= len(piece)
    proc.stdin.close()
    sha = proc.stdout.read().decode().strip()
    assert proc.wait() == 0
    return sha


def commit_tree(repo: Path, entries: dict[str, tuple[str, str]], parent: str | None, message: str) -> str:
    """A commit whose tree is `entries` (path -> (mode, blob sha)), built with a temporary index fed
    on stdin (no checkout: the big blobs never land in a work tree)."""
    index = repo / ".git" / f"tmp-index-{message}"
    env = {**ENV, "GIT_INDEX_FILE": str(index)}
    info = b"".join(f"{mode} {sha}\t{path}".encode() + b"\0" for path, (mode, sha) in entries.items())
    subprocess.run(["git", "-C", str(repo), "update-index", "-z", "--add", "--index-info"], env=env, check=True,
                   input=info, capture_output=True)
    tree = subprocess.run(["git", "-C", str(repo), "write-tree"], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
    index.unlink()
    return git(repo, "commit-tree", "-m", message, *(["-p", parent] if parent else []), tree)


@pytest.fixture
def repo(tmp_path) -> Path:
    r = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(r)], env=ENV, check=True)
    return r


def blob(repo: Path, text: str) -> str:
    return git(repo, "hash-object", "-w", "--stdin", input=text.encode())


def source(repo: Path, base: str, head: str) -> SourceEvidence:
    return SourceEvidence.model_validate({"kind": "git", "url": None, "repo": str(repo), "base": base, "head": head,
                                          "title": "t", "body": "", "changed_files": [], "evidence_sha256": "x",
                                          "pr_key": "k", "frozen_at": 0.0})


PEAK = """
import json, resource, sys
from sweep.controller.phases import _pr_diff
from sweep.models.evidence import SourceEvidence
text = _pr_diff(SourceEvidence.model_validate_json(sys.argv[1]), int(sys.argv[2]))
print(json.dumps({"text": text, "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def _pr_diff_measured(src: SourceEvidence, limit: int) -> tuple[str, int]:
    """_pr_diff in a fresh process: (its text, the peak RSS in KiB of the git processes it ran).
    RUSAGE_CHILDREN is a per-process high-water mark, so in this (long-lived, pytest-xdist) process
    it would carry whatever child an earlier test ran."""
    out = subprocess.run([sys.executable, "-c", PEAK, src.model_dump_json(), str(limit)], capture_output=True,
                         text=True, check=True, timeout=300, cwd=Path(__file__).resolve().parents[1]).stdout
    got = json.loads(out)
    return got["text"], got["peak_kib"]


def test_a_400_mb_text_file_is_summarised_not_diffed_and_the_diff_is_cut_at_the_plan_limit(repo):
    code = blob(repo, "def f():\n    return 1\n")
    base = commit_tree(repo, {"mathx.py": ("100644", code)}, None, "base")
    huge = big_blob(repo, 400 << 20, b"a line of text that repeats for four hundred megabytes\n")
    fixed = blob(repo, "def f():\n    return 2\n" + "# padding line\n" * 400)
    head = commit_tree(repo, {"mathx.py": ("100644", fixed), "big.txt": ("100644", huge)}, base, "head")
    text, peak_kib = _pr_diff_measured(source(repo, base, head), 2048)
    assert f"A big.txt (- -> {400 << 20} B) [not in the diff: too big]" in text
    assert "M mathx.py" in text and "+    return 2" in text
    assert "[diff cut at 2048 bytes]" in text and len(text.encode()) < 4096
    assert "a line of text" not in text
    assert 0 < peak_kib < 512 << 10, f"a host git process reached {peak_kib} KiB"
    # the plan's limit is what cuts: a larger one shows the whole small diff
    whole = _pr_diff(source(repo, base, head), 64 << 10)
    assert "[diff cut" not in whole and whole.count("+# padding line") == 400


def test_a_2_gib_blob_in_the_base_is_refused_before_any_byte_is_written(repo, tmp_path):
    zeros = big_blob(repo, 2 << 30, b"\0" * 4096)
    base = commit_tree(repo, {"data.bin": ("100644", zeros), "a.txt": ("100644", blob(repo, "a\n"))}, None, "base")
    dest = tmp_path / "out"
    with pytest.raises(GitFailed) as info:
        export_tree(repo, base, dest, max_bytes=300 << 20)
    assert info.value.unsafe and f"holds {(2 << 30) + 2} bytes" in info.value.message
    assert not dest.exists()
    # under a bound that holds it, it is written sparse: 2 GiB apparent, almost nothing on disk
    assert export_tree(repo, base, dest, max_bytes=3 << 30) == (2 << 30) + 2
    st = os.stat(dest / "data.bin")
    assert st.st_size == 2 << 30 and st.st_blocks * 512 < 16 << 20


def test_100000_files_in_a_pr_become_a_bundle_without_argv(repo, tmp_path):
    one = blob(repo, "x = 1\n")
    test_base = blob(repo, "import unittest\n")
    test_head = blob(repo, "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n        pass\n")
    base = commit_tree(repo, {"tests/test_x.py": ("100644", test_base), "README": ("100644", one)}, None, "base")
    files = {f"pkg/m{i // 1000:03d}/f{i:06d}.py": ("100644", one) for i in range(100_000)}
    head = commit_tree(repo, {**files, "tests/test_x.py": ("100644", test_head), "README": ("100644", one)}, base,
                       "head")
    out = tmp_path / "task"
    report = build_bundle_from_git({"kind": "git", "repo": str(repo), "base": base, "head": head, "title": "t",
                                    "body": "", "test_command": "python3 -m unittest -q"}, out)
    assert len(report.solution_files) == 100_000 and report.test_files == ["tests/test_x.py"]
    patch = (out / "solution" / "solution.patch").read_bytes()
    assert patch.count(b"diff --git ") == 100_000 and b"tests/test_x.py" not in patch
    assert (out / "tests" / "files" / "tests" / "test_x.py").read_bytes() == \
        run_git(["cat-file", "blob", test_head], repo=repo)
    text = _pr_diff(source(repo, base, head), 4096)
    assert "... and 99801 more files" in text
