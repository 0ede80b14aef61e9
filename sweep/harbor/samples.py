"""Small, real git repositories with a base and a head commit: sample pull requests.

Used by the tests, and by `sweep demo` to build a panel at runtime. Each builder makes one
repository under `root` and returns the author's `source` input:
    {"kind": "git", "repo": "/abs/path", "base": sha, "head": sha, "title": ..., "body": ...,
     "test_command": "python3 -m unittest -q"}
The code and tests use the standard library only, so they run inside bubblewrap with the
system python3.

Kinds:
- verified: a bug fix plus a test that fails before and passes after (becomes a verified task);
- no_tests: a fix without any test change (the author refuses it: blocked);
- passes_before: the PR's tests already pass on the base commit (the empty-solution gate fails);
- weak_tests: a fix of two functions whose test checks only one of them: the gates pass, but the
  reference without its second hunk (a mechanical mutant) still scores 1, so it is not verified;
- flaky: a real fix plus a test that depends on the iteration order of a set of strings, so on
  the interpreter's hash seed: it passes under PYTHONHASHSEED=1 and fails under PYTHONHASHSEED=2
  (the gates' first two repeats), and passes about half the time with random seeds. With
  `counter_file`, it passes on even-numbered runs and fails on odd ones instead, as long as the
  file is writable by the test run (isolation "none"); under bubblewrap it falls back to the
  hash order.
Commits have fixed dates and authors, so the same kind always gets the same shas.
"""
from __future__ import annotations

from pathlib import Path

from sweep.git import run_git

TEST_COMMAND = "python3 -m unittest -q"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Sample Author", "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Sample Author", "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
}

MATHX_BUGGY = '''"""Small numeric helpers."""


def clamp(value, low, high):
    """Return value limited to the closed range [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    if value < low:
        return low
    if value > high:
        return low
    return value


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    values = list(values)
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / len(values)
'''

MATHX_FIXED = MATHX_BUGGY.replace("""    if value > high:
        return low
""", """    if value > high:
        return high
""")

TEST_BASE = '''import unittest

from mathx import clamp, mean


class ClampTest(unittest.TestCase):
    def test_below_range_gives_low(self):
        self.assertEqual(clamp(-5, 0, 10), 0)

    def test_inside_range_is_unchanged(self):
        self.assertEqual(clamp(3, 0, 10), 3)


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3]), 2)
'''

TEST_ABOVE = '''

class ClampAboveTest(unittest.TestCase):
    def test_above_range_gives_high(self):
        self.assertEqual(clamp(42, 0, 10), 10)
        self.assertEqual(clamp(7, 0, 5), 5)
'''

TEST_EMPTY_MEAN = '''

class MeanEmptyTest(unittest.TestCase):
    def test_empty_mean_raises(self):
        with self.assertRaises(ValueError):
            mean([])
'''

