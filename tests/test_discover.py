"""`sweep discover` against a FAKE GitHub REST API (tests/fakes/github.py), through the real CLI.

The fake serves GitHub's listing of closed pull requests with its pagination (`page`, `per_page`,
`Link`), each PR's changed files, rate-limit answers (403 with `X-RateLimit-Remaining: 0` and a
reset time), injected 5xx answers and malformed items; sweep runs as a real process over HTTP.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from sweep.discover import Rules, is_test_file, judge, read_skip_list
from sweep.models.plan import Candidate
from tests.campaigns import REPO, sweep
from tests.fakes.github import FakeGitHub

SRC_AND_TEST = ["src/mathx.py", "tests/test_mathx.py"]


def _panel(gh: FakeGitHub, n: int, *, owner: str = "acme", repo: str = "lib") -> set[int]:
    """n pull requests, every fifth of them a good candidate; returns the good numbers."""
    good = set()
    for number in range(1, n + 1):
        kind = number % 5
        if kind == 0:
            gh.list_pull(owner, repo, number, files=SRC_AND_TEST, title=f"Fix bug {number}")
            good.add(number)
        elif kind == 1:
            gh.list_pull(owner, repo, number, files=SRC_AND_TEST, merged=False)      # closed, not merged
        elif kind == 2:
            gh.list_pull(owner, repo, number, files=["tests/test_mathx.py"])         # tests only
        elif kind == 3:
            gh.list_pull(owner, repo, number, files=["src/mathx.py", "README.md"])   # no test change
        else:
            gh.list_pull(owner, repo, number, files=["docs/index.md", "tests/data.txt"])
    return good


def _urls(out: Path) -> list[str]:
    return [c["url"] for c in tomllib.loads(out.read_text())["candidates"]]


def _numbers(out: Path) -> set[int]:
    return {int(u.rsplit("/", 1)[1]) for u in _urls(out)}


def _env(gh: FakeGitHub) -> dict:
    return {"SWEEP_GITHUB_API": gh.api_url, "GITHUB_TOKEN": "", "SWEEP_GITHUB_TOKEN_FILE": ""}


def test_pages_through_merged_prs_with_code_and_test_changes(tmp_path):
    with FakeGitHub() as gh:
        good = _panel(gh, 230)                          # three pages of 100
        out = tmp_path / "cands.toml"
        r = sweep("discover", "acme/lib", "--out", str(out), env=_env(gh))
        assert _numbers(out) == good
        assert len(_urls(out)) == len(good)             # each once
        state = json.loads((tmp_path / "cands.toml.discover.json").read_text())
        assert state["done"] and state["seen"] == 230 and state["kept"] == len(good)
        assert state["rejected"] == {"not_merged": 46, "no_test_change": 46, "no_source_change": 92}
        pages = gh.requests_for("/pulls?")
        assert [p.path.rsplit("page=", 1)[1] for p in pages] == ["1", "2", "3"]
        # files are asked only for merged pull requests
        assert len(gh.requests_for("/files")) == 230 - 46
        assert "page 3: 30 pull requests" in r.stdout and "next: add the [[candidates]]" in r.stdout
    # the file is a plan fragment: every entry is a valid candidate with the PR's title
    data = tomllib.loads(out.read_text())
    for entry in data["candidates"]:
        Candidate.model_validate(entry)
    assert data["candidates"][0]["title"].startswith("Fix bug ")


def test_token_from_a_file_goes_in_the_header_only(tmp_path):
    token = tmp_path / "token"
    token.write_text("ghp_discover_canary\n")
    token.chmod(0o600)
    with FakeGitHub() as gh:
        _panel(gh, 5)
        out = tmp_path / "c.toml"
        sweep("discover", "acme/lib", "--out", str(out), "--token-file", str(token), env=_env(gh))
        assert gh.requests and all(r.headers.get("Authorization") == "Bearer ghp_discover_canary" for r in gh.requests)
        assert all("ghp_discover_canary" not in r.path for r in gh.requests)
    assert "ghp_discover_canary" not in out.read_text()
    assert "ghp_discover_canary" not in (tmp_path / "c.toml.discover.json").read_text()
    token.chmod(0o644)
    r = sweep("discover", "acme/lib", "--out", str(tmp_path / "d.toml"), "--token-file", str(token),
              env={"SWEEP_GITHUB_API": "http://127.0.0.1:9"}, check=False)
    assert r.returncode == 2 and "chmod 600" in r.stderr and "Traceback" not in r.stderr


def test_rules_size_paths_languages_and_linked_issue(tmp_path):
    with FakeGitHub() as gh:
        gh.list_pull("o", "r", 1, files=[("src/a.py", 10, 5), ("tests/test_a.py", 3, 0)], body="Fixes #12")
        gh.list_pull("o", "r", 2, files=[("src/a.py", 900, 5), ("tests/test_a.py", 3, 0)], body="closes #3")
        gh.list_pull("o", "r", 3, files=[("pkg/b.go", 2, 2), ("pkg/b_test.go", 4, 0)], body="resolves o/r#9")
        gh.list_pull("o", "r", 4, files=[("web/c.js", 2, 2), ("web/c.test.js", 4, 0)], body="no link here")
        gh.list_pull("o", "r", 5, files=[("vendor/x.py", 1, 1), ("tests/test_x.py", 1, 0)], body="fix #1")
        gh.list_pull("o", "r", 6, files=[("src/main/java/A.java", 1, 1), ("src/test/java/ATest.java", 1, 0)],
                     body="Fixes #4", base_ref="release")
        rules = tmp_path / "rules.toml"
        rules.write_text('[discover]\nmax_changed_lines = 100\nexclude = ["vendor/*"]\nlinked_issue = true\n')
        out = tmp_path / "c.toml"
        sweep("discover", "o/r", "--out", str(out), "--rules", str(rules), env=_env(gh))
        assert _numbers(out) == {1, 3, 6}
        st = json.loads((tmp_path / "c.toml.discover.json").read_text())
        assert st["rejected"] == {"max_changed_lines": 1, "linked_issue": 1, "no_source_change": 1}
        out2 = tmp_path / "c2.toml"
        sweep("discover", "o/r", "--out", str(out2), "--rules", str(rules), "--language", "go",
              "--language", "java", "--base-branch", "main", env=_env(gh))
        assert _numbers(out2) == {3}


def test_a_bad_rules_file_names_the_field(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[discover]\nmax_lines = 3\n')
    r = sweep("discover", "o/r", "--out", str(tmp_path / "c.toml"), "--rules", str(rules), check=False)
    assert r.returncode == 2 and "discover.max_lines" in r.stderr and str(rules) in r.stderr
    rules.write_text('[discover]\nlanguages = ["cobol"]\n')
    r = sweep("discover", "o/r", "--out", str(tmp_path / "c.toml"), "--rules", str(rules), check=False)
    assert r.returncode == 2 and "cobol" in r.stderr and "discover.languages" in r.stderr
    r = sweep("discover", "not a repo", "--out", str(tmp_path / "c.toml"), check=False)
    assert r.returncode == 2 and "OWNER/REPO" in r.stderr
    assert not (tmp_path / "c.toml").exists()


def test_rate_limit_is_waited_out_until_the_reset(tmp_path):
    with FakeGitHub() as gh:
        good = _panel(gh, 40)
        gh.rate_limit(after=10, reset_in_s=2.0)
        out = tmp_path / "c.toml"
        started = time.monotonic()
        r = sweep("discover", "acme/lib", "--out", str(out), env=_env(gh))
        assert gh.rate_limited >= 1
        assert time.monotonic() - started >= 1.0         # it waited for the reset instead of failing
        assert "rate limited (HTTP 403): waiting" in r.stdout
        assert _numbers(out) == good


def test_rate_limit_longer_than_max_wait_stops_resumably(tmp_path):
    with FakeGitHub() as gh:
        good = _panel(gh, 150)
        out = tmp_path / "c.toml"
        gh.rate_limit(after=101, reset_in_s=600)        # page 1 and its files pass, then the limit
        r = sweep("discover", "acme/lib", "--out", str(out), "--max-wait", "1", env=_env(gh), check=False)
        assert r.returncode == 3 and "--max-wait" in r.stderr and "resume" in r.stderr
        assert "Traceback" not in r.stderr
        gh.rate_limit(after=0, reset_in_s=0)             # the limit has reset
        first = _numbers(out) if out.exists() else set()
        sweep("discover", "acme/lib", "--out", str(out), env=_env(gh))
        assert first <= _numbers(out) and _numbers(out) == good
        assert len(_urls(out)) == len(good)


def test_5xx_answers_are_retried_with_backoff(tmp_path):
    with FakeGitHub() as gh:
        good = _panel(gh, 20)
        gh.fail_next("/pulls?", 502, times=2)
        gh.fail_next("/pulls/5/files", 503, times=1)
        out = tmp_path / "c.toml"
        r = sweep("discover", "acme/lib", "--out", str(out), env=_env(gh))
        assert "GitHub API HTTP 502: waiting 1 s" in r.stdout and "waiting 2 s" in r.stdout
        assert "GitHub API HTTP 503: waiting 1 s" in r.stdout
        assert _numbers(out) == good
        assert len(gh.requests_for("/pulls?")) == 3


def test_malformed_items_are_counted_and_left_out(tmp_path):
    with FakeGitHub() as gh:
        gh.list_pull("o", "r", 7, files=SRC_AND_TEST)
        gh.list_pull("o", "r", 8, files=[{"status": "modified"}, "tests/test_mathx.py"])   # a file with no name
        gh.listed[("o", "r")].extend([{"number": "nine"}, ["not", "a", "pull"], {"title": "no number"}])
        out = tmp_path / "c.toml"
        sweep("discover", "o/r", "--out", str(out), env=_env(gh))
        assert _numbers(out) == {7}
        assert json.loads((tmp_path / "c.toml.discover.json").read_text())["rejected"] == {"malformed": 4}


def test_unknown_repository_is_one_clear_line(tmp_path):
    with FakeGitHub() as gh:
        r = sweep("discover", "nobody/nothing", "--out", str(tmp_path / "c.toml"), env=_env(gh), check=False)
        assert r.returncode == 2 and "HTTP 404" in r.stderr and "Traceback" not in r.stderr


def test_resume_goes_on_from_the_next_page_and_refuses_other_rules(tmp_path):
    with FakeGitHub() as gh:
        good = _panel(gh, 150)
        out = tmp_path / "c.toml"
        r = sweep("discover", "acme/lib", "--out", str(out), "--max-pages", "1", env=_env(gh))
        assert "next: run the same command again to go on from page 2" in r.stdout
        assert _numbers(out) == {n for n in good if n > 50}
        sweep("discover", "acme/lib", "--out", str(out), env=_env(gh))
        assert _numbers(out) == good and len(_urls(out)) == len(good)
        assert [p.path.rsplit("page=", 1)[1] for p in gh.requests_for("/pulls?")] == ["1", "2"]
        r = sweep("discover", "acme/lib", "--out", str(out), "--max-files", "3", env=_env(gh), check=False)
        assert r.returncode == 2 and "other rules" in r.stderr


def test_skip_list_and_limit(tmp_path):
    with FakeGitHub() as gh:
        good = sorted(_panel(gh, 60), reverse=True)
        skip = tmp_path / "skip.txt"
        skip.write_text(f"# seen before\nhttps://github.com/acme/lib/pull/{good[0]}\nacme/lib#{good[1]}\n"
                        f"{good[2]}\nother/repo#{good[3]}\n")
        out = tmp_path / "c.toml"
        sweep("discover", "acme/lib", "--out", str(out), "--skip", str(skip), "--limit", "4", env=_env(gh))
        assert _numbers(out) == set(good[3:7])
        assert read_skip_list(skip, "acme", "lib") == set(good[:3])


def test_killed_mid_run_resumes_without_duplicates(tmp_path):
    """kill -9 while it waits out a rate limit after page 1: the next run ends with each PR once."""
    with FakeGitHub() as gh:
        good = _panel(gh, 150)
        gh.rate_limit(after=101 + 10, reset_in_s=600)
        out = tmp_path / "c.toml"
        state = tmp_path / "c.toml.discover.json"
        proc = subprocess.Popen([sys.executable, "-m", "sweep", "discover", "acme/lib", "--out", str(out)],
                                env={**os.environ, **_env(gh)}, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and gh.rate_limited == 0:
                time.sleep(0.05)
            assert gh.rate_limited >= 1 and state.exists()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert json.loads(state.read_text())["next_page"] == 2
        gh.rate_limit(after=0, reset_in_s=0)
        sweep("discover", "acme/lib", "--out", str(out), env=_env(gh))
        assert _numbers(out) == good and len(_urls(out)) == len(good)


@pytest.mark.parametrize("path,expected", [
    ("tests/test_a.py", True), ("src/a_test.go", True), ("web/a.test.ts", True), ("web/__tests__/x.js", True),
    ("src/test/java/org/A.java", True), ("src/main/java/org/ATest.java", True), ("test_util.py", True),
    ("src/a.py", False), ("contest.py", False), ("src/latest.go", False), ("src/testing_helpers.rs", False),
])
def test_test_file_classification(path, expected):
    assert is_test_file(path) is expected


def test_judge_needs_both_kinds_of_change():
    pull = {"number": 1, "body": "", "base": {"ref": "main"}}
    files = [{"filename": "a.py"}, {"filename": "tests/test_a.py"}]
    assert judge(pull, files, Rules()).keep
    assert judge(pull, files[1:], Rules()).why == "no_source_change"
    assert judge(pull, files[:1], Rules()).why == "no_test_change"
    assert judge(pull, files, Rules(include=("lib/*",))).why == "include"
