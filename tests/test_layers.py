"""The import graph: no circle, and nothing imports upward (docs/architecture.md, "Packages").

Every import counts, including the lazy ones inside functions: a lazy import hides a circle from
the interpreter, not from a reader.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = ("sweep", "runstate", "roles")


def _modules() -> dict[str, Path]:
    mods = {}
    for top in OURS:
        for path in (REPO / top).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = path
    return mods


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of ours that `name` (a module or a module.attribute) is, or lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            # `from pkg import submodule` is an edge to the submodule, not to pkg's other contents
            found.update(subs if len(subs) == len(node.names) else [base, *subs])
    owners = {_owner(f) for f in found if f.split(".")[0] in OURS}
    return {o for o in owners if o and o != name and not name.startswith(o + ".")}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:          # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "sweep.controller.context" in GRAPH["sweep.controller.phases"]


def test_no_import_circle():
    assert _cycles(GRAPH) == []


def test_controller_phases_and_driver_share_a_context_not_each_other():
    assert "sweep.controller.pipeline" not in GRAPH["sweep.controller.phases"]
    assert "sweep.controller.phases" not in GRAPH["sweep.controller.context"]
    assert "sweep.controller.pipeline" not in GRAPH["sweep.controller.context"]


def _violations(prefix: str, allowed: tuple[str, ...], graph: dict[str, set[str]] | None = None) -> list[str]:
    return [f"{m} imports {d}" for m, deps in sorted((graph or GRAPH).items()) if m == prefix or m.startswith(prefix + ".")
            for d in sorted(deps) if not any(d == a or d.startswith(a + ".") for a in allowed)]


# The lower rooms of docs/architecture.md ("Packages") and what each may import. A room not listed
# here ("everything below": tick, controller, campaign, status, cli, ...) is held by the circle test.
UTILITIES = ("sweep.tree", "sweep.proc", "sweep.git", "sweep.registry", "sweep.tomlw", "sweep.execution",
             "sweep.redact", "sweep.textsafe", "sweep.sandbox_marker")
ROOMS: dict[str, tuple[str, ...]] = {
    "runstate": ("runstate",),
    "roles": ("roles", "runstate"),
    **{u: ("runstate",) for u in UTILITIES},
    "sweep.git": ("runstate", "sweep.tree"),     # a git tree is written with tree's descriptor writer
    "sweep.models": ("sweep.models", "runstate", "roles", *UTILITIES),
    "sweep.scheduler": ("sweep.scheduler", "runstate", "sweep.models", *UTILITIES),
    "sweep.providers": ("sweep.providers", "runstate", "roles", *UTILITIES),
    "sweep.harbor": ("sweep.harbor", "runstate", *UTILITIES),
    "sweep.quality": ("sweep.quality", "runstate", "sweep.harbor", *UTILITIES),
    "sweep.credentials": ("runstate", "roles", *UTILITIES),
    "sweep.runtimes": ("sweep.runtimes", "runstate", "roles", "sweep.models", "sweep.harbor", "sweep.providers",
                       "sweep.credentials",
                       *UTILITIES),
    "sweep.eval": ("sweep.eval", "runstate", "roles", "sweep.models", "sweep.harbor", "sweep.quality", "sweep.runtimes",
                   "sweep.providers", "sweep.credentials", "sweep.scheduler", *UTILITIES),
}


# Rooms above sweep/campaign.py (docs/architecture.md): what loads a campaign imports none of them.
ABOVE_CAMPAIGN = ("sweep.controller", "sweep.tick", "sweep.cli", "sweep.status", "sweep.operate", "sweep.export",
                  "sweep.demo", "sweep.report_html", "sweep.scrontab", "sweep.discover", "sweep.drive",
                  "sweep.__main__")


def test_loading_a_campaign_imports_nothing_above_it():
    assert [d for d in sorted(GRAPH["sweep.campaign"]) if any(d == a or d.startswith(a + ".") for a in ABOVE_CAMPAIGN)] \
        == []


# Every room of docs/architecture.md's table, from the ground up: an import may only go to a room of
# an earlier row or of its own row (peers; the circle check keeps those from looping).
ORDER: list[tuple[str, ...]] = [
    ("runstate",), ("roles",), ("sbatch",), UTILITIES, ("sweep.credentials",), ("sweep.models",),
    ("sweep.scheduler",), ("sweep.providers",), ("sweep.harbor",), ("sweep.quality",), ("sweep.runtimes",),
    ("sweep.eval",), ("sweep.campaign", "sweep.frozen", "sweep.runtime", "sweep.readiness", "sweep.priors"), ("sweep.tick",), ("sweep.controller",),
    ("sweep.status", "sweep.status_queue", "sweep.operate", "sweep.scrontab", "sweep.export", "sweep.report_html", "sweep.demo",
     "sweep.discover", "sweep.drive"),
    ("sweep.cli",), ("sweep.__main__", "sweep"),
]


def _room(module: str) -> tuple[int, str] | None:
    for rank, row in enumerate(ORDER):
        for room in row:
            if module == room or module.startswith(room + "."):
                return rank, room
    return None


def test_every_module_has_a_room_in_the_table():
    missing = [m for m in sorted(GRAPH) if _room(m) is None]
    assert missing == [], f"{missing}: give each a row in ORDER here and in docs/architecture.md's table"


def test_no_import_goes_to_a_later_row():
    upward = []
    for m, deps in sorted(GRAPH.items()):
        rank, room = _room(m) or (0, "")
        for d in sorted(deps):
            drank, droom = _room(d) or (0, "")
            if droom != room and drank > rank:
                upward.append(f"{m} imports {d}")
    assert upward == []


def test_the_checker_sees_an_upward_import():
    assert _room("sweep.controller.budget")[0] > _room("sweep.campaign")[0]     # campaign -> controller: upward
    assert _violations("sweep.harbor", ROOMS["sweep.harbor"], {"sweep.harbor.trial": {"sweep.providers.base"}}) \
        == ["sweep.harbor.trial imports sweep.providers.base"]


def test_lower_layers_do_not_import_upward():
    assert [v for room, allowed in ROOMS.items() for v in _violations(room, allowed)] == []


def test_harbor_runs_trials_through_the_execution_contract_not_the_providers_package():
    """The task-bundle code runs trials through `sweep.execution.Provider`; nothing under harbor/
    imports sweep.providers, not even its base module (no exception)."""
    assert "sweep.execution" in GRAPH["sweep.harbor.trial"]
    assert not [d for m, deps in GRAPH.items() if m.startswith("sweep.harbor")
                for d in deps if d == "sweep.providers" or d.startswith("sweep.providers.")]
    assert not [d for m, deps in GRAPH.items() if m.startswith("sweep.models")
                for d in deps if d == "sweep.providers" or d.startswith("sweep.providers.")]


def test_the_session_runtime_uses_only_the_provider_contract():
    assert not [d for d in GRAPH["sweep.runtimes.session"] if d.startswith("sweep.providers.local")]


def test_shared_utilities_are_stdlib_only():
    for name in ("sweep.tree", "sweep.proc", "sweep.git", "sweep.registry", "sweep.execution", "runstate.atomic",
                 "runstate.errors", "runstate.paths"):
        allowed = {"runstate", "runstate.atomic", "runstate.errors"} | ({"sweep.tree"} if name == "sweep.git" else set())
        assert GRAPH[name] <= allowed, (name, GRAPH[name])


GLOSSARY = ("run", "campaign", "lane", "role", "phase", "session", "trial", "gate", "evidence", "bundle",
            "task", "provider", "runtime", "scheduler")


def test_docs_name_every_room_of_sweep_and_define_every_glossary_word():
    """docs/architecture.md's package table names every loose module and folder of sweep/ (three
    modules were missing from it while test_layers' ORDER had them), and its glossary defines
    each word of issue 27's list."""
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rooms = [f"sweep/{p.name}" + ("/" if p.is_dir() else "") for p in sorted((REPO / "sweep").iterdir())
             if (p.suffix == ".py" and p.name not in ("__init__.py", "__main__.py"))
             or (p.is_dir() and (p / "__init__.py").is_file())]
    assert rooms and [r for r in rooms if f"`{r}" not in doc] == []
    glossary = doc.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    assert [w for w in GLOSSARY if f"| **{w}**" not in glossary and f"(**{w}**)" not in glossary] == []
