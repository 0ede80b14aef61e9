"""Clean errors where a file, a directory or garbage is not what sweep expects (issue 13, item 5).

Real CLI in subprocesses, real files; no traceback may reach the user for any of these.
"""
import json
import os
import stat
import subprocess
import sys
import time

import pytest

from runstate import load_record, run_dir
from runstate.models import OutageStamp, RunState
from tests.campaigns import payload_plan, status_json, sweep, write_plan


@pytest.fixture
def campaign(tmp_path):
    def make(plan: dict, name: str = "camp"):
        path = write_plan(tmp_path / f"{name}.json", plan)
        d = tmp_path / name
        sweep("init", str(path), "--campaign", str(d))
        return d
    return make


VERBS_WITH_CAMPAIGN = [
    ["tick"], ["status"], ["status", "--json"], ["show", "pr-000"], ["drain"], ["undrain"],
    ["runtime", "show"], ["runtime", "freeze"], ["scrontab", "--print"], ["retry", "pr-000"],
    ["abort", "pr-000"], ["doctor"], ["export", "/var/tmp/sweep-never-written"], ["report"], ["run"],
]


@pytest.mark.parametrize("argv", VERBS_WITH_CAMPAIGN, ids=lambda a: " ".join(a))
def test_every_verb_given_a_file_as_campaign_says_so_in_one_line(tmp_path, argv):
    f = tmp_path / "not-a-campaign.txt"
    f.write_text("hello\n")
    r = sweep(*argv, "--campaign", str(f), check=False)
    if r.returncode == 2 and "no such option" in r.stderr.lower():
        pytest.skip(f"{argv[0]} takes no --campaign")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(f) in r.stderr and "not a campaign directory" in r.stderr


@pytest.mark.parametrize("argv", VERBS_WITH_CAMPAIGN, ids=lambda a: " ".join(a))
def test_every_verb_given_a_directory_that_is_no_campaign_says_so_in_one_line(tmp_path, argv):
    d = tmp_path / "empty"
    d.mkdir()
    r = sweep(*argv, "--campaign", str(d), check=False)
    if r.returncode == 2 and "no such option" in r.stderr.lower():
        pytest.skip(f"{argv[0]} takes no --campaign")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not a sweep campaign" in r.stderr


