"""Prepared probes and required probe focus (sweep/models/plan.py, sweep/controller/phases.py) on the
real sandbox through whole campaigns: a plan's probes bound to a bundle sha256 are refused before any
paid work when they cannot apply (init: too many, a repeated name, a paid author; the controller: a
bundle of another sha256, before the gates and every paid session), run with the mutants when they
match, and bind the verdict; a required focus with no wrong-solution probe that ran keeps the run
from `verified` (oracle reviewer: it ends; agent reviewer: its accept gets a correction round)."""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from runstate import run_dir
from sweep.harbor.bundle import bundle_sha256
from sweep.harbor.samples import make_pr_repo
from sweep.models.evidence import ProbesEvidence, read_evidence
from tests.campaigns import status_json, sweep, tick_until_done, write_plan
from tests.fakes.runs import agent_options, candidate, events, local_plan
from tests.test_quality_probes import ISOLATION, clamp_patch

STALE = "0" * 64
FOCUS = "above the range"       # the fake reviewer's probes name this focus
AGENT_REVIEWER = {"author": "oracle", "reviewer": "command", "solver": "oracle"}


def prepared(name: str, kind: str, new_line: str, sha: str, focus: str = FOCUS) -> dict:
    return {"name": name, "kind": kind, "focus": focus, "rationale": f"the plan's {name}",
            "patch": clamp_patch(new_line).decode(), "bundle_sha256": sha}


def ended(st: dict) -> dict[str, tuple[str, str | None, str | None]]:
    return {e["run_id"]: (e["outcome"], e["reason"], e.get("cause")) for e in st["ended"]}


def probes_of(campaign: Path, run_id: str) -> ProbesEvidence:
    files = sorted((run_dir(campaign, run_id) / "evidence").glob("probes-r*.json"))
    ev = read_evidence(files[-1], ProbesEvidence)
    assert ev is not None
    return ev


def state(campaign: Path, run_id: str) -> dict:
    return json.loads((run_dir(campaign, run_id) / "state.json").read_text())


def run_campaign(root: Path, name: str, cands: list[dict], timeout: float = 400) -> tuple[Path, dict]:
    plan = local_plan(cands, isolation=ISOLATION, max_parallel=2, max_attempts=1,
                      defaults={"worker_reservation_usd": 0.1, "quality": {"max_repairs": 0, "max_probes": 2}})
    d = root / name
    sweep("init", str(write_plan(root / f"{name}.json", plan)), "--campaign", str(d))
    return d, tick_until_done(d, timeout=timeout)


REPOS = ("caught", "wrong", "alt", "na", "agent-prep", "asks", "given", "broken")


@pytest.fixture(scope="module")
def hashes(tmp_path_factory) -> tuple[Path, dict[str, dict], dict[str, str], Path]:
    """How a plan gets the hash (docs/campaign.md): a first campaign with a placeholder hash ends
    each run `blocked: prepared_probes_stale` after the (free) oracle author, naming the bundle it built."""
    root = tmp_path_factory.mktemp("prepared")
    srcs = {name: make_pr_repo(root / "repos", "verified", name=name) for name in REPOS}
    cands = [{**candidate(name, src), "prepared_probes": [prepared("placeholder", "wrong_solution", "        return 0", STALE)]}
             for name, src in srcs.items()]
    d, st = run_campaign(root, "first", cands, timeout=200)
    got = {}
    for name in REPOS:
        assert ended(st)[name] == ("blocked", "prepared_probes_stale", "prepared_probes_stale")
        rec = state(d, name)
        sha = re.search(r"this run built bundle ([0-9a-f]{64})", rec["cause_detail"]).group(1)
        got[name] = sha
        assert sha == bundle_sha256(run_dir(d, name) / "task") and "placeholder (000000000000)" in rec["cause_detail"]
        # refused before the gates and before any paid session: only the (free) author ran
        assert not list((run_dir(d, name) / "evidence").glob("gates-r*.json"))
        assert [p.name for p in (run_dir(d, name) / "sessions").iterdir()] == ["0001-author"]
    return root, srcs, got, d


def test_a_stale_hash_is_refused_before_any_paid_work_and_names_the_built_bundle(hashes):
    root, _, got, d = hashes
    assert "prepared_probes_stale" in (run_dir(d, "caught") / "report.md").read_text()
    assert got["caught"] in (run_dir(d, "caught") / "report.md").read_text()


