"""The layers of DESIGN.md, read from the imports of every module under devicedeck/.

kubelet <- inventory <- kube <- (api, ui) <- main; api and ui share devicedeck/web and never import
each other; the agent and the simulators reach no database code and no domain. Every top-level
module and package of devicedeck/ has a declared layer, so a new one is placed on purpose.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "devicedeck"

DATABASE = {
    "devicedeck.db",
    "devicedeck.inventory",
    "devicedeck.credentials",
    "sqlalchemy",
    "alembic",
    "psycopg",
}
SERVICE = {
    "devicedeck.main",
    "devicedeck.runtime",
    "devicedeck.api",
    "devicedeck.ui",
    "devicedeck.web",
    "devicedeck.kube",
}

# Every top-level module and package of devicedeck/, lowest layer first. A module imports its own
# package or area, or an area of a lower layer; never one of its own layer or a higher one.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "basics",
        {
            "devicedeck",
            "devicedeck.clock",
            "devicedeck.config",
            "devicedeck.retry",
            "devicedeck.signals",
            "devicedeck.resources",
        },
    ),
    (
        "wire, storage and logging",
        {"devicedeck.kubelet", "devicedeck.db", "devicedeck.migrate", "devicedeck.logs"},
    ),
    (
        "domain, and the processes beside the service",
        {"devicedeck.inventory", "devicedeck.agent", "devicedeck.sim"},
    ),
    ("credentials and the service's own work", {"devicedeck.credentials", "devicedeck.runtime"}),
    ("cluster", {"devicedeck.kube"}),
    ("shared web layer", {"devicedeck.web"}),
    ("JSON API and dashboard", {"devicedeck.api", "devicedeck.ui"}),
    (
        "the application and the demo",
        {"devicedeck.main", "devicedeck.demo", "devicedeck.rule_file"},
    ),
    ("commands", {"devicedeck.commands", "devicedeck.cli"}),
]
LAYER_OF = {name: rank for rank, (_, names) in enumerate(LAYERS) for name in names}

# importer -> what it must never import (a name covers the package and its modules).
FORBIDDEN: dict[str, set[str]] = {
    "devicedeck.kubelet": DATABASE
    | SERVICE
    | {"devicedeck.agent", "devicedeck.sim", "devicedeck.demo"},
    "devicedeck.inventory": SERVICE | {"devicedeck.agent", "devicedeck.sim", "devicedeck.demo"},
    "devicedeck.kube": {
        "devicedeck.main",
        "devicedeck.api",
        "devicedeck.ui",
        "devicedeck.web",
        "devicedeck.agent",
        "devicedeck.sim",
    },
    "devicedeck.web": {
        "devicedeck.main",
        "devicedeck.api",
        "devicedeck.ui",
        "devicedeck.agent",
        "devicedeck.sim",
    },
    "devicedeck.api": {"devicedeck.main", "devicedeck.ui", "devicedeck.agent", "devicedeck.sim"},
    "devicedeck.ui": {"devicedeck.main", "devicedeck.api", "devicedeck.agent", "devicedeck.sim"},
    "devicedeck.runtime": {
        "devicedeck.main",
        "devicedeck.api",
        "devicedeck.ui",
        "devicedeck.web",
        "devicedeck.kube",
        "devicedeck.agent",
        "devicedeck.sim",
    },
    "devicedeck.agent": DATABASE | SERVICE | {"devicedeck.sim", "devicedeck.demo"},
    "devicedeck.sim": DATABASE | SERVICE | {"devicedeck.agent", "devicedeck.demo"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module the file imports, at the top, inside functions or for type checking."""
    found: set[str] = set()
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    )
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def all_imports() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(APP.rglob("*.py"))}


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def area(module: str) -> str:
    """The package (app.inventory) or top-level module (devicedeck.main) a module belongs to."""
    return ".".join(module.split(".")[:2])


def test_no_module_imports_across_a_forbidden_arrow() -> None:
    broken = []
    for module, imported in all_imports().items():
        for importer, forbidden in FORBIDDEN.items():
            if not within(module, importer):
                continue
            for name in sorted(imported):
                if any(within(name, f) for f in forbidden):
                    broken.append(f"{module} imports {name}")
    assert broken == []


def top_level_names() -> set[str]:
    """The modules and packages directly under devicedeck/, and the package itself."""
    found = {"devicedeck"}
    for path in APP.iterdir():
        if path.suffix == ".py" and path.name != "__init__.py":
            found.add(f"devicedeck.{path.stem}")
        elif (path / "__init__.py").is_file():
            found.add(f"devicedeck.{path.name}")
    return found


def test_every_top_level_module_has_a_layer() -> None:
    assert sorted(top_level_names() - set(LAYER_OF)) == []
    assert sorted(set(LAYER_OF) - top_level_names()) == []


def test_no_module_imports_its_own_layer_or_a_higher_one() -> None:
    broken = []
    for module, imported in all_imports().items():
        own = area(module)
        for name in sorted(imported):
            target = area(name)
            if target == own or own not in LAYER_OF or target not in LAYER_OF:
                continue
            if LAYER_OF[target] >= LAYER_OF[own]:
                broken.append(f"{module} imports {name}")
    assert broken == []


def test_no_import_cycle_between_app_packages() -> None:
    modules = all_imports()
    graph: dict[str, set[str]] = defaultdict(set)
    areas = {area(m) for m in modules}
    for module, imported in modules.items():
        for name in imported:
            if area(name) in areas and area(name) != area(module):
                graph[area(module)].add(area(name))
    cycles = []
    state: dict[str, int] = {}
    trail: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        trail.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                visit(target)
        trail.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []


def test_the_rules_see_real_imports() -> None:
    """The reader finds the arrows that exist, so an empty list of breaks means something."""
    modules = all_imports()
    assert "devicedeck.inventory.write.other_writers" in modules["devicedeck.kube.pod_sync"]
    assert "devicedeck.kubelet.names" in modules["devicedeck.inventory.schemas"]
    assert any(within(name, "devicedeck.web") for name in modules["devicedeck.ui.routes.devices"])
