"""TOML for the documents sweep writes itself (campaign.toml), written by `tomli-w`.

TOML has no null: a None *value in a table* is left out (our models default such fields, so the
file reads back to the same model), but a None *inside a list* has no faithful spelling, so it is
refused with the dotted path of the offending item rather than dropped (dropping it would shift
every later index). NaN and infinity are refused as well, as the hand-written writer this replaces
did. `dumps_checked` parses its own output back (tomllib) and compares, so a document that would
not read back identically never reaches disk.
"""
from __future__ import annotations

import math
import tomllib
from typing import Any

import tomli_w


class TomlValueError(ValueError):
    """A value TOML cannot hold faithfully; `field` is its dotted path in the document."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


def _prepare(v: Any, path: tuple[str, ...]) -> Any:
    if isinstance(v, dict):
        return {str(k): _prepare(x, (*path, str(k))) for k, x in v.items() if x is not None}
    if isinstance(v, (list, tuple)):
        out = []
        for i, x in enumerate(v):
            if x is None:
                raise TomlValueError(".".join((*path, str(i))), "null inside a list cannot be written as TOML")
            out.append(_prepare(x, (*path, str(i))))
        return out
    if isinstance(v, float) and not math.isfinite(v):
        raise TomlValueError(".".join(path), "TOML cannot hold NaN or infinity here")
    return v


def without_nulls(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` as it will read back: None table values left out (refuses what dumps refuses)."""
    return _prepare(doc, ())


def dumps(doc: dict[str, Any]) -> str:
    return tomli_w.dumps(_prepare(doc, ()))


def dumps_checked(doc: dict[str, Any]) -> str:
    """dumps(doc), proven to read back (tomllib) to exactly `doc` without its None table values."""
    prepared = _prepare(doc, ())
    text = tomli_w.dumps(prepared)
    if tomllib.loads(text) != prepared:    # a writer bug must not produce a campaign no verb can read
        raise TomlValueError("", "the TOML written does not read back to the same document")
    return text