FLAKY_TEST = '''import unittest

from mathx import clamp

COUNTER_FILE = {counter!r}


def bounds_in_order():
    """True when the set below happens to iterate low-then-high (or, with a writable counter file,
    on even-numbered runs).

    A set of strings iterates in hash order, and string hashes change with the interpreter's
    PYTHONHASHSEED: under seed 1 this is True, under seed 2 False, and with random hash seeds (the
    default) it differs from run to run.
    """
    if COUNTER_FILE:
        try:
            with open(COUNTER_FILE) as fh:
                runs = int(fh.read().strip() or 0)
        except (OSError, ValueError):
            runs = 0
        try:
            with open(COUNTER_FILE, "w") as fh:
                fh.write(str(runs + 1))
            return runs % 2 == 0
        except OSError:
            pass
    return list({{"low", "high"}}) == ["low", "high"]


class ClampAboveTest(unittest.TestCase):
    def test_above_range_gives_high(self):
        self.assertEqual(clamp(42, 0, 10), 10)

    def test_bounds_are_listed_low_then_high(self):
        # A classic real-world flaky test: it relies on the iteration order of a set of strings.
        self.assertTrue(bounds_in_order(), "the set iterated high before low on this run")
'''


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = run_git(["-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args], repo=repo,
                  env={**_GIT_ENV, **(env or {})})
    return out.decode().strip()


def _commit(repo: Path, files: dict[str, str], message: str, when: str) -> str:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, env={"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when})
    return _git(repo, "rev-parse", "HEAD")


def _new_repo(root: Path, name: str) -> Path:
    repo = Path(root).resolve() / name
    if repo.exists():
        raise FileExistsError(f"{repo} already exists")
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    return repo


def _base(repo: Path) -> str:
    return _commit(repo, {
        "README.md": "# mathx\n\nSmall numeric helpers. Run the tests with `python3 -m unittest`.\n",
        "mathx.py": MATHX_BUGGY,
        "tests/__init__.py": "",
        "tests/test_mathx.py": TEST_BASE,
    }, "Initial mathx", "2024-01-01T00:00:00+00:00")


def _source(repo: Path, base: str, head: str, title: str, body: str) -> dict:
    return {"kind": "git", "repo": str(repo), "base": base, "head": head, "title": title, "body": body,
            "test_command": TEST_COMMAND}


def make_verified_pr(root: Path, name: str = "verified", *, title: str | None = None,
                     body: str | None = None, extra_files: dict[str, str] | None = None) -> dict:
    """A bug fix with a test that fails on the base commit and passes with the fix.

    `extra_files` (relative path -> text) are added to the head commit, e.g. to give the PR
    hostile file names.
    """
    repo = _new_repo(root, name)
    base = _base(repo)
    head = _commit(repo, {"mathx.py": MATHX_FIXED, "tests/test_mathx.py": TEST_BASE + TEST_ABOVE,
                          **(extra_files or {})},
                   "Fix clamp() above the range", "2024-01-02T00:00:00+00:00")
    return _source(repo, base, head,
                   title if title is not None else "Fix clamp() returning the lower bound above the range",
                   body if body is not None else
                   "`clamp(42, 0, 10)` returns 0; it should return 10, the upper bound.\n\n"
                   "Values above the range must be limited to `high`.")


def make_pr_without_tests(root: Path, name: str = "no-tests") -> dict:
    """The same fix, but the PR touches no test file."""
    repo = _new_repo(root, name)
    base = _base(repo)
    head = _commit(repo, {"mathx.py": MATHX_FIXED}, "Fix clamp() above the range (no test)",
                   "2024-01-02T00:00:00+00:00")
    return _source(repo, base, head, "Fix clamp() above the range",
                   "Values above the range now give the upper bound. No test added.")


def make_pr_tests_pass_before(root: Path, name: str = "passes-before") -> dict:
    """The PR's new test checks behaviour the base commit already has."""
    repo = _new_repo(root, name)
    base = _base(repo)
    head = _commit(repo, {"mathx.py": MATHX_BUGGY.replace("Arithmetic mean of a non-empty sequence.",
                                                          "Arithmetic mean; raises ValueError when empty."),
                          "tests/test_mathx.py": TEST_BASE + TEST_EMPTY_MEAN},
                   "Document and test mean() on empty input", "2024-01-02T00:00:00+00:00")
    return _source(repo, base, head, "mean() of an empty sequence raises ValueError",
                   "Documents the existing behaviour and adds a test for it.")


MIDPOINT_BUGGY = '''

def midpoint(low, high):
    """The integer midpoint of [low, high]."""
    return (low + high) // 3
'''


def make_weak_tests_pr(root: Path, name: str = "weak-tests") -> dict:
    """clamp() and midpoint() fixed, but the PR's test only checks clamp(): a wrong solution that
    leaves midpoint() broken passes the tests (weak tests, as on real PRs that fix two branches)."""
    repo = _new_repo(root, name)
    base = _commit(repo, {
        "README.md": "# mathx\n\nSmall numeric helpers.\n",
        "mathx.py": MATHX_BUGGY + MIDPOINT_BUGGY,
        "tests/__init__.py": "",
        "tests/test_mathx.py": TEST_BASE,
    }, "Initial mathx", "2024-01-01T00:00:00+00:00")
    head = _commit(repo, {"mathx.py": MATHX_FIXED + MIDPOINT_BUGGY.replace("// 3", "// 2"),
                          "tests/test_mathx.py": TEST_BASE + TEST_ABOVE},
                   "Fix clamp() above the range and midpoint()", "2024-01-02T00:00:00+00:00")
    return _source(repo, base, head, "Fix clamp() above the range and midpoint()",
                   "`clamp(42, 0, 10)` should return 10, and `midpoint(0, 10)` should return 5.")


def make_flaky_pr(root: Path, name: str = "flaky", *, counter_file: str | Path | None = None) -> dict:
    """A real fix whose new test file also holds a test that depends on the hash seed (flaky)."""
    repo = _new_repo(root, name)
    base = _base(repo)
    counter = str(Path(counter_file).resolve()) if counter_file is not None else None
    head = _commit(repo, {"mathx.py": MATHX_FIXED,
                          "tests/test_clamp_above.py": FLAKY_TEST.format(counter=counter)},
                   "Fix clamp() above the range, with a flaky test", "2024-01-02T00:00:00+00:00")
    return _source(repo, base, head, "Fix clamp() above the range",
                   "`clamp(42, 0, 10)` should return 10. The new test file also checks the order of the bounds.")


SAMPLE_BUILDERS = {
    "verified": make_verified_pr,
    "no_tests": make_pr_without_tests,
    "passes_before": make_pr_tests_pass_before,
    "flaky": make_flaky_pr,
    "weak_tests": make_weak_tests_pr,
}


def make_pr_repo(root: Path, kind: str = "verified", name: str | None = None, **options) -> dict:
    """Build the sample `kind` under `root` (named after the kind unless `name` is given)."""
    try:
        builder = SAMPLE_BUILDERS[kind]
    except KeyError:
        raise ValueError(f"unknown sample kind {kind!r}; known: {', '.join(SAMPLE_BUILDERS)}") from None
    return builder(root, name or kind.replace("_", "-"), **options)
