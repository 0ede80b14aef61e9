"""A hostile author's symlink chains, through a whole campaign (local backend, bubblewrap, campaign
outside /tmp): relative chains whose every hop looks inside the bundle, aimed at a fake operator
home, at /etc/munge and at another run's task/solution. Each first bundle is invalid (the repair
names the link), nothing of the host reaches the campaign, and the run, repaired honestly, ends
verified as it would have without the attack."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from runstate.models import Outcome
from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.harbor.samples import make_verified_pr
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.runs import candidate, events, local_plan, record

# The author plays honest on its repair; on its first revision it plants the links it is given
# (inside the sandbox it cannot read the targets: the host follows the links afterwards, or not).
HOSTILE_AUTHOR = r'''import json, os, shutil, sys
workspace, prompt_file, honest, plan = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
task = os.path.join(workspace, "task")
shutil.copytree(honest, task, symlinks=True, dirs_exist_ok=True)
if "# Repair" in open(prompt_file).read():
    print("honest repair")
    sys.exit(0)
for rel in plan["dirs"]:
    os.makedirs(os.path.join(task, rel), exist_ok=True)
for rel, text in plan["links"]:
    path = os.path.join(task, rel)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    os.symlink(text, path)
print("planted", len(plan["links"]), "links")
'''

DEPTH = 24        # the ladder's rungs: more than the deepest host path the chain climbs


def ladder_chain(bundle: Path, link_rel: str, target: Path) -> dict:
    """The links that make `bundle/link_rel` resolve to `target` while every hop, read lexically
    from where it sits, stays inside the bundle: `environment/ladder/p1/.../pN/up` points N levels
    up (to environment/ladder, inside); the escape goes down the ladder, through `up`, then climbs
    with `..`s that a lexical reading cancels against the rungs, but the kernel applies to
    environment/ladder itself, reaching / and then the target."""
    rungs = "/".join(f"p{i}" for i in range(1, DEPTH + 1))
    ladder = bundle / "environment" / "ladder"
    climb = len(ladder.parts) - 1                      # from environment/ladder up to /
    assert climb < DEPTH, "the ladder is too short for this host path"
    escape = f"{os.path.relpath(ladder, (bundle / link_rel).parent)}/{rungs}/up/" + "../" * climb \
        + str(target).lstrip("/")
    lexical = os.path.normpath((bundle / link_rel).parent / escape)
    assert lexical.startswith(str(bundle) + os.sep), lexical          # what a string test sees
    assert os.path.realpath(bundle / link_rel) != lexical
    return {"dirs": [f"environment/ladder/{rungs}"],
            "links": [[f"environment/ladder/{rungs}/up", "../" * DEPTH], [link_rel, escape]]}


def test_symlink_chains_to_the_host_are_refused_and_the_runs_end_verified(targets):
    root = targets.root / "links"
    root.mkdir()
    script = root / "hostile_author.py"
    script.write_text(HOSTILE_AUTHOR)
    other_solution = targets.other_run_file.parent / "task" / "solution"
    other_solution.mkdir(parents=True)
    (other_solution / "solve.sh").write_text(f"# {targets.canaries[2]}\n")
    camp = targets.campaign.parent / "links-campaign"
    munge_key = Path("/etc/munge/munge.key")
    key_bytes = munge_key.read_bytes() if os.access(munge_key, os.R_OK) else None
    attacks = {"home": ("environment/repo", targets.home_canary.parent),     # a part made a link
               "munge": ("environment/repo/etc-munge", Path("/etc/munge")),  # a link inside a part
               "other": ("solution", other_solution)}
    candidates = []
    for name, (link_rel, target) in attacks.items():
        src = make_verified_pr(root / "repos" / name, "mathx")
        honest = root / "honest" / name
        build_bundle_from_git(src, honest)
        bundle = camp / "runs" / name / "work" / "author-r0001" / "task"
        author = {"argv": [sys.executable, str(script), "{workspace}", "{prompt_file}", str(honest),
                           json.dumps(ladder_chain(bundle, link_rel, target)), "{tools}", "{max_turns}",
                           "{cost_cap_usd}"], "network": "none"}
        candidates.append(candidate(name, src, runtimes={"author": "command"}, runtime_options={"author": author}))
    plan = local_plan(candidates, defaults={"quality": {"max_repairs": 1}})
    sweep("init", str(write_plan(root / "plan.json", plan)), "--campaign", str(camp))
    tick_until_done(camp, timeout=480)
    for name, (link_rel, _) in attacks.items():
        rec = record(camp, name)
        assert rec.outcome is Outcome.verified, (name, rec.reason, rec.last_error)
        repairs = [e["detail"] for e in events(camp, name) if e["kind"] == "repair"]
        assert len(repairs) == 1 and "after author" in repairs[0] and link_rel in repairs[0], (name, repairs)
        assert "is a symlink" in repairs[0] or "leaves the bundle" in repairs[0], repairs
        assert not (camp / "runs" / name / "task" / "environment" / "ladder").exists()
    assert targets.canary_found_under(camp) == []
    if key_bytes:
        hits = [str(p) for p in camp.rglob("*") if p.is_file() and not p.is_symlink() and key_bytes in p.read_bytes()]
        assert hits == [], hits
    out = root / "export"
    sweep("export", str(out), "--campaign", str(camp))
    for path in out.rglob("*"):
        if path.is_symlink():
            real = os.path.realpath(path)
            task = out / path.relative_to(out).parts[0]
            assert real.startswith(str(task) + os.sep), (path, real)
