"""Mechanical mutants derived from real reference patches (git diff of real commits), in Python,
Go, Rust, JavaScript and Java: every mutant applies to the base with git apply, strings and
comments are never rewritten, the derivation is deterministic, bounded and free of duplicates."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sweep.quality.mutants import KINDS, derive_mutants, mask_code, parse_patch, render_patch
from sweep.quality.probes import apply_patch

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent",
           "PATH": "/usr/bin:/bin"}
FILLER = "".join(f"# filler line {i}\n" for i in range(12))


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args], check=True,
                          capture_output=True, env=GIT_ENV).stdout


def commit_pair(root: Path, base: dict[str, str], head: dict[str, str]) -> tuple[Path, bytes]:
    """A real repository with a base and a head commit; (an export of the base, the base..head patch
    exactly as the oracle author writes solution.patch)."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for files, msg in ((base, "base"), (head, "head")):
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", msg)
    patch = git(repo, "diff", "--binary", "--full-index", "--no-renames", "HEAD~1", "HEAD", "--")
    tree = root / "base"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(repo), "archive", "HEAD~1"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree, patch


PY_BASE = '''"""Helpers: a < b in the docstring is text."""


def pick(values, limit):
    out = []
    for v in values:
        if v < limit:
            out.append(v)
    return out
''' + FILLER + '''

def label(n):
    return "small"
'''
PY_HEAD = '''"""Helpers: a < b in the docstring is text."""


def pick(values, limit):
    out = []
    for v in values:
        if v < limit and v >= 0:   # keep v < limit
            out.append(v)
    return out[:10]
''' + FILLER + '''

def label(n):
    msg = "n < 10"
    return "big" if n > 10 else msg
'''

GO_BASE = '''package calc

// Max returns the larger of a and b.
func Max(a, b int) int {
	if a < b {
		return b
	}
	return a
}
'''
GO_HEAD = '''package calc

// Max returns the larger of a and b; "a < b" is a comment here.
func Max(a, b int) int {
	if a < b && b != 0 {
		return b
	}
	return a + 1
}
'''

RS_BASE = '''pub fn clamp(v: i64, lo: i64, hi: i64) -> i64 {
    if v > hi {
        return lo;
    }
    v
}
'''
RS_HEAD = '''pub fn clamp<'a>(v: i64, lo: i64, hi: i64) -> i64 {
    let c = '<';
    if v > hi || v == 99 {
        return hi;
    }
    v
}
'''

JS_BASE = '''export function within(x, lo, hi) {
  return x > lo;
}
'''
JS_HEAD = '''export function within(x, lo, hi) {
  if (x === lo || x < 0) { return false; }
  return x > lo && x <= hi; // "x < hi" in a comment
}
'''

JAVA_BASE = '''class Range {
    static int size(int lo, int hi) {
        return hi - lo;
    }
}
'''
JAVA_HEAD = '''class Range {
    static int size(int lo, int hi) {
        if (hi >= lo) {
            return hi - lo + 1;
        }
        String s = "hi >= lo";
        return 0;
    }
}
'''

CASES = {
    "python": ({"pkg/helpers.py": PY_BASE}, {"pkg/helpers.py": PY_HEAD}),
    "go": ({"calc/max.go": GO_BASE}, {"calc/max.go": GO_HEAD}),
    "rust": ({"src/lib.rs": RS_BASE}, {"src/lib.rs": RS_HEAD}),
    "javascript": ({"src/within.js": JS_BASE}, {"src/within.js": JS_HEAD}),
    "java": ({"src/Range.java": JAVA_BASE}, {"src/Range.java": JAVA_HEAD}),
}
EXPECTED_KINDS = {
    "python": {"hunk_left_out", "hunk_alone", "line_reverted", "return_constant", "comparison_flipped",
               "condition_dropped", "boolean_swapped", "integer_off_by_one"},
    "go": {"line_reverted", "return_constant", "comparison_flipped", "condition_dropped", "boolean_swapped",
           "integer_off_by_one"},
    "rust": {"line_reverted", "return_constant", "comparison_flipped", "condition_dropped", "boolean_swapped",
             "integer_off_by_one"},
    "javascript": {"line_reverted", "return_constant", "comparison_flipped", "condition_dropped",
                   "boolean_swapped", "integer_off_by_one"},
    "java": {"line_reverted", "return_constant", "comparison_flipped", "condition_dropped", "integer_off_by_one"},
}