def test_init_with_a_file_as_campaign_says_so_in_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    plan = write_plan(tmp_path / "p.json", payload_plan(1))
    r = sweep("init", str(plan), "--campaign", str(f), check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr and str(f) in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_directory_where_the_drain_marker_should_be_is_reported_never_a_traceback(campaign):
    d = campaign(payload_plan(2))
    (d / "drain-request.json").mkdir()
    for verb in ("drain", "undrain"):
        r = sweep(verb, "--campaign", str(d), check=False)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        assert "drain-request.json is a directory" in r.stderr and "rmdir" in r.stderr
    out = sweep("tick", "--campaign", str(d)).stdout          # a directory there counts as draining
    assert "draining" in out
    assert status_json(d)["counts"]["active"] == 0
    text = sweep("status", "--campaign", str(d)).stdout
    assert "draining" in text
    (d / "drain-request.json").rmdir()
    sweep("tick", "--campaign", str(d))
    assert [a["kind"] for a in json.loads((d / "tick.json").read_text())["actions"]].count("admit") == 2


def test_garbage_in_marker_and_tick_files_is_reported_never_a_traceback(campaign):
    d = campaign(payload_plan(2))
    (d / "drain-request.json").write_bytes(b"\x00not json")
    (d / "outage-author.json").write_bytes(b"{")
    (d / "tick.json").write_bytes(b"garbage")
    (d / "lane-backoff.json").write_bytes(b"[1,2")
    (d / "ghosts.json").mkdir()
    r = sweep("tick", "--campaign", str(d), check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    for argv in (["status"], ["status", "--json"], ["undrain"]):
        r = sweep(*argv, "--campaign", str(d), check=False)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (argv, r.stderr)


def test_a_symlinked_run_directory_is_reported_alike_by_tick_status_and_show(campaign, tmp_path):
    d = campaign(payload_plan(2))
    real = tmp_path / "elsewhere" / "pr-001"
    real.parent.mkdir()
    os.rename(run_dir(d, "pr-001"), real)
    os.symlink(real, d / "runs" / "pr-001")
    sweep("tick", "--campaign", str(d))
    tick = json.loads((d / "tick.json").read_text())
    assert any(c.startswith("pr-001: ") and "symbolic link" in c for c in tick["corrupt"]), tick["corrupt"]
    st = status_json(d)
    assert "symbolic link" in st["corrupt"]["pr-001"]
    assert "symbolic link" in sweep("status", "--campaign", str(d)).stdout
    r = sweep("show", "pr-001", "--campaign", str(d), check=False)
    assert r.returncode == 2 and "symbolic link" in r.stderr and "Traceback" not in r.stderr
    assert load_record(real).value.state is RunState.queued      # nothing was done through the link


def test_an_outage_stamp_cooldown_is_clamped_to_the_documented_maximum(campaign):
    d = campaign(payload_plan(1))
    now = time.time()
    stamp = OutageStamp(role="author", kind="outage", stamped_at=now, cooldown_s=1e12)
    assert stamp.until == now + 4 * 3600
    assert OutageStamp(role="author", kind="throttle", stamped_at=now, cooldown_s=1e12).until == now + 3600
    assert OutageStamp(role="author", kind="throttle", stamped_at=now, cooldown_s=-5).until == now
    (d / "outage-author.json").write_text(stamp.model_dump_json())
    st = status_json(d)
    cd = next(c for c in st["cooldowns"] if c["role"] == "author")
    assert 4 * 3600 - 60 < cd["left_s"] <= 4 * 3600


def _modes(root):
    bad = []
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(base, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                continue
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode) and mode != 0o700:
                bad.append(f"{p}: dir {oct(mode)}")
            elif not stat.S_ISDIR(st.st_mode) and mode not in (0o600, 0o700) and not (
                    mode == 0o400 and f"{os.sep}source{os.sep}repo{os.sep}" in p):   # git's read-only objects
                bad.append(f"{p}: file {oct(mode)}")
    return bad


def test_permissions_after_the_demo_are_exactly_as_docs_state_md_says(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sweep", "demo", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    campaign_dir = tmp_path / "demo" / "campaign"
    assert campaign_dir.is_dir()
    assert _modes(campaign_dir) == []


@pytest.mark.parametrize("change, field, words", [
    ({"repo": "/var/tmp/sweep-no-such-repo"}, "candidates.1.repo", "does not exist"),
    ({"head": "no-such-branch"}, "candidates.1.head", "'no-such-branch' is not a commit"),
    ({"base": "deadbeef"}, "candidates.1.base", "'deadbeef' is not a commit"),
])
def test_init_checks_local_repositories_and_refs_and_names_them(tmp_path, change, field, words):
    plan = payload_plan(3)
    plan["candidates"][1].update(change)
    r = sweep("init", str(write_plan(tmp_path / "p.json", plan)), "--campaign", str(tmp_path / "c"), check=False)
    assert r.returncode == 2 and field in r.stderr and words in r.stderr, r.stderr
    assert not (tmp_path / "c").exists()


def test_init_refuses_a_directory_that_is_not_a_git_repository(tmp_path):
    plan = payload_plan(1)
    (tmp_path / "plain").mkdir()
    plan["candidates"][0]["repo"] = str(tmp_path / "plain")
    r = sweep("init", str(write_plan(tmp_path / "p.json", plan)), "--campaign", str(tmp_path / "c"), check=False)
    assert r.returncode == 2 and "not a git repository" in r.stderr and "candidates.0.repo" in r.stderr, r.stderr


def _events(d, run_id):
    out = []
    for line in (run_dir(d, run_id) / "events.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def test_an_unexpected_exception_in_a_phase_is_written_on_the_run(tmp_path):
    """roles/author.toml replaced by a directory: reading it fails inside the author phase, a
    failure no phase expects. It must reach the run (type, message, phase), not vanish with the job."""
    from sweep.harbor.samples import make_pr_repo
    from tests.fakes.runs import candidate, local_plan
    src = make_pr_repo(tmp_path / "repos", "verified")
    plan = local_plan([candidate("pr-0", src)], max_attempts=2)
    d = tmp_path / "c"
    sweep("init", str(write_plan(tmp_path / "p.json", plan)), "--campaign", str(d))
    (d / "roles" / "author.toml").unlink()
    (d / "roles" / "author.toml").mkdir()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        sweep("tick", "--campaign", str(d))
        errors = [e for e in _events(d, "pr-0") if e["kind"] == "phase_error"]
        if errors:
            break
        time.sleep(0.5)
    assert errors, _events(d, "pr-0")
    e = errors[0]
    assert e["phase"] == "author" and "Is a directory" in e["detail"] and "author.toml" in e["detail"], e
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rec = load_record(run_dir(d, "pr-0")).value
        if rec.state is not RunState.active:
            break
        time.sleep(0.3)
    # written on the run: as the failed attempt's error, or in the ending once attempts ran out
    said = [rec.last_error or ""] + [e.get("detail") or "" for e in _events(d, "pr-0")
                                     if e["kind"] in ("attempt_failed", "ended")]
    assert any("in phase author" in t and "Is a directory" in t for t in said), (rec, said)
    assert rec.attempts >= 1 or rec.reason == "max_attempted"


def test_a_tree_git_cannot_unpack_safely_ends_the_run_without_retrying(tmp_path):
    """A base tree with a link pointing out of the tree: the same on every attempt, so a
    permanent refusal (blocked: intake_failed at once), never retried as transient."""
    from sweep.harbor.samples import make_pr_repo
    from tests.fakes.runs import candidate, local_plan
    src = make_pr_repo(tmp_path / "repos", "verified")
    repo = src["repo"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e.invalid"}

    def git(*args):
        return subprocess.run(["git", "-C", repo, *args], env=env, check=True, capture_output=True,
                              text=True).stdout.strip()
    git("checkout", "-q", src["base"])
    os.symlink("/etc/passwd", os.path.join(repo, "evil"))
    git("add", "evil")
    git("commit", "-q", "-m", "a link out of the tree")
    base = git("rev-parse", "HEAD")
    git("cherry-pick", f"{src['base']}..{src['head']}")
    head = git("rev-parse", "HEAD")
    plan = local_plan([candidate("pr-0", {**src, "base": base, "head": head})], max_attempts=3)
    d = tmp_path / "c"
    sweep("init", str(write_plan(tmp_path / "p.json", plan)), "--campaign", str(d))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        sweep("tick", "--campaign", str(d))
        rec = load_record(run_dir(d, "pr-0")).value
        if rec.state is RunState.ended:
            break
        time.sleep(0.5)
    assert rec.state is RunState.ended and rec.reason == "intake_failed", rec
    assert rec.attempts == 0 and "unsafe" in (rec.last_error or str(_events(d, "pr-0")))