@pytest.fixture(scope="module")
def second(hashes):
    root, srcs, got, _ = hashes

    def cand(name: str, probes: list[dict], focus: list[str] | None = None, **options) -> dict:
        c = candidate(name, srcs[name], **options)
        c["prepared_probes"] = probes
        if focus is not None:
            c["required_probe_focus"] = focus
        return c

    reviewer = {"reviewer": agent_options("reviewer")}
    cands = [
        cand("caught", [prepared("zero", "wrong_solution", "        return 0", got["caught"]),
                        prepared("min", "valid_alternative", "        return min(value, high)", got["caught"])],
             [FOCUS]),
        # the verified sample's test checks one input above the range: the hard-coded answer passes
        cand("wrong", [prepared("ten", "wrong_solution", "        return 10 if value == 42 else 5", got["wrong"])]),
        cand("alt", [prepared("identity", "valid_alternative", "        return value", got["alt"])]),
        # its one probe for the focus does not apply to the base: the focus has no probe that ran
        cand("na", [{**prepared("broken", "wrong_solution", "        return 1", got["na"]),
                     "patch": clamp_patch("        return 1").decode().replace("return low", "return lo")}], [FOCUS]),
        cand("agent-prep", [prepared("ten", "wrong_solution", "        return 10 if value == 42 else 5", got["agent-prep"])],
             runtimes=AGENT_REVIEWER, runtime_options=reviewer),
        cand("asks", [], [FOCUS], runtimes=AGENT_REVIEWER, runtime_options=reviewer),
        # its prepared probe has the name the reviewer's first proposal gets: the proposal does not replace it
        cand("given", [prepared("reviewer-01", "wrong_solution", "        return 1", got["given"], focus="other")],
             [FOCUS], runtimes=AGENT_REVIEWER,
             runtime_options={"reviewer": agent_options("reviewer", "--propose-probe=wrong_solution:return 0")}),
        # its proposal for the focus does not apply to the base: the focus is still missing at evaluate
        cand("broken", [], [FOCUS], runtimes=AGENT_REVIEWER, runtime_options={"reviewer": agent_options(
            "reviewer", "--propose-probe=wrong_solution:return 0", "--broken-probes")}),
    ]
    d, st = run_campaign(root, "second", cands)
    return root, d, st, got


def test_matching_prepared_probes_run_with_the_mutants_and_bind_the_verdict(second):
    root, d, st, got = second
    rows = ended(st)
    assert rows["caught"] == ("verified", None, None)
    assert rows["wrong"][:2] == ("generated_unverified", "weak_tests") and rows["wrong"][2] == "weak_tests"
    assert rows["alt"][:2] == ("generated_unverified", "weak_tests")
    caught = probes_of(d, "caught")
    by_name = {p.name: p for p in caught.probes}
    assert (by_name["zero"].origin, by_name["zero"].outcome, by_name["zero"].rewards) == ("prepared", "killed", [0.0, 0.0])
    assert (by_name["min"].outcome, by_name["min"].rewards) == ("accepted", [1.0, 1.0])
    assert by_name["zero"].model_extra["bound_to"] == got["caught"] == caught.bundle_sha256
    assert caught.mutation.run == caught.mutation.killed == 6 and caught.required_focus == [FOCUS] and caught.missing_focus == []
    wrong = {p.name: p for p in probes_of(d, "wrong").probes}["ten"]
    assert (wrong.outcome, wrong.rewards) == ("survived", [1.0])
    assert "ten" in state(d, "wrong")["cause_detail"]
    alt = {p.name: p for p in probes_of(d, "alt").probes}["identity"]
    assert (alt.outcome, alt.rewards) == ("rejected", [0.0])
    report = (run_dir(d, "caught") / "report.md").read_text()
    assert "prepared probe zero (wrong_solution, focus 'above the range'): killed" in report
    assert "required probe focus: above the range; each covered" in report
    out = root / "dataset"
    sweep("export", str(out), "--campaign", str(d), "--include-unverified")
    meta = tomllib.loads((out / "caught" / "task.toml").read_text())["metadata"]["sweep"]["quality"]
    assert {(p["name"], p["origin"], p["outcome"]) for p in meta["probes"] if p["origin"] == "prepared"} == {
        ("zero", "prepared", "killed"), ("min", "prepared", "accepted")}
    assert meta["required_probe_focus"] == [FOCUS] and meta["missing_probe_focus"] == []