@pytest.mark.parametrize("language", sorted(CASES))
def test_every_mutant_of_a_real_patch_applies_to_the_base_and_differs_from_the_reference(tmp_path, language):
    base, patch = commit_pair(tmp_path, *CASES[language])
    mutants = derive_mutants(patch)
    assert {m.kind for m in mutants} == EXPECTED_KINDS[language]
    patches = [m.patch for m in mutants]
    assert len(set(patches)) == len(patches)                 # deduplicated
    assert render_patch(parse_patch(patch)) not in patches   # never the reference itself
    assert len({m.id for m in mutants}) == len(mutants)
    for m in mutants:
        assert apply_patch(m.patch, base, check=True) is None, (m.id, m.patch.decode())


def _applied(tmp_path: Path, base: Path, patch: bytes, rel: str) -> str:
    import shutil
    copy = tmp_path / "applied"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(base, copy)
    assert apply_patch(patch, copy) is None
    return (copy / rel).read_text()


def test_python_mutants_rewrite_code_but_not_strings_or_comments(tmp_path):
    base, patch = commit_pair(tmp_path, *CASES["python"])
    mutants = derive_mutants(patch)
    by_desc = {m.description: m for m in mutants}
    flipped = [m for m in mutants if m.kind == "comparison_flipped"]
    # `v < limit`, `v >= 0` and `n > 10` are code; "n < 10" is a string, "# keep v < limit" a comment
    assert sorted(m.description.split(": ", 1)[-1] for m in flipped) == \
        sorted(["`<` flipped to `>=`", "`>` flipped to `<=`", "`>=` flipped to `<`"])
    text = _applied(tmp_path, base, flipped[0].patch, "pkg/helpers.py")
    assert "if v >= limit and v >= 0:   # keep v < limit" in text
    assert 'msg = "n < 10"' in text
    swap = next(m for m in mutants if m.kind == "boolean_swapped")
    assert "if v < limit or v >= 0:" in _applied(tmp_path, base, swap.patch, "pkg/helpers.py")
    dropped = {m.description.split(": ", 1)[-1] for m in mutants if m.kind == "condition_dropped"}
    assert dropped == {"condition `v < limit and v >= 0` dropped (always taken)",
                       "`v >= 0` dropped from `v < limit and v >= 0`", "`v < limit` dropped from `v < limit and v >= 0`"}
    consts = [m for m in mutants if m.kind == "return_constant"]
    assert {m.description.split(": ", 1)[-1] for m in consts} >= {"return None instead of `out[:10]`",
                                                                 "return 0 instead of `out[:10]`"}
    assert "    return None\n" in _applied(tmp_path, base, consts[0].patch, "pkg/helpers.py")
    ints = {m.description.split(": ", 1)[-1] for m in mutants if m.kind == "integer_off_by_one"}
    assert {"`10` -> `11`", "`10` -> `9`", "`0` -> `1`"} <= ints
    assert not [m for m in mutants if m.line == 25 and m.kind != "line_reverted"]   # msg = "n < 10": a string
    # two hunks: each alone and each left out, where "@4 alone" is "@22 left out" (kept once)
    assert sorted(m.id for m in mutants if m.kind in ("hunk_alone", "hunk_left_out")) == \
        ["hunk_alone:pkg/helpers.py@4", "hunk_left_out:pkg/helpers.py@4"]
    assert by_desc["the reference without its hunk pkg/helpers.py@4"].patch.count(b"\n@@ ") == 1
    alone = _applied(tmp_path, base, by_desc["the reference without its hunk pkg/helpers.py@4"].patch,
                     "pkg/helpers.py")
    assert 'return "big" if n > 10 else msg' in alone and "if v < limit:\n" in alone


def test_go_rust_js_java_mutants_leave_strings_comments_and_chars_alone(tmp_path):
    for language, rel in (("go", "calc/max.go"), ("rust", "src/lib.rs"), ("javascript", "src/within.js"),
                          ("java", "src/Range.java")):
        root = tmp_path / language
        base, patch = commit_pair(root, *CASES[language])
        for m in derive_mutants(patch):
            if m.kind in ("line_reverted", "hunk_alone", "hunk_left_out"):
                continue        # those may revert a whole line, comment and all
            text = _applied(root, base, m.patch, rel)
            for literal in ('"a < b" is a comment', "'<'", '"x < hi" in a comment', '"hi >= lo"'):
                head = CASES[language][1][rel]
                if literal in head:
                    assert literal in text, (m.id, text)
    base, patch = commit_pair(tmp_path / "go2", *CASES["go"])
    descs = {m.description.split(": ", 1)[-1] for m in derive_mutants(patch)}
    assert "return 0 instead of `a + 1`" in descs and "return nil instead of `a + 1`" in descs
    assert "condition `a < b && b != 0` dropped (always taken)" in descs and "`&&` swapped for `||`" in descs
    base, patch = commit_pair(tmp_path / "rs2", *CASES["rust"])
    descs = {m.description.split(": ", 1)[-1] for m in derive_mutants(patch)}
    assert "return Default::default() instead of `hi`" in descs and "`==` flipped to `!=`" in descs


