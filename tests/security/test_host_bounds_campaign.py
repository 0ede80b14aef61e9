"""Host-side bounds through a whole campaign (local backend, bubblewrap, campaign outside /tmp): a
PR whose base tree is bigger than the plan's workspace bound ends `blocked: intake_failed` on its
first attempt, the reason in its ending, before a byte of the tree is exported; the same PR without
the blob, in the same campaign, ends verified; and the author's prompt holds the file summary and
at most `limits.prompt_diff_kb` of the diff."""
from __future__ import annotations

import subprocess

from runstate.models import Outcome
from sweep.harbor.samples import make_verified_pr
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, events, local_plan, record


def add_zeros_to_base(src: dict, size: int) -> dict:
    repo = src["repo"]
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin"}

    def git(*args, **kw):
        return subprocess.run(["git", "-C", repo, *args], env=env, check=True, capture_output=True, text=True,
                              **kw).stdout.strip()
    git("checkout", "-q", src["base"])
    with open(f"{repo}/zeros.bin", "wb") as fh:
        fh.truncate(size)
    git("add", "zeros.bin")
    git("commit", "-q", "-m", "a big blob in the base")
    base = git("rev-parse", "HEAD")
    git("cherry-pick", f"{src['base']}..{src['head']}")
    return {**src, "base": base, "head": git("rev-parse", "HEAD")}


def test_a_base_over_the_workspace_bound_ends_intake_failed_on_the_first_attempt(targets):
    root = targets.root / "host-bounds"
    big = add_zeros_to_base(make_verified_pr(root / "repos" / "big", "mathx"), 64 << 20)
    honest = make_verified_pr(root / "repos" / "honest", "mathx", extra_files={"NOTES.md": "a line of notes\n" * 400})
    plan = local_plan([candidate("big", big), candidate("honest", honest)],
                      limits={"workspace_mb": 32, "prompt_diff_kb": 1})
    camp = targets.campaign.parent / "host-bounds-campaign"
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=300)
    rec = record(camp, "big")
    assert (rec.outcome, rec.reason, rec.attempts) == (Outcome.blocked, "intake_failed", 0), (rec.reason, rec.last_error)
    ending = [e for e in events(camp, "big") if e["kind"] == "ended"][-1]
    assert "more than the workspace bound" in ending["detail"] and str(32 << 20) in ending["detail"]
    assert not list((camp / "runs" / "big").rglob("zeros.bin"))
    honest_rec = record(camp, "honest")
    assert honest_rec.outcome is Outcome.verified, (honest_rec.reason, honest_rec.cause_detail)
    prompt = next((camp / "runs" / "honest" / "sessions").glob("*-author")) / "prompt.md"
    text = prompt.read_text() if prompt.exists() else ""
    assert "M mathx.py (" in text and "[diff cut at 1024 bytes]" in text, text[-2000:]
