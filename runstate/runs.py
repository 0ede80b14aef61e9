"""Run directories: state.json (atomic replace only), events.jsonl (append only), listing.

A crash at any line of `save_record` leaves the previous state.json or the new one, never a mix;
`list_runs` reports a corrupt state.json and carries on, and skips anything that is not a run
(stray files, temp files, folders without state.json, names that are not valid run ids).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from runstate.errors import StateError
from runstate.files import (MAX_RECORD_BYTES, Loaded, append_line, describe_validation_error, make_private_dir,
                            open_regular, parse_model_fast, read_fd, read_lines, read_model, write_model_atomic)
from runstate.models import RUN_ID_RE, Event, RunRecord, validate_run_id
from runstate.paths import EVENTS_FILE, LEASE_FILE, RUNS_DIR, STATE_FILE, RunPaths  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from runstate.index import EndedIndex

FileIdent = tuple[int, int, int, int]     # (ino, size, mtime_ns, ctime_ns) of a file read


def runs_root(campaign: Path) -> Path:
    return Path(campaign) / RUNS_DIR


def run_dir(campaign: Path, run_id: str) -> Path:
    """The directory of a run; the id is validated so it can never escape `runs/`."""
    return runs_root(campaign) / validate_run_id(run_id)


def create_run_dir(campaign: Path, run_id: str) -> Path:
    make_private_dir(runs_root(campaign))     # mkdir(parents=True) would make runs/ 0755
    d = run_dir(campaign, run_id)
    make_private_dir(d)
    make_private_dir(RunPaths.at(d).logs)
    return d


def save_record(rdir: Path, record: RunRecord, *, touch: bool = True) -> RunRecord:
    """Re-validate and check the invariants, then replace state.json atomically. Returns the record
    as written."""
    rdir = Path(rdir)
    if rdir.name != record.run_id:
        raise StateError(f"record for {record.run_id!r} cannot be saved in {rdir}", path=rdir)
    if touch:
        record = record.model_copy(update={"updated": time.time()})
    # model_copy(update=...) skips validation: a copy with state="bogus" must not reach disk.
    try:
        record = RunRecord.model_validate(record.model_dump(warnings=False))
    except ValidationError as exc:
        raise StateError("invalid record: " + describe_validation_error(exc), path=rdir / STATE_FILE) from None
    record.check_invariants()
    write_model_atomic(rdir / STATE_FILE, record)
    return record


def load_record(rdir: Path) -> Loaded[RunRecord]:
    loaded = read_model(Path(rdir) / STATE_FILE, RunRecord)
    if loaded.value is not None and loaded.value.run_id != Path(rdir).name:
        return Loaded(loaded.path, None, f"run_id {loaded.value.run_id!r} does not match its directory",
                      raw=loaded.raw)
    return loaded


@dataclass
class RunListing:
    records: dict[str, RunRecord] = field(default_factory=dict)
    corrupt: dict[str, str] = field(default_factory=dict)     # run id -> problem


SYMLINKED_RUN = ("the run directory is a symbolic link; sweep does not follow it (a run's files "
                 "must live in runs/ itself): replace the link with the directory")


def iter_run_ids(campaign: Path, symlinks: list[str] | None = None) -> list[str]:
    """Names under runs/ that could be runs (valid ids, directories); sorted for a stable panel order.

    A symbolic link with a run's name is not followed (it could point anywhere); its name is added
    to `symlinks` when given, so that the tick and status report it instead of dropping it."""
    root = runs_root(campaign)
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    ids = []
    for entry in entries:
        if not RUN_ID_RE.match(entry.name):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                ids.append(entry.name)
            elif symlinks is not None and entry.is_symlink():
                symlinks.append(entry.name)
        except OSError:
            continue
    ids.sort()
    return ids


def run_dir_problem(rdir: Path) -> str | None:
    """Why a run directory cannot be used as one (the same words for tick, status and show)."""
    return SYMLINKED_RUN if Path(rdir).is_symlink() else None


def read_record_at(path: str, run_id: str) -> Loaded[RunRecord]:
    """load_record for hot loops: `path` is the state.json path as a plain string."""
    return read_record_ident(path, run_id)[0]


def read_record_ident(path: str, run_id: str) -> tuple[Loaded[RunRecord], FileIdent | None]:
    """The record, and the identity (ino, size, mtime_ns, ctime_ns) of the very file it was read
    from (fstat of the open descriptor, so the two cannot disagree). A symlink, FIFO, device or
    oversized state.json is refused as unreadable (runstate.files.open_regular)."""
    try:
        opened = open_regular(path, MAX_RECORD_BYTES)
        if opened is None:
            return Loaded(path, None, "missing", missing=True), None
        fd, st = opened
        try:
            raw = read_fd(fd, path, MAX_RECORD_BYTES)
        finally:
            os.close(fd)
    except OSError as exc:
        return Loaded(path, None, f"unreadable: {exc.strerror or exc}"), None
    loaded = parse_model_fast(path, raw, RunRecord)
    if loaded.value is not None and loaded.value.run_id != run_id:
        return Loaded(path, None, f"run_id {loaded.value.run_id!r} does not match its directory", raw=raw), None
    return loaded, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def list_runs(campaign: Path) -> RunListing:
    """Every run's record; corrupt ones reported, non-runs skipped. One open+read per run and
    no pathlib in the loop. Reads every run: the tick and status use `scan_runs`, which skips
    the ended runs the index vouches for."""
    listing = RunListing()
    root = os.fspath(runs_root(campaign))
    symlinks: list[str] = []
    ids = iter_run_ids(campaign, symlinks)
    for run_id in symlinks:
        listing.corrupt[run_id] = SYMLINKED_RUN
    for run_id in ids:
        loaded = read_record_at(f"{root}/{run_id}/{STATE_FILE}", run_id)
        if loaded.missing:
            continue               # a folder without state.json is not (yet) a run
        if loaded.value is None:
            listing.corrupt[run_id] = loaded.problem or "unreadable"
        else:
            listing.records[run_id] = loaded.value
    return listing


@dataclass
class RunScan:
    """The campaign's runs as the tick and status see them.

    `records`: runs read from their files (every live run, and ended runs the index does not vouch
    for), with `idents` the state.json identity each was read from. `settled`: ended runs whose
    index entry a stat(2) confirmed, not read. `index`: the index as loaded, for the tick to update.
    """
    records: dict[str, RunRecord] = field(default_factory=dict)
    idents: dict[str, FileIdent] = field(default_factory=dict)
    corrupt: dict[str, str] = field(default_factory=dict)
    settled: dict[str, Any] = field(default_factory=dict)             # run id -> runstate.index.Ending
    stale: list[str] = field(default_factory=list)          # index entries that no longer hold
    index: EndedIndex | None = None
    started_ns: int = 0

    @property
    def run_count(self) -> int:
        return len(self.records) + len(self.settled)


def scan_runs(campaign: Path, *, use_index: bool = True) -> RunScan:
    """Every run, reading only the files of runs the ended-runs index does not vouch for.

    An index entry is used only if stat(2) of its state.json still gives the identity it was read
    with (runstate/index.py); otherwise, and for every run not in the index, the run is read from
    its files exactly as `list_runs` reads it. `use_index=False` reads every run (`tick --full`).
    """
    from runstate.index import EndedIndex, load_index, still_true
    scan = RunScan(started_ns=time.time_ns())
    root = os.fspath(runs_root(campaign))
    index = load_index(campaign) if use_index else EndedIndex(problem="not used (full read)")
    scan.index = index
    entries = index.entries
    symlinks: list[str] = []
    ids = iter_run_ids(campaign, symlinks)
    for run_id in symlinks:                # reported, never followed (as list_runs and show do)
        scan.corrupt[run_id] = SYMLINKED_RUN
    stat_root: str | int = root            # index checks stat `<id>/state.json` relative to runs/
    if entries and ids:
        try:
            stat_root = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            pass                           # the full paths then: same answers, a longer lookup each
    try:
        for run_id in ids:
            ending = entries.get(run_id)
            if ending is not None:
                if still_true(stat_root, ending):
                    scan.settled[run_id] = ending
                    continue
                scan.stale.append(run_id)
            _read_into(scan, root, run_id)
    finally:
        if type(stat_root) is int:
            os.close(stat_root)
    if len(scan.settled) + len(scan.stale) < len(entries):       # entries of runs that are gone
        listed = scan.settled.keys() | set(scan.stale)
        scan.stale.extend(rid for rid in entries if rid not in listed)
    return scan


def _read_into(scan: RunScan, root: str, run_id: str) -> None:
    """Read one run from its files into `scan` (a record and its identity, or why it is corrupt)."""
    loaded, ident = read_record_ident(f"{root}/{run_id}/{STATE_FILE}", run_id)
    if loaded.missing:
        return
    if loaded.value is None:
        scan.corrupt[run_id] = loaded.problem or "unreadable"
    else:
        scan.records[run_id] = loaded.value
        if ident is not None:       # always set with a value (read from the open descriptor)
            scan.idents[run_id] = ident


def append_event(rdir: Path, event: Event) -> None:
    append_line(Path(rdir) / EVENTS_FILE, event.model_dump(mode="json", exclude_none=True))


def read_events(rdir: Path) -> tuple[list[Event], int]:
    """Events in order, and how many lines were unreadable (a crash can truncate the last one)."""
    rows, skipped = read_lines(Path(rdir) / EVENTS_FILE)
    events = []
    for row in rows:
        try:
            events.append(Event.model_validate(row))
        except Exception:
            skipped += 1
    return events, skipped