def test_a_required_focus_with_no_probe_that_ran_does_not_verify(second):
    root, d, st, _ = second
    rows = ended(st)
    assert rows["na"] == ("generated_unverified", "weak_tests", "probe_focus_missing")
    na = probes_of(d, "na")
    assert na.missing_focus == [FOCUS] and [p.outcome for p in na.probes if p.origin == "prepared"] == ["not_applicable"]
    assert FOCUS in state(d, "na")["cause_detail"]
    assert "missing: above the range" in (run_dir(d, "na") / "report.md").read_text()
    # with an agent reviewer whose proposal for the focus did not apply: evaluate refuses verified
    assert rows["broken"] == ("generated_unverified", "weak_tests", "probe_focus_missing")
    broken = probes_of(d, "broken")
    assert broken.missing_focus == [FOCUS] and [p.outcome for p in broken.probes if p.origin == "reviewer"] == [
        "not_applicable"]
    assert FOCUS in state(d, "broken")["cause_detail"]
    assert status_json(d)["causes"].get("probe_focus_missing") == 3     # na, broken and the agent-reviewed asks


def test_an_agent_reviewer_is_asked_for_the_missing_focus_and_prepared_probes_bind_it(second):
    root, d, st, _ = second
    rows = ended(st)
    # its accept proposes no probe for the focus: one correction round naming it, then the attempt fails
    assert rows["asks"] == ("blocked", "max_attempted", "probe_focus_missing")
    assert FOCUS in state(d, "asks")["cause_detail"]
    corrections = [e for e in events(d, "asks") if e.get("kind") == "review_correction"]
    assert corrections and FOCUS in corrections[0]["detail"]
    prompt = sorted((run_dir(d, "asks") / "sessions").glob("*-reviewer/prompt.md"))[0].read_text()
    assert "No probe covers 'above the range' yet" in prompt
    # a reviewer that proposes a wrong solution for the focus, which the tests reject: verified
    assert rows["given"] == ("verified", None, None)
    given = probes_of(d, "given")
    assert given.missing_focus == [] and [(p.name, p.origin, p.focus, p.outcome) for p in given.probes
                                          if p.origin != "mutant"] == [("reviewer-01", "prepared", "other", "killed"),
                                                                       ("reviewer-01", "reviewer", FOCUS, "killed")]
    # a prepared wrong solution the tests accept ends the run before the (paid) reviewer's session:
    # the unpaid author prepared probes require would rebuild the same bundle on a repair
    assert rows["agent-prep"][:2] == ("generated_unverified", "weak_tests")
    assert [p.name for p in (run_dir(d, "agent-prep") / "sessions").iterdir()] == ["0001-author"]
    assert "ten (prepared" in state(d, "agent-prep")["cause_detail"]
    # a prepared probe that passes is shown to an agent reviewer with its outcome
    prompt = sorted((run_dir(d, "given") / "sessions").glob("*-reviewer/prompt.md"))[0].read_text()
    assert "- reviewer-01 (wrong_solution, focus 'other'): killed, rewards [0.0, 0.0]" in prompt


@pytest.mark.parametrize("change,field,words", [
    ({"max_probes": 1}, "prepared_probes", "more than quality.max_probes = 1"),
    ({"repeat": True}, "prepared_probes", "repeats an earlier probe's name"),
    ({"sha": "abc"}, "bundle_sha256", "is not a bundle sha256"),
    ({"author": "command"}, "prepared_probes", "author runtime 'command' is paid"),
    ({"focus": ["something else"]}, "required_probe_focus", "has no prepared wrong_solution probe"),
])
def test_init_refuses_prepared_probes_that_cannot_work(tmp_path, change, field, words):
    src = make_pr_repo(tmp_path / "repos", "verified")
    probes = [prepared("a", "wrong_solution", "        return 0", change.get("sha", STALE)),
              prepared("a" if change.get("repeat") else "b", "wrong_solution", "        return 1", STALE)]
    options: dict = {"quality": {"max_probes": change.get("max_probes", 2)}}
    if "author" in change:
        options.update(runtimes={"author": change["author"]}, runtime_options={"author": agent_options("author")})
    cand = {**candidate("c", src, **options), "prepared_probes": probes}
    if "focus" in change:
        cand["required_probe_focus"] = change["focus"]
    plan = write_plan(tmp_path / "plan.json", local_plan([cand], isolation=ISOLATION,
                                                           defaults={"worker_reservation_usd": 0.1}))
    r = sweep("init", str(plan), "--campaign", str(tmp_path / "camp"), check=False)
    assert r.returncode != 0 and words in r.stderr and field in r.stderr and "plan.json" in r.stderr
    assert not (tmp_path / "camp" / "campaign.toml").exists()


