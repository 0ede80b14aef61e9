"""No function in sweep/, runstate/ or roles/ is longer than 80 lines (docs/architecture.md).

A long function is where a forgotten case hides; this names the one that grew past the limit, with
its file and line, so it is split when it grows rather than found later."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sweep", "runstate", "roles")
MAX_LINES = 80


def long_functions(root: Path = REPO, limit: int = MAX_LINES) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > limit:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} is {lines} lines")
    return found


def test_no_function_is_longer_than_80_lines():
    found = long_functions()
    assert found == [], "split these (at most 80 lines each):\n" + "\n".join(found)


def test_the_check_names_a_long_function(tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "runstate").mkdir()
    (tmp_path / "roles").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (tmp_path / "sweep" / "m.py").write_text(f"def short():\n    return 1\n\n\ndef grown():\n{body}\n")
    assert long_functions(tmp_path) == ["sweep/m.py:5 grown is 86 lines"]
