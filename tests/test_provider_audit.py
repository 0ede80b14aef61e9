"""The workspace audit on real files: what counts as a change, what is out of scope, and reverting."""
from __future__ import annotations

import os
from pathlib import Path

from sweep.providers import audit


def build(ws: Path) -> None:
    (ws / "task" / "tests").mkdir(parents=True)
    (ws / "task" / "instruction.md").write_text("do the thing")
    (ws / "repo" / "pkg").mkdir(parents=True)
    (ws / "repo" / "pkg" / "mod.py").write_text("x = 1\n")
    (ws / "repo" / "README.md").write_text("readme")
    os.symlink("pkg/mod.py", ws / "repo" / "link.py")


def changes_of(before, ws):
    return {(c.path, c.what) for c in audit.diff(before, audit.snapshot(ws))}


def test_created_changed_deleted_and_mode_changes_are_seen(tmp_path):
    build(tmp_path)
    before = audit.snapshot(tmp_path)
    (tmp_path / "repo" / "new.py").write_text("new")
    (tmp_path / "repo" / "pkg" / "mod.py").write_text("x = 2\n")
    (tmp_path / "repo" / "README.md").unlink()
    os.chmod(tmp_path / "task" / "instruction.md", 0o755)
    os.unlink(tmp_path / "repo" / "link.py")
    os.symlink("README.md", tmp_path / "repo" / "link.py")
    assert changes_of(before, tmp_path) == {
        ("repo/new.py", "created"), ("repo/pkg/mod.py", "changed"), ("repo/README.md", "deleted"),
        ("task/instruction.md", "changed"), ("repo/link.py", "changed")}


def test_same_size_rewrite_with_forged_mtime_is_still_a_change_and_touch_is_not(tmp_path):
    build(tmp_path)
    target = tmp_path / "repo" / "pkg" / "mod.py"
    before = audit.snapshot(tmp_path)
    st = os.stat(target)
    target.write_text("y = 1\n")                       # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))   # and the old mtime
    assert changes_of(before, tmp_path) == {("repo/pkg/mod.py", "changed")}
    before = audit.snapshot(tmp_path)
    os.utime(target, None)                             # mtime only
    assert changes_of(before, tmp_path) == set()


def test_violations_follow_the_scope_globs_and_read_only_means_everything(tmp_path):
    build(tmp_path)
    before = audit.snapshot(tmp_path)
    (tmp_path / "task" / "tests" / "test.sh").write_text("#!/bin/sh\n")
    (tmp_path / "task" / "new_dir").mkdir()
    (tmp_path / "stray").mkdir()
    (tmp_path / "repo" / "pkg" / "mod.py").write_text("hacked")
    changes = audit.diff(before, audit.snapshot(tmp_path))
    bad = {c.path for c in audit.violations(changes, ["task/**"])}
    assert bad == {"stray", "repo/pkg/mod.py"}
    assert {c.path for c in audit.violations(changes, [])} == {c.path for c in changes}
    # A narrower glob: the directory may exist because in-scope files could live below it.
    narrow = {c.path for c in audit.violations(changes, ["task/**/*.md"])}
    assert narrow == {"task/tests/test.sh", "stray", "repo/pkg/mod.py"}


def test_revert_restores_content_mode_links_and_removes_creations(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    build(ws)
    os.chmod(ws / "repo" / "README.md", 0o640)
    copy = tmp_path / "pre"
    scope = ["task/**"]
    before = audit.snapshot(ws, copy_to=copy, copy_if=lambda rel: not audit.in_scope(rel, "file", scope))
    assert not (copy / "task" / "instruction.md").exists()     # in-scope paths are not copied
    original = {p: (ws / p).read_bytes() for p in ("repo/README.md", "repo/pkg/mod.py")}
    (ws / "task" / "instruction.md").write_text("allowed edit")
    (ws / "repo" / "pkg" / "mod.py").write_text("hacked")
    (ws / "repo" / "README.md").unlink()
    (ws / "repo" / "evil" / "deep").mkdir(parents=True)
    (ws / "repo" / "evil" / "deep" / "x.py").write_text("evil")
    os.unlink(ws / "repo" / "link.py")
    (ws / "repo" / "link.py").write_text("not a link any more")
    import shutil
    shutil.rmtree(ws / "repo" / "pkg")
    (ws / "repo" / "pkg").write_text("a file where a directory was")
    changes = audit.diff(before, audit.snapshot(ws))
    bad = audit.violations(changes, scope)
    assert audit.revert(ws, copy, bad, before) == []
    after = audit.snapshot(ws)
    assert audit.violations(audit.diff(before, after), scope) == []
    for rel, data in original.items():
        assert (ws / rel).read_bytes() == data
    assert os.stat(ws / "repo" / "README.md").st_mode & 0o777 == 0o640
    assert os.readlink(ws / "repo" / "link.py") == "pkg/mod.py"
    assert not (ws / "repo" / "evil").exists()
    assert (ws / "task" / "instruction.md").read_text() == "allowed edit"   # in scope: kept
