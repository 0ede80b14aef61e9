"""Sandbox receipts and reconciliation: nothing a controller creates remotely is ever untracked.

A receipt is `runs/<run>/sandboxes/<instance>.json` (0600, written atomically). The order is what
makes a crash at any line recoverable:

1. `requested` is written BEFORE the provider's create call, with the deterministic name and the
   tags (campaign, run, job id, role, attempt, a per-create instance id) the sandbox will carry.
2. `created` (with the provider's id) is written after create returns.
3. `terminated` after a confirmed terminate (or the provider says it is already gone);
   `terminate_requested` when the provider accepted the delete but did not confirm it.

A controller killed between 1 and 3 leaves an open receipt. `reconcile` lists the provider's
sandboxes by the campaign tag and terminates a sandbox only when ALL of these hold: its tags name
this campaign, its instance id matches an open receipt of this campaign whose tags are the same,
and that receipt's job is not in the scheduler's queue (one call; an UNKNOWN queue terminates
nothing). Sandboxes with another campaign's tags, or ours without a receipt, are never touched:
reconcile only reports them. An open receipt whose job is dead and whose sandbox is not listed
(create never happened, or auto-delete already removed it) is settled as `gone`.

A receipt is written and read through `Receipt` alone, stamped `schema_version`
(RECEIPT_SCHEMA_VERSION): one without it predates versions and reads as it always did; one a newer
sweep wrote is refused naming the file and its version, and reconcile leaves its sandbox alone.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from runstate.atomic import make_private_dir, write_atomic
from runstate.errors import StateError
from runstate.markers import clear_provider_stamp, stamp_provider
from runstate.paths import CampaignPaths
from sweep.sandbox_marker import UNCERTAIN_FILE, clear_uncertain, mark_uncertain, read_uncertain
from sweep.providers.base import (TAG_KEYS, SandboxError, SandboxHandle, SandboxProvider, SandboxSpec,
                                  TerminateOutcome, check_tags, sandbox_name)

__all__ = ["UNCERTAIN_FILE", "clear_uncertain", "mark_uncertain", "read_uncertain", "reconcile",
           "create_with_receipt", "terminate_with_receipt", "has_open_receipts", "Receipt",
           "note_provider_error", "note_provider_ok"]

RECEIPTS_DIR = "sandboxes"
OPEN_STATES = ("requested", "created", "terminate_requested")
SETTLED_STATES = ("terminated", "gone")
RECEIPT_SCHEMA_VERSION = 1


@dataclass
class Receipt:
    instance: str
    name: str
    provider: str
    tags: dict[str, str]
    state: str
    options: dict[str, Any] = field(default_factory=dict)   # how to reach the provider again; never a secret
    sandbox_id: str | None = None
    requested_at: float = 0.0
    updated_at: float = 0.0
    note: str | None = None
    schema_version: int = RECEIPT_SCHEMA_VERSION   # 0: written before receipts carried a version

    @property
    def job_id(self) -> str:
        return self.tags["sweep.job"]


def current_job_id() -> str | None:
    """The scheduler job this process runs in: SWEEP_JOB_ID, which every backend gives its jobs
    (the scheduler contract, sweep/scheduler/base.py); never a backend's own variable."""
    return os.environ.get("SWEEP_JOB_ID")


def new_tags(*, campaign_id: str, run_id: str, job_id: str, role: str, attempt: int) -> dict[str, str]:
    return check_tags({"sweep.campaign": campaign_id, "sweep.run": run_id, "sweep.job": str(job_id),
                       "sweep.role": role, "sweep.attempt": str(attempt),
                       "sweep.instance": uuid.uuid4().hex[:12]})


def receipt_path(run_dir: Path, instance: str) -> Path:
    if not instance.isalnum():
        raise ValueError(f"bad instance id {instance!r}")
    return Path(run_dir) / RECEIPTS_DIR / f"{instance}.json"


def _write(run_dir: Path, r: Receipt) -> None:
    make_private_dir(Path(run_dir) / RECEIPTS_DIR)
    r.updated_at = time.time()
    r.schema_version = RECEIPT_SCHEMA_VERSION     # an older receipt settled now is a current one
    write_atomic(receipt_path(run_dir, r.instance), json.dumps(asdict(r), sort_keys=True).encode())


