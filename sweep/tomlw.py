"""A small TOML writer for the documents sweep writes itself (campaign.toml).

Python reads TOML (tomllib) but cannot write it, and the brief keeps dependencies to a short list.
Supports what our models produce: strings, ints, floats, bools, lists of scalars, tables and
lists of tables. None values are omitted (TOML has no null; our models default them).
"""
from __future__ import annotations

import math
from typing import Any

import orjson


def _key(k: str) -> str:
    if k and all(c.isalnum() or c in "_-" for c in k):
        return k
    return _str(k)


def _str(s: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes (\\uXXXX, \\n, \\", \\\\).
    return orjson.dumps(s).decode()


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise ValueError("TOML cannot hold NaN or infinity here")
        return repr(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        items = [f"{_key(k)} = {_scalar(x)}" for k, x in v.items() if x is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _is_table_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def dumps(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    _table(doc, [], lines)
    return "\n".join(lines).strip() + "\n"


def _table(doc: dict[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in doc.items() if v is not None and not isinstance(v, dict)
               and not _is_table_list(v)}
    for k, v in scalars.items():
        lines.append(f"{_key(k)} = {_scalar(v)}")
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in path + [k]) + "]")
            _table(v, path + [k], lines)
        elif _is_table_list(v):
            for item in v:
                lines.append("")
                lines.append("[[" + ".".join(_key(p) for p in path + [k]) + "]]")
                _table(item, path + [k], lines)
