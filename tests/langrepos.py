"""Small real git repositories in each language sweep's runners cover, for the toolchain e2e tests.

Every language gets the same story, written with real git (fixed authors and dates, so the same
shas every time), in its own idiom: `clamp(x, lo, hi)` returns `lo` above the range.

- `fix`: the PR fixes clamp and adds a test for the upper bound (fails before, passes after): it
  must end verified with FAIL_TO_PASS = that one test and PASS_TO_PASS = the base's test;
- `noop`: the PR only rewords a comment and adds a test for behaviour the base already has: its
  new test passes before the fix, so it must not be verified.

Each builder returns {"repo", "base", "fix", "noop", "test_command", "f2p", "p2p", ...}: f2p and
p2p are the test names (what every id of that test contains, whatever the runner's id format).
"""
from __future__ import annotations

from pathlib import Path

from sweep.harbor.samples import _commit, _git, _new_repo

BASE_DATE, FIX_DATE, NOOP_DATE = "2024-01-01T00:00:00+00:00", "2024-01-02T00:00:00+00:00", "2024-01-03T00:00:00+00:00"


def _build(root: Path, name: str, base: dict[str, str], fix: dict[str, str], noop: dict[str, str]) -> dict:
    repo = _new_repo(root, name)
    base_sha = _commit(repo, base, f"{name}: clamp", BASE_DATE)
    fix_sha = _commit(repo, fix, "Fix clamp above the range", FIX_DATE)
    _git(repo, "branch", "fix", fix_sha)
    _git(repo, "checkout", "-q", "-b", "noop", base_sha)
    noop_sha = _commit(repo, noop, "Reword clamp's comment, test the lower bound again", NOOP_DATE)
    _git(repo, "checkout", "-q", "main")
    return {"repo": str(repo), "base": base_sha, "fix": fix_sha, "noop": noop_sha}


# ---- Python ------------------------------------------------------------------------------------

PY_BUGGY = "def clamp(x, lo, hi):\n    # limit x to [lo, hi]\n    return max(lo, x) if x <= hi else lo\n"
PY_FIXED = "def clamp(x, lo, hi):\n    # limit x to [lo, hi]\n    return max(lo, min(x, hi))\n"
PY_REWORDED = PY_BUGGY.replace("# limit x to [lo, hi]", "# x, limited to the closed range [lo, hi]")


def make_pytest_repo(root: Path) -> dict:
    base_test = "from clampx import clamp\n\n\ndef test_below_gives_low():\n    assert clamp(-5, 0, 10) == 0\n"
    src = _build(root, "py-pytest", {"clampx.py": PY_BUGGY, "tests/test_clampx.py": base_test},
                 {"clampx.py": PY_FIXED, "tests/test_clampx.py": base_test
                  + "\n\ndef test_above_gives_high():\n    assert clamp(42, 0, 10) == 10\n    assert clamp(7, 0, 5) == 5\n"},
                 {"clampx.py": PY_REWORDED, "tests/test_clampx.py": base_test
                  + "\n\ndef test_inside_is_kept():\n    assert clamp(5, 0, 10) == 5\n"})
    return {**src, "test_command": "python3 -m pytest -q", "f2p": ["test_above_gives_high"],
            "p2p": ["test_below_gives_low"], "noop_p2p": ["test_below_gives_low", "test_inside_is_kept"]}


def make_unittest_repo(root: Path) -> dict:
    head = ("import unittest\n\nfrom clampx import clamp\n\n\nclass ClampTest(unittest.TestCase):\n"
            "    def test_below_gives_low(self):\n        self.assertEqual(clamp(-5, 0, 10), 0)\n")
    src = _build(root, "py-unittest", {"clampx.py": PY_BUGGY, "tests/__init__.py": "", "tests/test_clampx.py": head},
                 {"clampx.py": PY_FIXED, "tests/test_clampx.py": head
                  + "\n    def test_above_gives_high(self):\n        self.assertEqual(clamp(42, 0, 10), 10)\n"
                    "        self.assertEqual(clamp(7, 0, 5), 5)\n"},
                 {"clampx.py": PY_REWORDED, "tests/test_clampx.py": head
                  + "\n    def test_inside_is_kept(self):\n        self.assertEqual(clamp(5, 0, 10), 5)\n"})
    return {**src, "test_command": "python3 -m unittest -q", "f2p": ["test_above_gives_high"],
            "p2p": ["test_below_gives_low"], "noop_p2p": ["test_below_gives_low", "test_inside_is_kept"]}


# ---- Go ----------------------------------------------------------------------------------------

GO_MOD = "module example.com/clampx\n\ngo 1.19\n"
GO_BUGGY = ("package clampx\n\n// Clamp limits x to [lo, hi].\nfunc Clamp(x, lo, hi int) int {\n"
            "\tif x > hi {\n\t\treturn lo\n\t}\n\tif x < lo {\n\t\treturn lo\n\t}\n\treturn x\n}\n")
