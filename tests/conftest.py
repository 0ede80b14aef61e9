"""Shared fixtures. The real Slurm cluster lives in tests/slurm_cluster.py (also a CLI)."""
import sys

from tests.slurm_cluster import (  # noqa: F401 - re-exported fixtures
    reap_stale_clusters,
    scrontab_bin,
    slurm_cluster,
    slurm_preempt_cluster,
)


def pytest_sessionstart(session):
    """Clusters left by an earlier run whose pytest was killed are stopped before this one starts."""
    for line in reap_stale_clusters():
        print(line, file=sys.stderr)


def _file_weights() -> dict[str, float]:
    """tests/file_durations.txt: measured seconds per test file (tests/tools/file_durations.py)."""
    from pathlib import Path
    weights = {}
    for line in (Path(__file__).parent / "file_durations.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            seconds, path = line.split(None, 1)
            weights[path.strip()] = float(seconds)
    return weights


def pytest_collection_modifyitems(session, config, items):
    """Heaviest files first (a stable sort, so each file keeps its own order): pytest-xdist's
    --dist loadfile --no-loadscope-reorder (.ci/run) hands files out in this order, so a long file
    never starts last (xdist's own reorder puts the files with the most tests first)."""
    weights = _file_weights()
    root = config.rootpath
    def weight(item):
        try:
            rel = item.path.relative_to(root).as_posix()
        except ValueError:
            return 0.0
        return weights.get(rel, 0.0)
    items.sort(key=weight, reverse=True)
