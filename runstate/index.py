"""The ended-runs index: a derived cache that lets the tick and `sweep status` skip ended runs.

The truth stays in each run's state.json. `ended-index.jsonl` (campaign root) only remembers, for
runs that ended for good, the outcome, reason and final spend the tick and status need, keyed by
run id and by the identity of the state.json those values were read from: (inode, size, mtime_ns,
ctime_ns). A reader trusts an entry only while a stat(2) of that state.json still gives the same
identity; any write to it — an atomic replace makes a new inode and a new ctime, an edit in place
a new ctime — makes the entry stale and the run is read from its files again. Nobody who writes
state.json has to know the index exists (a `retry` that re-opens an ended run is seen by the
identity check, not told).

File format, one JSON value per line, appended with one write(2) per tick:
    {"sweep_ended_index": 1}                                   first line (anything else: discarded)
    ["RUN_ID", ino, size, mtime_ns, ctime_ns, "OUTCOME", "REASON" or null, spent_usd, "LANE"]  an entry
    ["RUN_ID"]                                                 forget RUN_ID (its run changed)
A later line for the same run wins.

Only the tick writes it (under the tick lock), and only for a run whose ending cannot change
without a state.json write: state ended, no lease.json, its controller job absent from a queue
that was read successfully BEFORE the file (a dead job writes nothing, and only a tick creates
leases), ended longer ago than the tick's window for tidying lease leftovers, and a state.json
whose ctime is more than RACY_NS old (a write in the same clock tick as the read could otherwise
keep the identity; git's "racy" rule).

Crash anywhere: the index can be missing (every run is read from its files), behind (runs not in
it are read from their files), torn at its last line (that line is ignored and the tick rewrites
the file), garbage (discarded and rewritten), or hold entries whose runs changed or vanished (the
stat check drops them). None of these can make a reader trust an ending the files do not hold.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import orjson

from runstate.files import MAX_READ_BYTES, read_bytes, write_atomic
from runstate.paths import INDEX_FILE
HEADER = {"sweep_ended_index": 1}
HEADER_LINE = orjson.dumps(HEADER) + b"\n"
RACY_NS = 1_000_000_000       # a state.json changed less than 1 s before it was read is not indexed

Identity = tuple[int, int, int, int]     # st_ino, st_size, st_mtime_ns, st_ctime_ns


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Ending(NamedTuple):
    """What the tick and status need of an ended run, and the state.json identity it came from.
    (A NamedTuple, not a dataclass: 90,000 of them are built per tick and per status.)"""
    run_id: str
    ident: Identity
    outcome: str
    reason: str | None
    spent_usd: float
    lane: str = "cpu"
    cause: str | None = None        # runstate/causes.py (lines written before causes have none)
    quality: str | None = None      # runstate.models.quality_summary of its checkpoints ("mutants 2/2")

    def line(self) -> list[object]:
        out: list[object] = [self.run_id, *self.ident, self.outcome, self.reason, self.spent_usd, self.lane, self.cause]
        return out if self.quality is None else [*out, self.quality]


@dataclass
class EndedIndex:
    entries: dict[str, Ending] = field(default_factory=dict)
    lines: int = 0                  # lines in the file (entries, forgets, bad ones): to decide compaction
    problem: str | None = None      # missing, torn, garbage, refused: the tick rewrites the file

    @property
    def needs_rewrite(self) -> bool:
        return self.problem is not None or self.lines > 2 * len(self.entries) + 1000


def index_path(campaign: Path | str) -> str:
    return f"{os.fspath(campaign)}/{INDEX_FILE}"


_ENTRY_TYPES = (str, int, int, int, int, str, str)


def _parse_entry(row: object) -> Ending | str | None:
    """An Ending, a run id to forget, or None for a line that is not one of the two.
    (One tuple comparison of the field types: this runs once per ended run per tick.)"""
    if type(row) is not list:
        return None
    if 9 <= len(row) <= 11:         # 9: written before causes; 11: with a quality summary
        rid, ino, size, mtime, ctime, outcome, reason, spent, lane = row[:9]
        cause = row[9] if len(row) >= 10 else None
        quality = row[10] if len(row) == 11 else None
        if (type(rid), type(ino), type(size), type(mtime), type(ctime), type(outcome), type(lane)) == _ENTRY_TYPES \
                and (reason is None or type(reason) is str) and (type(spent) is float or type(spent) is int) \
                and (cause is None or type(cause) is str) and (quality is None or type(quality) is str):
            return Ending(rid, (ino, size, mtime, ctime), outcome, reason, float(spent), lane, cause, quality)
        return None
    if len(row) == 1 and type(row[0]) is str:
        return row[0]
    return None


def load_index(campaign: Path | str) -> EndedIndex:
    """The index as written, never raising: a missing, refused, torn or garbage file comes back
    with `problem` set and whatever well-formed entries it had (each is still checked by stat)."""
    path = index_path(campaign)
    index = EndedIndex()
    try:
        raw = read_bytes(path, MAX_READ_BYTES)      # the read path's refusals: symlink, FIFO, device, size
    except OSError as exc:
        index.problem = f"unreadable: {exc.strerror or exc}"
        return index
    if raw is None:
        index.problem = "missing"
        return index
    if not raw.startswith(HEADER_LINE):
        index.problem = "no header: not an index this sweep wrote"
        return index
    body = raw[len(HEADER_LINE):]
    if body and not body.endswith(b"\n"):
        index.problem = "torn last line"            # a tick killed inside its append
        body = body[:body.rfind(b"\n") + 1]
    lines = body.split(b"\n")[:-1] if body else []
    index.lines = len(lines)
    try:
        rows = orjson.loads(b"[" + b",".join(lines) + b"]") if lines else []
    except orjson.JSONDecodeError:
        rows = []
        for line in lines:                       # slow path: find and skip the bad lines
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                rows.append(None)
    entries = index.entries
    bad = 0
    for row in rows:
        parsed = _parse_entry(row)
        if parsed is None:
            bad += 1
        elif isinstance(parsed, str):
            entries.pop(parsed, None)
        else:
            entries[parsed.run_id] = parsed
    if bad and index.problem is None:
        index.problem = f"{bad} unreadable line(s)"
    return index


def still_true(root: str | int, ending: Ending) -> bool:
    """True while runs/<id>/state.json is the very file the ending was read from. `root` is the
    runs/ directory's path, or a descriptor of it (the stat then resolves only `<id>/state.json`:
    the cheaper lookup a scan of 90,000 entries uses)."""
    try:
        if type(root) is int:
            st = os.stat(f"{ending.run_id}/state.json", dir_fd=root, follow_symlinks=False)
        else:
            st = os.stat(f"{root}/{ending.run_id}/state.json", follow_symlinks=False)
    except OSError:
        return False                  # deleted run (or unreadable): read from its files, if any
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == ending.ident


def is_racy(ident: Identity, now_ns: int) -> bool:
    return ident[3] > now_ns - RACY_NS or ident[2] > now_ns - RACY_NS


def write_index(campaign: Path | str, entries: dict[str, Ending]) -> None:
    """Replace the whole index atomically (after a problem, a `--full` tick, or to compact it)."""
    body = b"".join(orjson.dumps(e.line()) + b"\n" for e in sorted(entries.values(), key=lambda e: e.run_id))
    write_atomic(Path(index_path(campaign)), HEADER_LINE + body)


def append_index(campaign: Path | str, new: list[Ending], forget: list[str]) -> None:
    """Add this tick's news with ONE write(2) on an O_APPEND descriptor: a crash leaves the lines
    whole or a torn last line, which the next load sees and the next tick repairs by a rewrite.
    Not fsynced: losing the tail of a cache only means those runs are read from their files."""
    if not new and not forget:
        return
    data = b"".join(orjson.dumps([rid]) + b"\n" for rid in forget)
    data += b"".join(orjson.dumps(e.line()) + b"\n" for e in new)
    fd = os.open(index_path(campaign), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        view = memoryview(data)
        while view:                 # a short write on a regular local file does not happen; NFS may
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def now_ns() -> int:
    return time.time_ns()