GO_FIXED = GO_BUGGY.replace("\tif x > hi {\n\t\treturn lo\n\t}", "\tif x > hi {\n\t\treturn hi\n\t}")
GO_TEST = ("package clampx\n\nimport \"testing\"\n\nfunc TestBelowGivesLow(t *testing.T) {\n"
           "\tif got := Clamp(-5, 0, 10); got != 0 {\n\t\tt.Fatalf(\"Clamp(-5, 0, 10) = %d\", got)\n\t}\n}\n")


def make_go_repo(root: Path) -> dict:
    src = _build(root, "go-test", {"go.mod": GO_MOD, "clamp.go": GO_BUGGY, "clamp_test.go": GO_TEST},
                 {"clamp.go": GO_FIXED, "clamp_test.go": GO_TEST
                  + "\nfunc TestAboveGivesHigh(t *testing.T) {\n\tif got := Clamp(42, 0, 10); got != 10 {\n"
                    "\t\tt.Fatalf(\"Clamp(42, 0, 10) = %d\", got)\n\t}\n"
                    "\tif got := Clamp(7, 0, 5); got != 5 {\n\t\tt.Fatalf(\"Clamp(7, 0, 5) = %d\", got)\n\t}\n}\n"},
                 {"clamp.go": GO_BUGGY.replace("limits x to", "returns x limited to"), "clamp_test.go": GO_TEST
                  + "\nfunc TestInsideIsKept(t *testing.T) {\n\tif got := Clamp(5, 0, 10); got != 5 {\n"
                    "\t\tt.Fatalf(\"Clamp(5, 0, 10) = %d\", got)\n\t}\n}\n"})
    return {**src, "test_command": "go test ./...", "f2p": ["TestAboveGivesHigh"], "p2p": ["TestBelowGivesLow"],
            "noop_p2p": ["TestBelowGivesLow", "TestInsideIsKept"]}


# ---- Rust --------------------------------------------------------------------------------------

CARGO_TOML = '[package]\nname = "clampx"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n'
RS_BUGGY = ("/// Limits x to [lo, hi].\npub fn clamp(x: i64, lo: i64, hi: i64) -> i64 {\n"
            "    if x > hi {\n        lo\n    } else if x < lo {\n        lo\n    } else {\n        x\n    }\n}\n")
RS_FIXED = RS_BUGGY.replace("    if x > hi {\n        lo\n", "    if x > hi {\n        hi\n")
RS_TEST = ("use clampx::clamp;\n\n#[test]\nfn below_gives_low() {\n    assert_eq!(clamp(-5, 0, 10), 0);\n}\n")


def make_cargo_repo(root: Path) -> dict:
    src = _build(root, "rust-cargo", {"Cargo.toml": CARGO_TOML, "Cargo.lock": CARGO_LOCK, "src/lib.rs": RS_BUGGY,
                                      "tests/clamp.rs": RS_TEST},
                 {"src/lib.rs": RS_FIXED, "tests/clamp.rs": RS_TEST
                  + "\n#[test]\nfn above_gives_high() {\n    assert_eq!(clamp(42, 0, 10), 10);\n    assert_eq!(clamp(7, 0, 5), 5);\n}\n"},
                 {"src/lib.rs": RS_BUGGY.replace("Limits x to", "Returns x limited to"), "tests/clamp.rs": RS_TEST
                  + "\n#[test]\nfn inside_is_kept() {\n    assert_eq!(clamp(5, 0, 10), 5);\n}\n"})
    return {**src, "test_command": "cargo test", "f2p": ["above_gives_high"], "p2p": ["below_gives_low"],
            "noop_p2p": ["below_gives_low", "inside_is_kept"]}


CARGO_LOCK = ("# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\n"
              "version = 3\n\n[[package]]\nname = \"clampx\"\nversion = \"0.1.0\"\n")


# ---- JavaScript --------------------------------------------------------------------------------

JS_BUGGY = ("// Limits x to [lo, hi].\nfunction clamp(x, lo, hi) {\n  if (x > hi) return lo;\n"
            "  return Math.max(lo, x);\n}\n\nmodule.exports = { clamp };\n")
JS_FIXED = JS_BUGGY.replace("if (x > hi) return lo;", "if (x > hi) return hi;")
JS_REWORDED = JS_BUGGY.replace("Limits x to", "Returns x limited to")