def test_derivation_is_deterministic_bounded_and_round_robin(tmp_path):
    base, patch = commit_pair(tmp_path, *CASES["python"])
    first = derive_mutants(patch)
    again = derive_mutants(patch)
    assert [(m.id, m.patch) for m in first] == [(m.id, m.patch) for m in again]
    few = derive_mutants(patch, limit=len(KINDS))
    assert len(few) == len(KINDS) and len({m.kind for m in few}) == len(KINDS)   # one of each kind first
    assert [m.id for m in derive_mutants(patch, limit=3)] == [m.id for m in few[:3]]
    assert derive_mutants(patch, limit=0) == []
    # an accept check runs before the bound: refused candidates do not use it up
    refused = {m.patch for m in few[:2]}
    accepted = derive_mutants(patch, limit=3, accept=lambda p: p not in refused)
    assert [m.id for m in accepted] == [m.id for m in few[2:5]]


def test_a_one_line_fix_gives_no_structural_duplicates_of_the_gates(tmp_path):
    base, patch = commit_pair(tmp_path, {"m.py": "def f(x):\n    return x\n"}, {"m.py": "def f(x):\n    return x + 1\n"})
    mutants = derive_mutants(patch)
    # one hunk alone is the reference, left out or reverted is the empty solution: none of those
    assert {m.kind for m in mutants} == {"return_constant", "integer_off_by_one"}
    assert {m.description.split(": ", 1)[-1] for m in mutants} == {
        "return None instead of `x + 1`", "return 0 instead of `x + 1`", "`1` -> `2`", "`1` -> `0`"}


def test_new_files_deleted_lines_and_unknown_languages(tmp_path):
    base, patch = commit_pair(tmp_path, {"a.txt": "one\ntwo\nthree\n", "keep.py": "X = 1\nY = 2\n"},
                              {"a.txt": "one\nthree\nfour\n", "keep.py": "X = 1\n", "new.py": "def g():\n    return 5\n"})
    mutants = derive_mutants(patch)
    for m in mutants:
        assert apply_patch(m.patch, base, check=True) is None, m.id
    ids = {m.id for m in mutants}
    assert "line_reverted:a.txt:-2" in ids           # the removed "two" kept
    assert "hunk_left_out:keep.py@1" in ids          # keeping "Y = 2" (its line reverted: the same patch)
    assert "line_reverted:new.py:+2" in ids
    assert not any(m.path == "a.txt" and m.kind not in ("line_reverted", "hunk_alone", "hunk_left_out")
                   for m in mutants)                 # a text file: structural mutants only
    assert "return_constant:new.py:2:0" in ids


def test_documentation_in_the_patch_gives_no_mutant_and_never_splits_the_code(tmp_path):
    """A fix with a changelog line and a docs page: dropping (or keeping only) the docs hunk is an
    equivalent mutant, so the docs are left out and the code's one hunk is not split."""
    before = {"m.py": "def f(x):\n    return x\n", "CHANGELOG.md": "# log\n", "docs/guide.rst": "Guide\n",
              "NEWS": "news\n"}
    after = {"m.py": "def f(x):\n    return x + 1\n", "CHANGELOG.md": "# log\n- f adds one\n",
             "docs/guide.rst": "Guide\nf adds one.\n", "NEWS": "news\nf adds one\n"}
    base, patch = commit_pair(tmp_path, before, after)
    mutants = derive_mutants(patch)
    assert mutants and all(m.path == "m.py" for m in mutants), [m.id for m in mutants]
    assert {m.kind for m in mutants} == {"return_constant", "integer_off_by_one"}
    for m in mutants:
        assert b"CHANGELOG" not in m.patch and apply_patch(m.patch, base, check=True) is None, m.id
    # the same change in a code file is mutated as before
    assert any(m.path == "NEWS.py" for m in derive_mutants(patch.replace(b"NEWS", b"NEWS.py")))
    from sweep.quality.mutants import is_documentation
    assert [p for p in ("README.md", "docs/conf.py", "CHANGES.txt", "src/docs.py", "requirements.txt",
                        "doc/x.c") if is_documentation(p)] == ["README.md", "docs/conf.py", "CHANGES.txt", "doc/x.c"]