def test_a_reviewers_probes_re_run_on_the_repaired_bundle(tmp_path):
    """A repair gets a new sha256: the reviewer's probes of the bundle it replaced run again on it
    (carried, bound to the old hash), and bind though the next reviewer proposes nothing new."""
    src = make_pr_repo(tmp_path / "repos", "verified")
    options = {"author": agent_options("author", "--repo", src["repo"], "--touch-on-repair"),
               "reviewer": agent_options("reviewer", "--propose-probe=wrong_solution:return 10 if value == 42 else 5",
                                         "--propose-probe=wrong_solution:return 0", "--propose-new-only")}
    cand = candidate("carried", src, runtimes={"author": "command", "reviewer": "command", "solver": "oracle"},
                     runtime_options=options, quality={"max_repairs": 1, "run_rollout": False})
    cand["required_probe_focus"] = [FOCUS]
    d, st = run_campaign(tmp_path, "camp", [cand])
    assert ended(st)["carried"][:2] == ("generated_unverified", "weak_tests")
    first, second = (read_evidence(run_dir(d, "carried") / "evidence" / f"probes-r000{n}.json", ProbesEvidence)
                     for n in (1, 2))
    assert first is not None and second is not None and first.bundle_sha256 != second.bundle_sha256
    carried = [p for p in second.probes if p.origin == "reviewer"]
    assert [(p.name, p.outcome, p.rewards) for p in carried] == [("reviewer-01", "survived", [1.0]),
                                                                  ("reviewer-02", "killed", [0.0, 0.0])]
    # the required focus stays covered through the repair by the carried probe: no correction round asked for it
    assert second.missing_focus == [] and not [e for e in events(d, "carried") if e.get("kind") == "review_correction"]
    assert carried[0].model_extra == {**carried[0].model_extra, "carried_from": 1, "bound_to": first.bundle_sha256}
    prompts = sorted((run_dir(d, "carried") / "sessions").glob("*-reviewer/prompt.md"))
    assert "Probes proposed for an earlier revision" in prompts[-1].read_text()
    review = json.loads(sorted((run_dir(d, "carried") / "evidence").glob("review-r*.json"))[-1].read_text())
    assert "probes" not in json.dumps(review["verdict"])    # the second review proposed nothing itself
    assert "reviewer-01" in state(d, "carried")["cause_detail"]


def test_a_probe_too_long_to_re_run_is_asked_for_again(tmp_path):
    """A reviewer's probe whose diff the evidence cut (over 4000 characters) cannot run on the
    repaired bundle: the probe evidence names it, the next review is asked to propose it again."""
    src = make_pr_repo(tmp_path / "repos", "verified")
    options = {"author": agent_options("author", "--repo", src["repo"], "--touch-on-repair"),
               "reviewer": agent_options("reviewer", "--propose-probe=wrong_solution:return 10 if value == 42 else 5", "--pad-probes=5000",
                                         "--propose-new-only")}
    cand = candidate("cut", src, runtimes={"author": "command", "reviewer": "command", "solver": "oracle"},
                     runtime_options=options, quality={"max_repairs": 1, "run_rollout": False})
    d, st = run_campaign(tmp_path, "camp", [cand])
    assert ended(st)["cut"][:2] == ("generated_unverified", "weak_tests")
    second = read_evidence(run_dir(d, "cut") / "evidence" / "probes-r0002.json", ProbesEvidence)
    assert second is not None and second.not_rerun == ["reviewer-01"]
    # not carried: the one reviewer probe of the repaired bundle is the second review's own proposal
    assert [(p.name, p.outcome, bool(p.model_extra.get("carried_from"))) for p in second.probes
            if p.origin == "reviewer"] == [("reviewer-01", "survived", False)]
    prompt = sorted((run_dir(d, "cut") / "sessions").glob("*-reviewer/prompt.md"))[-1].read_text()
    assert "could not run on this bundle: reviewer-01. Propose again" in prompt
    assert any("not re-run" in (e.get("detail") or "") for e in events(d, "cut"))
