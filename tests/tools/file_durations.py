"""Write tests/file_durations.txt from a JUnit XML report: each test file's summed test time,
heaviest first. tests/conftest.py runs the files in that order, so under `pytest -n N --dist
loadfile` the long files start first and the suite does not end waiting on one of them.

    python -m pytest -n 3 --dist loadfile --junitxml=/tmp/j.xml && python tests/tools/file_durations.py /tmp/j.xml
"""
from __future__ import annotations

import collections
import sys
import xml.etree.ElementTree as ET  # noqa: S405 - our own pytest's report
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "file_durations.txt"


def main(report: str) -> None:
    per: collections.Counter[str] = collections.Counter()
    for case in ET.parse(report).iter("testcase"):  # noqa: S314
        per[case.get("classname", "").replace(".", "/") + ".py"] += float(case.get("time") or 0)
    lines = [f"{seconds:.0f} {path}" for path, seconds in per.most_common() if seconds >= 10]
    OUT.write_text("# seconds path  (tests/tools/file_durations.py; heaviest first)\n" + "\n".join(lines) + "\n")
    print(f"{OUT}: {len(lines)} files, {sum(per.values()):.0f} s of tests")


if __name__ == "__main__":
    main(sys.argv[1])
