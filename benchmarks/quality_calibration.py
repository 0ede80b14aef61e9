#!/usr/bin/env python
"""Does "verified" catch planted defects, without blocking clean tasks? (issue 22, the mechanical path)

Builds a panel of small real pull requests on the sample `mathx` repository (sweep/harbor/samples.py):
each either carries one planted defect or is clean, then runs the whole pipeline with the oracle
roles (gates, probes with the mechanical mutants, oracle review, one oracle rollout) through
`sweep init` + `sweep tick` on the local backend, and reports:

- detection rate: planted-defect tasks that did not end `verified`, per defect class;
- false-block rate: clean tasks that did not end `verified`.

Defect classes (each task fails before the fix and passes after it, so the gates' "empty scores 0"
and FAIL_TO_PASS do not catch it by themselves, except where noted):
- accepts_constant: the test checks only that the result is not the old wrong value
  (`assertNotEqual(clamp(42, 0, 10), 0)`), so `return None` passes;
- untested_hunk: a two-function fix whose test checks one function (the weak_tests sample);
- format_only: the verifier checks only the shape of the output (`describe()` returns digits),
  not the value, so the clamp() hunk can be left out;
- flaky: the test depends on the hash seed (the flaky sample; the repeat gate's job);
- rejects_valid_alternative and leaks_fix: a test pinned to one spelling of the fix, and an
  instruction that contains the fix: the mechanical path has no valid-alternative probe and no
  instruction check, so these measure what it does NOT catch (an agent reviewer's or a prepared
  probe's job).

Usage (from the repository root; about 5 minutes on an idle 2-core machine):
    .venv/bin/python benchmarks/quality_calibration.py [--root /var/tmp/quality-calibration]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sweep.harbor import samples  # noqa: E402

ABOVE = samples.TEST_BASE + '''

class ClampAboveTest(unittest.TestCase):
    def test_above_range_is_not_the_lower_bound(self):
        self.assertNotEqual(clamp(42, 0, 10), 0)
'''

DESCRIBE_BUGGY = '''

def describe(value, low, high):
    """The clamped value, as digits."""
    return "value: " + str(clamp(value, low, high))
'''
DESCRIBE_FIXED = DESCRIBE_BUGGY.replace('return "value: " + str(', "return str(")
FORMAT_TEST = samples.TEST_BASE.replace("from mathx import clamp, mean", "from mathx import clamp, describe, mean") + '''

class DescribeTest(unittest.TestCase):
    def test_describe_gives_digits(self):
        self.assertRegex(describe(42, 0, 10), r"^[0-9]+$")
'''

PINNED_TEST = samples.TEST_BASE + '''

class ClampSourceTest(unittest.TestCase):
    def test_above_range_gives_high(self):
        self.assertEqual(clamp(42, 0, 10), 10)

    def test_the_fix_is_spelled_return_high(self):
        import inspect
        import mathx
        self.assertIn("return high", inspect.getsource(mathx.clamp))
'''

BOTH_TESTED = samples.TEST_BASE + samples.TEST_ABOVE + '''

class MidpointTest(unittest.TestCase):
    def test_midpoint(self):
        from mathx import midpoint
        self.assertEqual(midpoint(0, 10), 5)
        self.assertEqual(midpoint(4, 8), 6)
'''


def _pr(root: Path, name: str, base_files: dict[str, str], head_files: dict[str, str], title: str,
        body: str) -> dict:
    repo = samples._new_repo(root, name)
    base = samples._commit(repo, {"README.md": "# mathx\n", "tests/__init__.py": "", **base_files}, "base",
                           "2024-01-01T00:00:00+00:00")
    head = samples._commit(repo, head_files, title, "2024-01-02T00:00:00+00:00")
    return samples._source(repo, base, head, title, body)


def panel(root: Path) -> list[tuple[str, str, dict]]:
    """(run id, class, source) for every task: the defect class, or "clean"."""
    base = {"mathx.py": samples.MATHX_BUGGY, "tests/test_mathx.py": samples.TEST_BASE}
    two = {"mathx.py": samples.MATHX_BUGGY + samples.MIDPOINT_BUGGY, "tests/test_mathx.py": samples.TEST_BASE}
    fixed_two = samples.MATHX_FIXED + samples.MIDPOINT_BUGGY.replace("// 3", "// 2")
    out = [
        ("constant", "accepts_constant", _pr(root, "constant", base, {"mathx.py": samples.MATHX_FIXED,
                                                                      "tests/test_mathx.py": ABOVE},
                                             "Fix clamp() above the range", "clamp(42, 0, 10) should be 10.")),
        ("untested-hunk", "untested_hunk", samples.make_weak_tests_pr(root, "untested-hunk")),
        ("format-only", "format_only", _pr(root, "format-only",
                                           {"mathx.py": samples.MATHX_BUGGY + DESCRIBE_BUGGY,
                                            "tests/test_mathx.py": samples.TEST_BASE},
                                           {"mathx.py": samples.MATHX_FIXED + DESCRIBE_FIXED,
                                            "tests/test_mathx.py": FORMAT_TEST},
                                           "Fix clamp() above the range; describe() gives digits only",
                                           "describe(42, 0, 10) should be '10'.")),
        ("flaky", "flaky", samples.make_flaky_pr(root, "flaky")),
        ("pinned", "rejects_valid_alternative", _pr(root, "pinned", base, {"mathx.py": samples.MATHX_FIXED,
                                                                           "tests/test_mathx.py": PINNED_TEST},
                                                    "Fix clamp() above the range", "clamp(42, 0, 10) should be 10.")),
        ("leaky", "leaks_fix", _pr(root, "leaky", base, {"mathx.py": samples.MATHX_FIXED,
                                                         "tests/test_mathx.py": samples.TEST_BASE + samples.TEST_ABOVE},
                                   "Fix clamp() above the range",
                                   "In clamp(), replace `return low` under `if value > high:` with `return high`.")),
        ("clean-clamp", "clean", samples.make_verified_pr(root, "clean-clamp")),
        ("clean-two", "clean", _pr(root, "clean-two", two, {"mathx.py": fixed_two, "tests/test_mathx.py": BOTH_TESTED},
                                   "Fix clamp() and midpoint()", "Both were wrong.")),
    ]
    return out


def run(root: Path) -> dict:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    tasks = panel(root / "repos")
    cands = [{"id": rid, "repo": src["repo"], "base": src["base"], "head": src["head"], "title": src["title"],
              "body": src["body"], "options": {"test_command": src["test_command"]}} for rid, _, src in tasks]
    plan = {"name": "calibration", "target_verified": 100, "max_parallel": 2, "max_attempts": 2,
            "defaults": {"quality": {"max_repairs": 0}}, "scheduler": {"backend": "local"},
            "tick": {"submit_grace_s": 0}, "candidates": cands}
    (root / "plan.json").write_text(json.dumps(plan))
    sweep = [sys.executable, "-m", "sweep"]
    camp = root / "campaign"
    subprocess.run([*sweep, "init", str(root / "plan.json"), "--campaign", str(camp)], check=True, cwd=REPO,
                   capture_output=True)
    started = time.monotonic()
    while True:
        subprocess.run([*sweep, "tick", "--campaign", str(camp)], check=True, cwd=REPO, capture_output=True)
        st = json.loads(subprocess.run([*sweep, "status", "--json", "--campaign", str(camp)], check=True, cwd=REPO,
                                       capture_output=True, text=True).stdout)
        if st["counts"]["queued"] == 0 and st["counts"]["active"] == 0:
            break
        if time.monotonic() - started > 1800:
            raise SystemExit("the calibration campaign did not finish in 30 minutes")
        time.sleep(1)
    ended = {e["run_id"]: e for e in st["ended"]}
    rows = []
    for rid, cls, _ in tasks:
        e = ended[rid]
        rows.append({"run_id": rid, "class": cls, "outcome": e["outcome"], "reason": e["reason"],
                     "quality": e.get("quality"), "blocked_verified": e["outcome"] != "verified"})
    return {"rows": rows, "seconds": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default="/var/tmp/quality-calibration")
    args = parser.parse_args()
    result = run(Path(args.root))
    rows = result["rows"]
    print(f"{'run':<15} {'class':<26} {'outcome':<22} {'reason':<14} quality")
    for r in rows:
        print(f"{r['run_id']:<15} {r['class']:<26} {r['outcome']:<22} {str(r['reason'] or ''):<14} {r['quality'] or ''}")
    planted = [r for r in rows if r["class"] != "clean"]
    weak = [r for r in planted if r["class"] in ("accepts_constant", "untested_hunk", "format_only", "flaky")]
    clean = [r for r in rows if r["class"] == "clean"]
    print(f"\ndetection (all planted defects): {sum(r['blocked_verified'] for r in planted)}/{len(planted)}")
    print(f"detection (weak-test defects: constant, untested hunk, format only, flaky): "
          f"{sum(r['blocked_verified'] for r in weak)}/{len(weak)}")
    print(f"false blocks (clean tasks not verified): {sum(r['blocked_verified'] for r in clean)}/{len(clean)}")
    print(f"campaign wall time: {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