def test_masking_per_language():
    assert mask_code('x = "a<b" # c<d', "python") == "x = " + "\x00" * 5 + " " + "\x01" * 5
    assert mask_code("a < b // c < d", "go").startswith("a < b ")
    assert "<" not in mask_code("let c = '<'; // <", "rust")
    assert mask_code("fn f<'a>(x: &'a str)", "rust") == "fn f<'a>(x: &'a str)"
    assert "<" not in mask_code("s = `a < ${b}` /* < */", "javascript")


# One-input tests per language (the lines a PR adds to its test file): their literals are tried as the
# returned constant, so the hard-coded answer of the one input the test checks is a mutant.
ONE_INPUT_TESTS = {
    "python": ("tests/test_helpers.py", "    def test_max(self):\n        self.assertEqual(Max(4, 7), 7)  # not 99\n"),
    "go": ("calc/max_test.go", 'func TestMax(t *testing.T) {\n\tif got := Max(4, 7); got != 7 {\n'
           '\t\tt.Errorf("Max(4, 7) = %d", got) // 99\n\t}\n}\n'),
    "rust": ("tests/clamp.rs", "#[test]\nfn above() {\n    assert_eq!(clamp(42, 0, 7), 7); /* 99 */\n}\n"),
    "javascript": ("test/within.test.js", "test('above', () => {\n  expect(within(-3, 0, 7)).toBe(7); // 99\n});\n"),
    "java": ("src/RangeTest.java", "    @Test void size() {\n        assertEquals(7, Range.size(-3, 3), \"size 99\");\n"
             "    }\n"),
}
LITERALS = {"python": ["4", "7"], "go": ["4", "7", '"Max(4, 7) = %d"'], "rust": ["42", "0", "7"],
            "javascript": ['"above"', "-3", "0", "7"], "java": ["7", "-3", "3", '"size 99"']}
FIRST_RETURN = {"python": "return 4", "go": "return 4", "rust": "return 42;", "javascript": 'return "above"',
                "java": "return 7;"}


@pytest.mark.parametrize("language", sorted(CASES))
def test_the_literals_of_the_prs_tests_become_returned_constants_first(tmp_path, language):
    from sweep.quality.mutants import test_literals
    literals = test_literals([ONE_INPUT_TESTS[language]])
    # numbers and strings of code only (never one in a comment), a sign kept, strings double-quoted
    assert literals == LITERALS[language]
    base, patch = commit_pair(tmp_path, *CASES[language])
    plain = [m for m in derive_mutants(patch) if m.kind == "return_constant"]
    with_tests = [m for m in derive_mutants(patch, literals=literals) if m.kind == "return_constant"]
    literal_ones = [m for m in with_tests if "a literal of the PR's tests" in m.description]
    assert literal_ones and with_tests[:len(literal_ones)] == literal_ones    # taken first within the kind
    assert {m.patch for m in plain} <= {m.patch for m in with_tests}          # None/0 still there, after them
    assert not any("a literal of" in m.description for m in plain)
    rel = next(iter(CASES[language][0]))
    for m in literal_ones:
        assert apply_patch(m.patch, base, check=True) is None, m.id
    # the bound keeps the first literal one: round-robin takes one return_constant in the first round
    bounded = derive_mutants(patch, limit=len(KINDS), literals=literals)
    first = next(m for m in bounded if m.kind == "return_constant")
    assert first == literal_ones[0] and FIRST_RETURN[language] in _applied(tmp_path, base, first.patch, rel)


def test_test_literals_are_bounded_deduplicated_and_only_from_known_languages():
    from sweep.quality.mutants import MAX_TEST_LITERALS, test_literals
    many = "".join(f"    assert f({i}) == {i}\n" for i in range(30))
    assert test_literals([("t.py", many)]) == [str(i) for i in range(MAX_TEST_LITERALS)]
    assert test_literals([("t.py", "x = a - 3\ny = 'it''s'\nz = f(\"a\\\\nb\")\n")]) == ["3"]
    assert test_literals([("notes.txt", "42")]) == [] and test_literals([("t.py", '"""\n42\n"""\n')]) == []
