"""A candidate's source, read through checked helpers: a URL that is not a pull request, or a local
candidate missing a ref (possible after `model_copy`, which does not re-validate), is a ValueError
that says so, never an AttributeError on None."""
from __future__ import annotations

import pytest

from sweep.controller.intake import IntakeFailed, take_in
from sweep.models.plan import Candidate, FrozenCandidate, github_pr


def test_github_pr_parts_and_refusal():
    assert github_pr("https://github.com/acme/mathx/pull/7") == ("acme", "mathx", "7")
    with pytest.raises(ValueError, match="not a GitHub pull request URL"):
        github_pr("https://example.com/acme/mathx/pull/7")


def test_ids_of_both_kinds_of_candidate():
    assert Candidate(url="https://github.com/Acme/MathX/pull/7").derived_id() == "acme-mathx-7"
    assert Candidate(repo="/src/mathx", base="main", head="fix-1").derived_id() == "mathx-fix-1"
    assert Candidate(repo="/src/mathx", base="main", head="fix-1").local_source() == ("/src/mathx", "main", "fix-1")


def test_a_local_candidate_without_its_refs_is_named_not_a_crash(tmp_path):
    good = Candidate(repo="/src/mathx", base="main", head="fix-1")
    cand = good.model_copy(update={"head": None})
    with pytest.raises(ValueError, match="needs repo, base and head"):
        cand.derived_id()
    fc = FrozenCandidate(run_id="r1", panel_index=0, pr_key="k", candidate=good).model_copy(update={"candidate": cand})
    with pytest.raises(IntakeFailed, match="needs repo, base and head"):
        take_in(tmp_path, fc)