def make_node_test_repo(root: Path) -> dict:
    head = ("const test = require('node:test');\nconst assert = require('node:assert');\n"
            "const { clamp } = require('../clamp.js');\n\n"
            "test('below gives low', () => {\n  assert.strictEqual(clamp(-5, 0, 10), 0);\n});\n")
    pkg = '{\n  "name": "clampx",\n  "version": "0.1.0",\n  "private": true\n}\n'
    src = _build(root, "js-node-test", {"package.json": pkg, "clamp.js": JS_BUGGY, "test/clamp.test.js": head},
                 {"clamp.js": JS_FIXED, "test/clamp.test.js": head
                  + "\ntest('above gives high', () => {\n  assert.strictEqual(clamp(42, 0, 10), 10);\n  assert.strictEqual(clamp(7, 0, 5), 5);\n});\n"},
                 {"clamp.js": JS_REWORDED, "test/clamp.test.js": head
                  + "\ntest('inside is kept', () => {\n  assert.strictEqual(clamp(5, 0, 10), 5);\n});\n"})
    return {**src, "test_command": "node --test", "f2p": ["above gives high"], "p2p": ["below gives low"],
            "noop_p2p": ["below gives low", "inside is kept"]}


def make_jest_repo(root: Path) -> dict:
    head = ("const { clamp } = require('../clamp.js');\n\n"
            "test('below gives low', () => {\n  expect(clamp(-5, 0, 10)).toBe(0);\n});\n")
    pkg = '{\n  "name": "clampx-jest",\n  "version": "0.1.0",\n  "private": true\n}\n'
    src = _build(root, "js-jest", {"package.json": pkg, "clamp.js": JS_BUGGY, "__tests__/clamp.test.js": head},
                 {"clamp.js": JS_FIXED, "__tests__/clamp.test.js": head
                  + "\ntest('above gives high', () => {\n  expect(clamp(42, 0, 10)).toBe(10);\n  expect(clamp(7, 0, 5)).toBe(5);\n});\n"},
                 {"clamp.js": JS_REWORDED, "__tests__/clamp.test.js": head
                  + "\ntest('inside is kept', () => {\n  expect(clamp(5, 0, 10)).toBe(5);\n});\n"})
    return {**src, "test_command": "jest --ci --no-watchman", "f2p": ["above gives high"], "p2p": ["below gives low"],
            "noop_p2p": ["below gives low", "inside is kept"]}


# ---- Java (JUnit 5 through its console launcher, JUnit XML reports) --------------------------------

JUNIT_JAR = "/usr/share/java/junit-platform-console-standalone.jar"
JAVA_BUGGY = ("package clampx;\n\npublic final class Clamp {\n    /** Limits x to [lo, hi]. */\n"
              "    public static int clamp(int x, int lo, int hi) {\n        if (x > hi) return lo;\n"
              "        return Math.max(lo, x);\n    }\n}\n")
JAVA_FIXED = JAVA_BUGGY.replace("if (x > hi) return lo;", "if (x > hi) return hi;")
JAVA_TEST = ("package clampx;\n\nimport static org.junit.jupiter.api.Assertions.assertEquals;\n\n"
             "import org.junit.jupiter.api.Test;\n\nclass ClampTest {\n    @Test\n    void belowGivesLow() {\n"
             "        assertEquals(0, Clamp.clamp(-5, 0, 10));\n    }\n@@MORE@@}\n")
# The repository's own test script: compile, then JUnit's console launcher writes its XML reports
# where sweep says ($SWEEP_REPORT_DIR, the `junit` runner's contract).
RUN_TESTS = f"""#!/bin/sh
set -eu
rm -rf build
mkdir -p build/classes
javac -d build/classes -cp {JUNIT_JAR} $(find src test -name '*.java' | sort)
exec java -jar {JUNIT_JAR} --disable-banner --details=tree --class-path build/classes --scan-class-path \\
    --reports-dir "${{SWEEP_REPORT_DIR:-build/reports}}"
"""


def make_junit_repo(root: Path) -> dict:
    src = _build(root, "java-junit", {"run-tests.sh": RUN_TESTS, "src/clampx/Clamp.java": JAVA_BUGGY,
                                      "test/clampx/ClampTest.java": JAVA_TEST.replace("@@MORE@@", "")},
                 {"src/clampx/Clamp.java": JAVA_FIXED, "test/clampx/ClampTest.java": JAVA_TEST.replace(
                     "@@MORE@@", "\n    @Test\n    void aboveGivesHigh() {\n        assertEquals(10, Clamp.clamp(42, 0, 10));\n"
                     "        assertEquals(5, Clamp.clamp(7, 0, 5));\n    }\n")},
                 {"src/clampx/Clamp.java": JAVA_BUGGY.replace("Limits x to", "Returns x limited to"),
                  "test/clampx/ClampTest.java": JAVA_TEST.replace(
                     "@@MORE@@", "\n    @Test\n    void insideIsKept() {\n        assertEquals(5, Clamp.clamp(5, 0, 10));\n    }\n")})
    return {**src, "test_command": "sh run-tests.sh", "test_runner": "junit", "f2p": ["aboveGivesHigh"],
            "p2p": ["belowGivesLow"], "noop_p2p": ["belowGivesLow", "insideIsKept"]}


LANGUAGES = {"pytest": make_pytest_repo, "unittest": make_unittest_repo, "go": make_go_repo,
             "cargo": make_cargo_repo, "node": make_node_test_repo, "jest": make_jest_repo, "junit": make_junit_repo}
