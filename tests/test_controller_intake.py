"""Intake from GitHub pull request URLs, against a fake GitHub over real HTTP and real git.

tests/fakes/github.py answers the two REST endpoints sweep reads and serves a real bare
repository over git's dumb HTTP protocol (with refs/pull/N/head), so the controller's own
`git clone` and `git fetch` run for real. `SWEEP_GITHUB_API` points the controller at it and the
token comes from `SWEEP_GITHUB_TOKEN_FILE`, kept outside the campaign.
"""
import json
import secrets
import subprocess
from pathlib import Path

from runstate import run_dir
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.github import FakeGitHub, make_bare_pull_repo
from tests.fakes.runs import events, files_containing, local_plan, record

PR = "https://github.com/acme/mathx/pull/{}"


def test_github_pr_urls_are_taken_in_and_the_token_stays_in_a_header(tmp_path):
    src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
    bare = make_bare_pull_repo(Path(src["repo"]), tmp_path / "served" / "mathx.git", base=src["base"])
    token = "ghp_fake" + secrets.token_hex(16)
    token_file = tmp_path / "secret" / "github-token"
    token_file.parent.mkdir(mode=0o700)
    token_file.write_text(token + "\n")
    plan = local_plan([{"url": PR.format(7)}, {"url": PR.format(8)}], max_parallel=3, cpu_slots=3)
    d = tmp_path / "camp"
    with FakeGitHub() as gh:
        gh.add_pull("acme", "mathx", 7, bare_repo=bare, base=src["base"], head=src["head"],
                    title=src["title"], body=src["body"], files=["mathx.py", "tests/test_mathx.py"])
        env = {"SWEEP_GITHUB_API": gh.api_url, "SWEEP_GITHUB_TOKEN_FILE": str(token_file)}
        sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(d), env=env)
        st = tick_until_done(d, env=env, timeout=120)

    ended = {e["run_id"]: (e["outcome"], e["reason"]) for e in st["ended"]}
    assert ended == {"acme-mathx-7": ("verified", None), "acme-mathx-8": ("blocked", "intake_failed")}, st

    # PR 7: the REST answers and the fetched head are frozen into source.json
    rdir = run_dir(d, "acme-mathx-7")
    source = json.loads((rdir / "source.json").read_text())
    assert source["kind"] == "github" and source["url"] == PR.format(7)
    assert (source["base"], source["head"]) == (src["base"], src["head"])
    assert source["title"] == src["title"] and source["changed_files"] == ["mathx.py", "tests/test_mathx.py"]
    fetched = subprocess.run(["git", "-C", source["repo"], "rev-parse", "refs/sweep/pr-head"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert fetched == src["head"] and Path(source["repo"]) == rdir / "source" / "repo"
    assert gh.requests_for("/git/acme/mathx.git/info/refs")          # git really cloned over HTTP
    task_toml = (rdir / "task" / "task.toml").read_text()
    assert src["head"] in task_toml

    # the token reached the API as a Bearer header, never git, and no file of the campaign
    api = gh.requests_for("/api/repos/acme/mathx/pulls/")
    assert api and all(r.headers.get("Authorization") == f"Bearer {token}" for r in api)
    assert all("Authorization" not in r.headers for r in gh.requests_for("/git/"))
    assert files_containing(d, token.encode()) == []
    assert files_containing(d, src["head"].encode())                # (the scan does read the files)

    # PR 8 does not exist: a 404 ends the run, it is not retried
    rec8 = record(d, "acme-mathx-8")
    assert rec8.attempts == 0 and "HTTP 404" in (rec8.last_error or "") + json.dumps(events(d, "acme-mathx-8"))
    assert not (run_dir(d, "acme-mathx-8") / "source.json").exists()
    # a later campaign that names PR 7's run as prior_verified: PR 7 is a duplicate (the same GitHub
    # PR), ended by init without a tick, a job or a request to GitHub; PR 8 stays queued
    again = local_plan([{"url": PR.format(7)}, {"url": PR.format(8)}],
                       prior_verified=[str(run_dir(d, "acme-mathx-7"))])
    d2 = tmp_path / "camp2"
    asked = len(gh.requests)
    sweep("init", str(write_plan(tmp_path / "plan2.json", again)), "--campaign", str(d2), env=env)
    dup = record(d2, "acme-mathx-7")
    assert (dup.state.value, dup.outcome.value, dup.reason, dup.cause) == ("ended", "blocked", "duplicate", "duplicate")
    assert "acme-mathx-7" in (dup.cause_detail or "") and record(d2, "acme-mathx-8").state.value == "queued"
    assert len(gh.requests) == asked


def test_a_changed_file_entry_without_a_name_is_left_out_not_frozen_as_null(tmp_path):
    """GitHub's files list is untrusted input: an entry without a string filename used to be frozen
    as null, and that source.json then never read back as SourceEvidence."""
    from sweep.controller.intake import GithubSettings, load_source, take_in
    from sweep.models.plan import Candidate, FrozenCandidate
    src = make_pr_repo(tmp_path / "repos", "verified", name="mathx")
    bare = make_bare_pull_repo(Path(src["repo"]), tmp_path / "served" / "mathx.git", base=src["base"])
    rdir = tmp_path / "camp" / "runs" / "acme-mathx-7"
    rdir.mkdir(parents=True)
    cand = Candidate(url=PR.format(7))
    fc = FrozenCandidate(run_id="acme-mathx-7", panel_index=0, pr_key=cand.pr_key(), candidate=cand)
    with FakeGitHub() as gh:
        gh.add_pull("acme", "mathx", 7, bare_repo=bare, base=src["base"], head=src["head"], title=src["title"],
                    body=src["body"], files=["mathx.py", {"status": "removed"}, {"filename": 7}, "tests/test_mathx.py"])
        taken = take_in(rdir, fc, GithubSettings(api_url=gh.api_url))
    assert taken.changed_files == ["mathx.py", "tests/test_mathx.py"]
    assert load_source(rdir) == taken            # what was frozen reads back as the same evidence
