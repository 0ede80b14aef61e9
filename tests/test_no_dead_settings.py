"""No dead settings (issue 28, item 5): every field a plan can set is read somewhere in sweep's code
other than its own declaration. A field that is parsed and frozen but read nowhere (as
`quality.max_probes` and `quality.max_spend_usd` were) fails here; its effect is each feature's
own tests' business, this test only keeps a parsed-and-ignored field from landing again."""
from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from sweep.models.plan import Plan

REPO = Path(__file__).resolve().parents[1]


def _code() -> str:
    """The code of sweep/, runstate/ and roles/ without declaration lines (`name: type = ...`)."""
    decl = re.compile(r"^\s+\w+\s*:\s*[^=()]+?(\s*=.*)?$")
    lines = []
    for root in ("sweep", "runstate", "roles"):
        for path in sorted((REPO / root).rglob("*.py")):
            lines += [ln for ln in path.read_text().splitlines() if not decl.match(ln)]
    return "\n".join(lines)


def _fields(model: type[BaseModel], prefix: str = "", seen: frozenset = frozenset()):
    for name, info in model.model_fields.items():
        yield f"{prefix}{name}", name
        for t in (info.annotation, *typing.get_args(info.annotation)):
            for u in (t, *typing.get_args(t)):
                if isinstance(u, type) and issubclass(u, BaseModel) and u not in seen:
                    yield from _fields(u, f"{prefix}{name}.", seen | {u})


def _unread(model: type[BaseModel], code: str) -> list[str]:
    return [path for path, name in _fields(model)
            if not re.search(rf"\.{name}\b|[\"']{name}[\"']|\b{name}=", code)]


def test_every_plan_field_is_read_somewhere():
    unread = _unread(Plan, _code())
    assert unread == [], f"parsed but read nowhere (make it work or refuse it): {unread}"


def test_the_check_sees_an_unread_field():
    """The check can fail: a nested field named nowhere in the code is reported, a read one is not."""
    class Inner(BaseModel):
        never_read_anywhere_xyz: int = 0
        max_probes: int = 0

    class Outer(BaseModel):
        quality: Inner = Inner()
    assert _unread(Outer, _code()) == ["quality.never_read_anywhere_xyz"]
