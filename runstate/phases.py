"""The phase table: every phase of a run's pipeline, one row each, in the order a run meets them.

A row says everything the rest of sweep needs to know about a phase, so adding a phase is one row
here plus the one function that runs it (docs/architecture.md, "How to add a phase"):

- `phase`: its name, which is what state.json's `phase` and `checkpoints` keys hold (RunRecord
  refuses a name with no row, so a record can never name a phase this sweep cannot run);
- `role`: the role whose sessions it runs, or None (the tick's `next_role` holds a run back while
  the role it needs next is cooling down; the controller parks under it);
- `checkpoint`: the model of its summary in state.json's `checkpoints` (what its function returns);
- `cleared_by_repair`: a repair (the run sent back to the author with findings) drops this phase's
  checkpoint, because it judged the bundle the repair replaces;
- `failure`: the ending (an EndReason value) when the repairs its findings asked for run out, or
  None for a phase whose findings never ask for one;
- `runner`: "module:function" of the function that runs it (default sweep.controller.phases:<phase>),
  imported by the controller on first use;
- the next phase is the row below it (the last row ends the run).

Everything else is derived from the table at the moment it is asked, never copied: `PHASES` (the
names in order), the tick's next role of a run, the controller's runner and phase->role lookups,
the order of `Checkpoints.phases()`, what a repair clears and the `<phase>_failed` endings.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from runstate.checkpoints import (Checkpoint, EvaluateCheckpoint, GatesCheckpoint, IntakeCheckpoint,
                                  ProbesCheckpoint, ReviewCheckpoint, SolveCheckpoint)

DEFAULT_RUNNER_MODULE = "sweep.controller.phases"


class Phase(StrEnum):
    """The names of the shipped rows, for code that names one of them (`Phase.gates`).

    A row added to the table alone is a phase like these: its name is its value on disk."""

    intake = "intake"
    author = "author"
    gates = "gates"
    probes = "probes"
    review = "review"
    solve = "solve"
    evaluate = "evaluate"


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    role: str | None
    checkpoint: type[Checkpoint]
    cleared_by_repair: bool
    failure: str | None
    runner: str = ""

    @property
    def runner_ref(self) -> tuple[str, str]:
        """(module, function) of the function that runs this phase."""
        module, _, func = (self.runner or f"{DEFAULT_RUNNER_MODULE}:{self.phase}").partition(":")
        return module, func or self.phase


class PhaseTable:
    """The rows in pipeline order, and every lookup derived from them."""

    def __init__(self, rows: tuple[PhaseRow, ...]):
        self._rows: tuple[PhaseRow, ...] = ()
        self._set(rows)

    def _set(self, rows: tuple[PhaseRow, ...]) -> None:
        names = [r.phase for r in rows]
        if not rows or len(set(names)) != len(names):
            raise ValueError(f"a phase table needs at least one row and unique phase names (got {names})")
        self._rows = rows

    @property
    def rows(self) -> tuple[PhaseRow, ...]:
        return self._rows

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.phase for r in self._rows)

    @property
    def first(self) -> str:
        return self._rows[0].phase

    def __contains__(self, name: object) -> bool:
        return any(r.phase == name for r in self._rows)

    def row(self, name: str) -> PhaseRow:
        for r in self._rows:
            if r.phase == name:
                return r
        raise KeyError(f"no phase {name!r} in the phase table (phases: {', '.join(self.names)})")

    def after(self, name: str) -> str | None:
        """The phase that follows `name` (None after the last row)."""
        names = self.names
        i = names.index(self.row(name).phase)
        return names[i + 1] if i + 1 < len(names) else None

    def next_role(self, name: str) -> str | None:
        """The role a run at phase `name` needs next: the role of that phase or of the first phase
        after it that has one (None when no session is left to run)."""
        names = self.names
        for r in self._rows[names.index(self.row(name).phase):]:
            if r.role is not None:
                return r.role
        return None

    def role_of(self, name: str) -> str | None:
        return self.row(name).role

    @property
    def roles(self) -> tuple[str, ...]:
        """Every role a phase runs, in the order a run meets them."""
        return tuple(dict.fromkeys(r.role for r in self._rows if r.role is not None))

    @property
    def cleared_by_repair(self) -> tuple[str, ...]:
        return tuple(r.phase for r in self._rows if r.cleared_by_repair)

    def failure(self, name: str) -> str:
        """The ending of a run whose repairs after phase `name` ran out."""
        reason = self.row(name).failure
        if reason is None:
            raise KeyError(f"phase {name!r} has no failure ending in the phase table")
        return reason

    def insert(self, row: PhaseRow, *, after: str) -> None:
        """Add a row after phase `after` (how an extension or a test adds a phase without editing
        the shipped rows; the shipped phases are rows of PHASE_TABLE below)."""
        names = self.names
        i = names.index(self.row(after).phase)
        self._set(self._rows[: i + 1] + (row,) + self._rows[i + 1:])

    def remove(self, name: str) -> None:
        self._set(tuple(r for r in self._rows if r.phase != name))


PHASE_TABLE = PhaseTable((
    #        phase           role        checkpoint          cleared_by_repair  failure
    PhaseRow(Phase.intake,   None,       IntakeCheckpoint,   False,             "intake_failed"),
    PhaseRow(Phase.author,   "author",   Checkpoint,         False,             "author_failed"),
    PhaseRow(Phase.gates,    None,       GatesCheckpoint,    True,              "gates_failed"),
    PhaseRow(Phase.probes,   None,       ProbesCheckpoint,   True,              None),
    PhaseRow(Phase.review,   "reviewer", ReviewCheckpoint,   True,              "review_failed"),
    PhaseRow(Phase.solve,    "solver",   SolveCheckpoint,    True,              None),
    PhaseRow(Phase.evaluate, None,       EvaluateCheckpoint, False,             None),
))


# An evaluation cell (docs/eval.md) is a run of its own table: the arm's solver session (and its
# gate-feedback cycles), then the final verifier run that decides the reward. Its names are its own,
# so a record's phase says which table it runs (`table_of`).
EVAL_PHASE_TABLE = PhaseTable((
    #        phase          role      checkpoint  cleared_by_repair  failure  runner
    PhaseRow("cell_solve",  "solver", Checkpoint, False,             None,    "sweep.controller.cell:cell_solve"),
    PhaseRow("cell_verify", None,     Checkpoint, False,             None,    "sweep.controller.cell:cell_verify"),
))
TABLES = (PHASE_TABLE, EVAL_PHASE_TABLE)


def table_of(name: str) -> PhaseTable:
    """The table whose row `name` is (a generation run's, or an evaluation cell's)."""
    for table in TABLES:
        if name in table:
            return table
    raise KeyError(f"no phase {name!r} in any phase table (phases: {', '.join(_all_names())})")


def _all_names() -> list[str]:
    return [n for table in TABLES for n in table.names]


def validate_phase(name: object) -> str:
    """A phase name with a row in a table; the shipped ones come back as `Phase` members."""
    if not isinstance(name, str) or not any(name in table for table in TABLES):
        raise ValueError(f"unknown phase {name!r}: expected one of {', '.join(_all_names())}")
    try:
        return Phase(name)
    except ValueError:
        return table_of(name).row(name).phase
