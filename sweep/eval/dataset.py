"""A Harbor dataset directory as an evaluation reads it: one task per subdirectory holding a
task.toml (the directory's name is the task's id), each with its content digest as Harbor computes
it (sweep/harbor/digest.py). Where dataset.toml lists a task's digest, the task must match it."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from runstate.errors import ConfigError
from sweep.harbor.digest import harbor_digest
from sweep.harbor.layout import TASK_TOML

DATASET_TOML = "dataset.toml"


@dataclass(frozen=True)
class DatasetTask:
    task_id: str
    path: Path
    digest: str


def _listed_digests(root: Path) -> dict[str, str]:
    """task name (its last path part) -> digest, from dataset.toml's [[tasks]] (none without one)."""
    manifest = root / DATASET_TOML
    if not manifest.is_file():
        return {}
    try:
        doc = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"unreadable dataset manifest: {exc}", path=manifest) from None
    out: dict[str, str] = {}
    tasks = doc.get("tasks", [])
    for i, entry in enumerate(tasks if isinstance(tasks, list) else []):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError(f"tasks.{i}: expected a table with a name", path=manifest, field=f"tasks.{i}")
        if isinstance(entry.get("digest"), str):
            out[entry["name"].rsplit("/", 1)[-1]] = entry["digest"]
    return out


def read_dataset(root: Path) -> list[DatasetTask]:
    """The dataset's tasks, sorted by id. A ConfigError when there is none, or when a task's
    content is not the digest dataset.toml lists for it."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError("the dataset is not a directory", path=root)
    listed = _listed_digests(root)
    tasks = []
    for entry in sorted(root.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and (entry / TASK_TOML).is_file():
            digest = harbor_digest(entry)
            want = listed.get(entry.name)
            if want is not None and want != digest:
                raise ConfigError(f"task {entry.name}: its content has digest {digest}, but dataset.toml lists "
                                  f"{want}", path=entry)
            tasks.append(DatasetTask(entry.name, entry, digest))
    if not tasks:
        raise ConfigError("no task in the dataset (expected subdirectories holding a task.toml)", path=root)
    return tasks
