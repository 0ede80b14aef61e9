"""A run's spending, inside its own allocation (design section 6).

The tick grants each admitted run an allocation (record.allocation_usd, never more than the
campaign has left). The controller reserves before every paid operation and settles after, in the
run's own spend.json, so no cross-node lock is needed: the campaign can only exceed its cap by the
recorded overrun of a single operation. An operation whose outcome is uncertain (the controller was
killed during it) stays reserved, and an actual cost above its reservation stops further paid work.

A scope (`quality`: the reviews, repairs and rollouts, bounded by `quality.max_spend_usd`) is a cap
inside the allocation: its operations are marked in the ledger, so what they committed is summed
from the same file and survives a killed controller like the rest.
"""
from __future__ import annotations

import time
from pathlib import Path

from runstate.files import read_model, write_model_atomic
from runstate.models import SpendEntry, SpendLedger
from runstate.paths import SPEND_FILE

EPS = 1e-9


class Budget:
    def __init__(self, rdir: Path, run_id: str, allocation_usd: float | None):
        self.path = Path(rdir) / SPEND_FILE
        self.allocation = allocation_usd
        loaded = read_model(self.path, SpendLedger)
        self.ledger = loaded.value or SpendLedger(run_id=run_id)

    def _save(self) -> None:
        write_model_atomic(self.path, self.ledger)

    @property
    def committed(self) -> float:
        return self.ledger.committed_usd

    def mark_uncertain(self) -> list[str]:
        """Reservations a killed controller left open: their outcome is unknown, so they stay
        counted (at the reserved amount) and are never silently relaunched under the same id."""
        open_ops = [e.op_id for e in self.ledger.entries if e.status == "reserved"]
        if open_ops:
            self.ledger = self.ledger.model_copy(update={"entries": [
                e.model_copy(update={"status": "uncertain"}) if e.status == "reserved" else e
                for e in self.ledger.entries]})
            self._save()
        return open_ops

    def committed_in(self, scope: str) -> float:
        return self.ledger.committed_in(scope)

    def can_spend(self, amount: float, *, scope: str | None = None, scope_cap: float | None = None,
                  cap_name: str = "") -> tuple[bool, str]:
        if self.ledger.overrun:
            return False, "an earlier operation cost more than its reservation"
        if self.allocation is not None and self.committed + amount > self.allocation + EPS:
            return False, (f"allocation {self.allocation:.2f} USD, committed {self.committed:.2f}, "
                           f"next operation reserves {amount:.2f}")
        if scope is not None and scope_cap is not None:
            spent = self.committed_in(scope)
            if spent + amount > scope_cap + EPS:
                return False, (f"{cap_name or scope} {scope_cap:.2f} USD, committed {spent:.2f}, "
                               f"next operation reserves {amount:.2f}")
        return True, ""

    def scope_left(self, scope: str, scope_cap: float | None) -> float | None:
        return None if scope_cap is None else max(0.0, scope_cap - self.committed_in(scope))

    def reserve(self, op_id: str, what: str, amount: float, *, scope: str | None = None) -> None:
        entry = SpendEntry(op_id=op_id, what=what, reserved_usd=amount, at=time.time(), scope=scope)
        self.ledger = self.ledger.model_copy(update={"entries": [*self.ledger.entries, entry]})
        self._save()

    def settle(self, op_id: str, actual: float | None, *, bounded: bool = False) -> None:
        """Record what operation `op_id` cost (None: unknown, charged its reservation).

        `bounded`: the cost was metered where the limit is enforced (the session's wire relay
        refuses every request once the limit, never above the reservation, is reached), so it
        exceeds the reservation by the response in flight at most. That is recorded as the entry's
        actual cost, counted in `committed` like any other, but it is not an overrun: the next
        operation is still bounded by what the allocation has left. An unbounded cost above its
        reservation (a runtime whose own figure is all there is) sets `overrun`."""
        entries = []
        overrun = self.ledger.overrun
        for e in self.ledger.entries:
            if e.op_id == op_id and e.status == "reserved":
                cost = e.reserved_usd if actual is None else actual
                overrun = overrun or (cost > e.reserved_usd + EPS and not bounded)
                e = e.model_copy(update={"status": "settled", "actual_usd": cost})
            entries.append(e)
        self.ledger = self.ledger.model_copy(update={"entries": entries, "overrun": overrun})
        self._save()
