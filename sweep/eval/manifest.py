"""The assignment manifest: every task x arm x repeat is one cell, in an order drawn from the seed.

The order (docs/eval.md, "The assignment"), with `random.Random(seed)`:

1. the tasks, sorted by id, are shuffled; the k-th task of that order is block k;
2. within each block, in block order, its (arm, repeat) cells (arms in plan order, repeats 0..R-1)
   are shuffled;
3. the blocks are interleaved: position p runs the j-th cell of block b for p = j * B + b (B blocks),
   so every block gets its j-th cell before any gets its (j+1)-th, and which arm comes j-th is the
   block's own draw: no arm runs systematically earlier than another.

The manifest is frozen at init (manifest.json) with the sha256 of its bytes; each cell records its
task id and digest, arm, repeat, block and position, and its id (`c<position>`) names its run.
"""
from __future__ import annotations

import hashlib
import random
from typing import Sequence

import orjson
from pydantic import BaseModel, ConfigDict, Field

MANIFEST_VERSION = 1


class Cell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cell_id: str
    task_id: str
    digest: str
    arm: str
    repeat: int = Field(ge=0)
    block: int = Field(ge=0)
    position: int = Field(ge=0)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = MANIFEST_VERSION
    seed: int
    arms: list[str]
    repeats: int
    cells: list[Cell]

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n"

    def sha256(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()


def cell_id(position: int) -> str:
    return f"c{position:05d}"


def assign(tasks: Sequence[tuple[str, str]], arms: Sequence[str], repeats: int, seed: int) -> Manifest:
    """The manifest of `tasks` ((task id, digest) pairs) x `arms` x `repeats` for `seed`."""
    if not tasks or not arms or repeats < 1:
        raise ValueError("an assignment needs at least one task, one arm and one repeat")
    if len({t for t, _ in tasks}) != len(tasks) or len(set(arms)) != len(arms):
        raise ValueError("task ids and arm names must be unique")
    rng = random.Random(seed)      # noqa: S311  (a reproducible experimental design, not a secret)
    order = sorted(tasks)
    rng.shuffle(order)
    blocks = []
    for _ in order:
        pairs = [(arm, r) for arm in arms for r in range(repeats)]
        rng.shuffle(pairs)
        blocks.append(pairs)
    cells = []
    per_block = len(arms) * repeats
    for j in range(per_block):
        for b, (task_id, digest) in enumerate(order):
            arm, r = blocks[b][j]
            position = j * len(order) + b
            cells.append(Cell(cell_id=cell_id(position), task_id=task_id, digest=digest, arm=arm, repeat=r,
                              block=b, position=position))
    return Manifest(seed=seed, arms=list(arms), repeats=repeats, cells=cells)


def read_manifest(data: bytes, want_sha256: str | None = None) -> Manifest:
    """The manifest from its frozen bytes; ValueError when they are not the sha256 it was frozen with."""
    if want_sha256 is not None and hashlib.sha256(data).hexdigest() != want_sha256:
        raise ValueError(f"the manifest's bytes are not the sha256 it was frozen with ({want_sha256[:12]})")
    return Manifest.model_validate(orjson.loads(data))
