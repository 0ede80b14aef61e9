"""Per-candidate options merge over the plan's defaults role by role and key by key
(docs/campaign.md): overriding one candidate's solver keeps its author's endpoint, model and
retries, and its reviewer's runtime."""
from __future__ import annotations

from pathlib import Path

from sweep.campaign import resolve_candidates
from sweep.models.plan import Plan

AUTHOR = {"base_url": "https://gateway.example.internal/anthropic", "model": "claude-sonnet-4-5", "max_retries": 1}


def plan(candidate_options: dict) -> Plan:
    return Plan.model_validate({
        "name": "merge", "target_verified": 1,
        "defaults": {"runtimes": {"author": "claude-code", "reviewer": "claude-code", "solver": "claude-code"},
                     "runtime_options": {"author": AUTHOR, "solver": {"model": "claude-haiku-4-5", "stall_s": 300}},
                     "quality": {"rollouts": 2, "max_repairs": 1}},
        "candidates": [{"repo": "/src/x", "base": "main", "head": "a"},
                       {"repo": "/src/x", "base": "main", "head": "b", "options": candidate_options}]})


def frozen(candidate_options: dict):
    out = resolve_candidates(plan(candidate_options), Path("/plans/plan.toml"))
    return out[0].candidate.options, out[1].candidate.options


def test_a_solver_override_keeps_the_authors_base_url_and_the_solvers_other_options():
    default, mine = frozen({"runtime_options": {"solver": {"model": "claude-opus-4-1"}}})
    assert mine.runtime_options["author"] == AUTHOR
    assert mine.runtime_options["solver"] == {"model": "claude-opus-4-1", "stall_s": 300}
    assert default.runtime_options["solver"] == {"model": "claude-haiku-4-5", "stall_s": 300}
    assert mine.runtimes.model_dump() == default.runtimes.model_dump()


def test_one_runtime_changed_keeps_the_other_roles_and_drops_only_that_roles_options():
    _, mine = frozen({"runtimes": {"solver": "codex"},
                      "runtime_options": {"solver": {"base_url": "https://gateway.example.internal/openai/v1"}}})
    assert (mine.runtimes.author, mine.runtimes.reviewer, mine.runtimes.solver) == ("claude-code", "claude-code", "codex")
    assert mine.runtime_options["author"] == AUTHOR
    # claude's solver options were not for codex: only the candidate's own remain
    assert mine.runtime_options["solver"] == {"base_url": "https://gateway.example.internal/openai/v1"}


def test_a_nested_table_merges_key_by_key_too():
    _, mine = frozen({"quality": {"rollouts": 4}})
    assert (mine.quality.rollouts, mine.quality.max_repairs) == (4, 1)
