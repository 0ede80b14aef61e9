"""`prior_verified` names tasks verified before as evidence (issue 28, item 4): a previous campaign's
run directory or an exported task, re-validated by init (verified ending, source checksum, bundle
sha256 / Harbor digest); a candidate that is the same PR (same commits, whatever the refs are
called) is ended `blocked: duplicate` by init and never admitted; valid priors count toward
target_verified; a changed prior, a run that is not verified and a bare PR name are errors naming
the entry. One verified campaign and its export are made once for the whole file."""
from __future__ import annotations

import subprocess

import pytest

from sweep.harbor.samples import make_pr_repo, make_verified_pr
from tests.campaigns import status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, events, local_plan, record


@pytest.fixture(scope="module")
def prior(tmp_path_factory):
    """A campaign with one verified PR and one that is not, and the export of the verified one."""
    root = tmp_path_factory.mktemp("prior")
    good = make_verified_pr(root / "repos" / "good", "mathx")
    weak = make_pr_repo(root / "repos" / "weak", "no_tests")
    camp = root / "first"
    plan = local_plan([candidate("good", good), candidate("weak", weak)])
    sweep("init", str(write_plan(root / "first.json", plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=240)
    assert record(camp, "good").outcome.value == "verified"
    assert record(camp, "weak").outcome.value != "verified"
    sweep("export", str(root / "ds"), "--campaign", str(camp))
    return {"root": root, "camp": camp, "good": good, "ds": root / "ds"}


def _init(prior, name: str, plan: dict, check: bool = True):
    d = prior["root"] / name
    return d, sweep("init", str(write_plan(prior["root"] / f"{name}.json", plan)), "--campaign", str(d), check=check)


def test_a_duplicate_of_a_prior_run_is_ended_by_init_and_the_prior_counts_toward_the_target(prior):
    good = prior["good"]
    # the same commits under other names: a branch for the head, so only the commits can match
    subprocess.run(["git", "-C", good["repo"], "branch", "-f", "the-fix", good["head"]], check=True,
                   capture_output=True)
    other = make_verified_pr(prior["root"] / "repos" / "other", "mathx", extra_files={"NOTES.md": "another PR\n"})
    same = {**candidate("again", good), "head": "the-fix"}
    plan = local_plan([same, candidate("other", other)], target_verified=1,
                      prior_verified=[str(prior["camp"] / "runs" / "good")])
    d, _ = _init(prior, "second", plan)
    dup = record(d, "again")
    assert (dup.state.value, dup.outcome.value, dup.reason, dup.cause) == ("ended", "blocked", "duplicate", "duplicate")
    assert "runs/good" in (dup.cause_detail or "")
    # target_verified 1 is met by the prior: the tick admits nothing, and says why
    sweep("tick", "--campaign", str(d))
    assert record(d, "other").state.value == "queued"
    assert not [e for e in events(d, "again") if e["kind"] in ("admitted", "submitted")]
    st = status_json(d)
    assert "1 prior" in str(st), st


def test_an_exported_task_is_a_prior_too(prior):
    task = prior["ds"] / "good"
    assert (task / "task.toml").is_file()
    plan = local_plan([candidate("again", prior["good"])], prior_verified=[str(task)])
    d, _ = _init(prior, "third", plan)
    assert record(d, "again").reason == "duplicate"


@pytest.mark.parametrize("what", ["bare name", "not verified", "changed run", "changed task", "missing"])
def test_a_prior_that_does_not_hold_is_an_error_naming_the_entry(prior, what, tmp_path):
    root = prior["root"]
    entry = {"bare name": "acme/mathx#12", "not verified": str(prior["camp"] / "runs" / "weak"),
             "missing": str(root / "nowhere")}.get(what)
    words = {"bare name": "is a PR name", "not verified": "not verified", "missing": "is not a directory",
             "changed run": "changed since it was verified", "changed task": "changed since it was exported"}[what]
    if what == "changed run":      # a copy of the verified run, one test file edited
        copy = tmp_path / "runs" / "good"
        copy.parent.mkdir()
        subprocess.run(["cp", "-a", str(prior["camp"] / "runs" / "good"), str(copy)], check=True)
        target = next(p for p in (copy / "task" / "tests").rglob("*") if p.is_file())
        target.write_text(target.read_text() + "\n# edited\n")
        entry = str(copy)
    if what == "changed task":
        copy = tmp_path / "ds"
        subprocess.run(["cp", "-a", str(prior["ds"]), str(copy)], check=True)
        (copy / "good" / "instruction.md").write_text("something else\n")
        entry = str(copy / "good")
    plan = local_plan([candidate("x", prior["good"])], prior_verified=[entry])
    d, r = _init(prior, f"bad-{what.replace(' ', '-')}", plan, check=False)
    assert r.returncode != 0, r.stdout
    field = "prior_verified" if what == "bare name" else "prior_verified.0"   # (the plan model's check: entry 0)
    assert field in r.stderr and words in r.stderr, r.stderr
    assert not (d / "campaign.toml").exists()