def read_receipt(path: Path) -> Receipt:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        version = data.setdefault("schema_version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version > RECEIPT_SCHEMA_VERSION:
            raise StateError(f"sandbox receipt written by a newer sweep (schema_version {version!r}; this "
                             f"sweep reads up to {RECEIPT_SCHEMA_VERSION})", path=path, field="schema_version",
                             hint="upgrade sweep to read it; reconcile leaves its sandbox alone")
        r = Receipt(**data)
        check_tags(r.tags)
    except (OSError, ValueError, TypeError) as exc:
        raise StateError(f"unreadable sandbox receipt: {exc}", path=path,
                         hint="inspect it by hand; reconcile leaves its sandbox alone") from None
    return r


def create_with_receipt(provider: SandboxProvider, spec: SandboxSpec, run_dir: Path,
                        options: dict[str, Any] | None = None) -> SandboxHandle:
    """Receipt first, then create, then confirm. A crash anywhere leaves an open receipt."""
    check_tags(spec.tags)
    if spec.name != sandbox_name(spec.tags):
        raise ValueError("the sandbox name must be sandbox_name(tags)")
    now = time.time()
    r = Receipt(instance=spec.tags["sweep.instance"], name=spec.name, provider=provider.name,
                tags=dict(spec.tags), state="requested", options=dict(options or {}), requested_at=now)
    _write(run_dir, r)
    campaign_dir = Path(run_dir).parent.parent
    try:
        handle = provider.create(spec)
    except SandboxError as exc:
        note_provider_error(campaign_dir, provider.name, exc, by=f"job:{spec.tags['sweep.job']}")
        raise
    r.state, r.sandbox_id = "created", handle.sandbox_id
    _write(run_dir, r)
    note_provider_ok(campaign_dir, provider.name)
    return handle


def note_provider_error(campaign_dir: Path, provider: str, exc: SandboxError, *, by: str | None = None) -> bool:
    """An outage or throttle of a remote provider stamps its cooldown (runstate/markers.py): the
    tick parks only the runs that need that provider. Other error classes stamp nothing (config
    stops the run and tells the operator; failure is the attempt's). True when it stamped."""
    if exc.error_class not in ("outage", "throttle") or provider == "local":
        return False
    from sweep.redact import Redactor
    detail = Redactor().scrub(f"{exc}" + (f" ({exc.evidence})" if exc.evidence else ""))
    try:
        stamp_provider(campaign_dir, provider, exc.error_class, detail, stamped_by=by)
    except StateError:
        return False          # the error itself is what the caller reports; the stamp is a hint
    return True


def note_provider_ok(campaign_dir: Path, provider: str) -> bool:
    """A call to the provider succeeded: a stamp whose cooldown has passed (the canary's) is
    cleared, so the tick admits every run on that provider again."""
    return clear_provider_stamp(campaign_dir, provider)


def terminate_with_receipt(provider: SandboxProvider, handle: SandboxHandle, run_dir: Path) -> str:
    path = receipt_path(run_dir, handle.tags["sweep.instance"])
    r = read_receipt(path)
    outcome = provider.terminate(handle)
    if outcome == TerminateOutcome.REQUESTED:
        mark_uncertain(Path(run_dir).parent.parent, f"terminate of {handle.name} not confirmed")
    settle(run_dir, r, "terminate_requested" if outcome == TerminateOutcome.REQUESTED else "terminated",
           f"terminate: {outcome}")
    return outcome


# the campaign marker lives in sweep/sandbox_marker.py (import-light: `sweep status` reads it)


def has_open_receipts(run_dir: Path) -> bool:
    d = Path(run_dir) / RECEIPTS_DIR
    if not d.is_dir():
        return False
    for p in d.glob("*.json"):
        try:
            if read_receipt(p).state in OPEN_STATES:
                return True
        except StateError:
            return True
    return False


def settle(run_dir: Path, r: Receipt, state: str, note: str) -> None:
    r.state, r.note = state, note
    _write(run_dir, r)


def iter_receipts(campaign_dir: Path) -> Iterator[tuple[Path, Path]]:
    """(run dir, receipt path) for every receipt of the campaign."""
    runs = CampaignPaths(campaign_dir).runs
    if not runs.is_dir():
        return
    for run_dir in sorted(runs.iterdir()):
        d = run_dir / RECEIPTS_DIR
        if d.is_dir():
            for p in sorted(d.glob("*.json")):
                yield run_dir, p


@dataclass
class ReconcileReport:
    terminated: list[str] = field(default_factory=list)          # sandbox names
    unconfirmed: list[str] = field(default_factory=list)         # terminate asked, not confirmed
    settled_gone: list[str] = field(default_factory=list)        # receipts closed, nothing to terminate
    left_live: list[str] = field(default_factory=list)           # the receipt's job still runs
    left_unowned: list[str] = field(default_factory=list)        # our campaign tag, no matching receipt
    unreadable: list[str] = field(default_factory=list)          # receipt files that could not be read
    errors: list[str] = field(default_factory=list)              # provider problems (nothing settled for it)
    refused: str | None = None                                   # why nothing was done (queue UNKNOWN)
    cleared_marker: bool = False                                 # the campaign marker was removed

    @property
    def uncertain(self) -> bool:
        return bool(self.refused or self.unconfirmed or self.errors or self.unreadable)


def reconcile(campaign_dir: Path, campaign_id: str, *, queue_known: bool, live_jobs: set[str],
              provider_for: Callable[[str, dict[str, Any]], SandboxProvider], dry_run: bool = False,
              queue_error: str | None = None) -> ReconcileReport:
    rep = ReconcileReport()
    if not queue_known:
        rep.refused = f"the scheduler queue is UNKNOWN ({queue_error or 'no answer'}): no job counts as dead"
        return rep
    open_by_provider: dict[str, dict[str, tuple[Path, Receipt]]] = {}
    for run_dir, path in iter_receipts(campaign_dir):
        try:
            r = read_receipt(path)
        except StateError:
            rep.unreadable.append(str(path))
            continue
        if r.state in OPEN_STATES and r.tags.get("sweep.campaign") == campaign_id:
            open_by_provider.setdefault(r.provider, {})[r.instance] = (run_dir, r)
    for pname, receipts in sorted(open_by_provider.items()):
        options = next(iter(receipts.values()))[1].options
        try:
            provider = provider_for(pname, options)
            listed = provider.list_by_tags({"sweep.campaign": campaign_id})
        except SandboxError as exc:
            rep.errors.append(f"{pname}: {exc} [{exc.error_class}]")
            if not dry_run:
                note_provider_error(campaign_dir, pname, exc, by="reconcile")
            continue
        seen: set[str] = set()
        for info in listed:
            if info.tags.get("sweep.campaign") != campaign_id:
                continue                  # the provider's filter is not trusted: never another campaign's
            inst = info.tags.get("sweep.instance", "")
            entry = receipts.get(inst)
            if entry is None:
                rep.left_unowned.append(info.name)
                continue
            run_dir, r = entry
            if any(info.tags.get(k) != r.tags.get(k) for k in TAG_KEYS):
                rep.left_unowned.append(info.name)
                continue
            seen.add(inst)
            if r.job_id in live_jobs:
                rep.left_live.append(info.name)
                continue
            if dry_run:
                rep.terminated.append(info.name)
                continue
            handle = SandboxHandle(provider=pname, sandbox_id=info.sandbox_id, name=info.name, tags=info.tags)
            try:
                outcome = provider.terminate(handle)
            except SandboxError as exc:
                rep.errors.append(f"{pname}: terminate {info.name}: {exc} [{exc.error_class}]")
                continue
            if outcome == TerminateOutcome.REQUESTED:
                settle(run_dir, r, "terminate_requested", "reconcile: delete accepted, not confirmed")
                rep.unconfirmed.append(info.name)
            else:
                settle(run_dir, r, "terminated", f"reconcile: {outcome} (job {r.job_id} dead)")
                rep.terminated.append(info.name)
        for inst, (run_dir, r) in sorted(receipts.items()):
            if inst in seen or r.job_id in live_jobs:
                continue
            # The listing succeeded and does not show it: never created, or already removed.
            if not dry_run:
                settle(run_dir, r, "gone", f"reconcile: not listed by {pname}; job {r.job_id} dead")
            rep.settled_gone.append(r.name)
    if not dry_run:
        if rep.uncertain:
            mark_uncertain(campaign_dir, "reconcile could not settle every sandbox; run `sweep reconcile` again")
        else:
            rep.cleared_marker = clear_uncertain(campaign_dir)
    return rep


def open_receipt_count(campaign_dir: Path) -> int:
    n = 0
    for _, path in iter_receipts(campaign_dir):
        try:
            if read_receipt(path).state in OPEN_STATES:
                n += 1
        except StateError:
            n += 1
    return n
