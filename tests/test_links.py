"""Symlinks in task bundles and at the root of every copy: a chain of relative links whose every
hop looks local still resolves where the kernel takes it, and a link at a part sweep copies as a
directory (environment/repo, tests, solution) makes the bundle invalid (real files, real links)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sweep.harbor import validate_bundle
from sweep.harbor.pr_bundle import build_bundle_from_git
from sweep.harbor.samples import make_pr_repo
from sweep.tree import UnsafeTree, check_tree, copy_tree, links_leaving


@pytest.fixture(scope="module")
def bundle_src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("links")
    build_bundle_from_git(make_pr_repo(root / "repos", "verified"), root / "task")
    return root / "task"


@pytest.fixture
def world(bundle_src, tmp_path):
    """A bundle next to an operator home with a canary, as a run's workspace sits in a campaign."""
    home = tmp_path / "home" / "operator"
    home.mkdir(parents=True)
    (home / "notes.txt").write_text("canary\n")
    bundle = tmp_path / "camp" / "runs" / "r" / "work" / "author-r0001" / "task"
    shutil.copytree(bundle_src, bundle, symlinks=True)
    return bundle, home


def relative_to(target: Path, start: Path) -> str:
    return os.path.relpath(target, start)


def test_a_relative_chain_whose_hops_look_local_is_refused(world):
    bundle, home = world
    repo = bundle / "environment" / "repo"
    # hop 1 and hop 2 each point "inside" lexically; only following them both leaves the bundle
    os.symlink("sub", repo / "hop1")
    (repo / "real").mkdir()
    os.symlink(relative_to(home, repo / "real"), repo / "real" / "far")
    os.symlink("real/far/notes.txt", repo / "leak.txt")
    problems = validate_bundle(bundle)
    assert any(p.startswith("environment/repo/leak.txt:") and "leaves the bundle" in p for p in problems), problems
    assert any(p.startswith("environment/repo/real/far:") for p in problems), problems


def test_a_chain_through_a_link_at_a_parts_name_is_refused(world):
    bundle, home = world
    shutil.rmtree(bundle / "environment" / "repo")
    (bundle / "environment" / "a").mkdir()
    os.symlink(relative_to(home, bundle / "environment" / "a"), bundle / "environment" / "a" / "b")
    os.symlink("a/b", bundle / "environment" / "repo")
    problems = validate_bundle(bundle)
    assert any(p.startswith("environment/repo: is a symlink") for p in problems), problems


@pytest.mark.parametrize("part", ["tests", "solution", "environment"])
def test_a_part_that_is_a_link_makes_the_bundle_invalid_even_pointing_inside(world, part):
    bundle, _ = world
    shutil.move(bundle / part, bundle / f"{part}.real")
    os.symlink(f"{part}.real", bundle / part)
    problems = validate_bundle(bundle)
    assert any(p.startswith(f"{part}: is a symlink") or p.startswith(f"{part}/: missing") for p in problems), problems


def test_a_link_from_the_repo_into_the_solution_is_refused(world):
    """Inside the bundle, but not inside environment/repo: a copy of the repository alone (the
    trial's, the solver's) would resolve it against wherever that copy sits."""
    bundle, _ = world
    os.symlink("../../solution/solve.sh", bundle / "environment" / "repo" / "peek")
    problems = validate_bundle(bundle)
    assert any("environment/repo/peek" in p and "environment/repo/" in p for p in problems), problems


def test_a_link_loop_is_refused(world):
    bundle, _ = world
    os.symlink("loop2", bundle / "tests" / "loop1")
    os.symlink("loop1", bundle / "tests" / "loop2")
    assert any("does not resolve" in p for p in validate_bundle(bundle))


def test_links_that_stay_inside_their_part_are_fine(world):
    bundle, _ = world
    os.symlink("mathx.py", bundle / "environment" / "repo" / "alias.py")
    (bundle / "environment" / "repo" / "d").mkdir()
    os.symlink("../alias.py", bundle / "environment" / "repo" / "d" / "chain.py")   # a chain, inside
    os.symlink("missing-but-inside", bundle / "tests" / "dangling")
    assert validate_bundle(bundle) == []


def test_copy_tree_and_check_tree_refuse_a_link_at_their_root(world, tmp_path):
    _, home = world
    os.symlink(home, tmp_path / "repo-link")
    for attempt in (lambda: copy_tree(tmp_path / "repo-link", tmp_path / "out"),
                    lambda: check_tree(tmp_path / "repo-link")):
        with pytest.raises(UnsafeTree, match="is a symlink"):
            attempt()
    assert not (tmp_path / "out").exists()


def test_links_leaving_judges_the_copy_where_it_sits(world, tmp_path):
    bundle, home = world
    os.symlink(relative_to(home / "notes.txt", bundle / "tests"), bundle / "tests" / "notes")
    assert [p.split(":")[0] for p in links_leaving(bundle)] == ["tests/notes"]
    copy = tmp_path / "elsewhere" / "task"
    shutil.copytree(bundle, copy, symlinks=True)
    os.unlink(copy / "tests" / "notes")
    assert links_leaving(copy) == []
