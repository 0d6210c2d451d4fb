"""The layers of DESIGN.md, read from the imports of every module under app/.

kubelet <- inventory <- kube <- (api, ui) <- main; api and ui share app/web and never import
each other; the agent and the simulators reach no database code and no domain.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"

DATABASE = {"app.db", "app.inventory", "app.auth", "sqlalchemy", "alembic", "psycopg"}
SERVICE = {"app.main", "app.background", "app.api", "app.ui", "app.web", "app.kube"}

# importer -> what it must never import (a name covers the package and its modules).
FORBIDDEN: dict[str, set[str]] = {
    "app.kubelet": DATABASE | SERVICE | {"app.agent", "app.sim", "app.demo"},
    "app.inventory": SERVICE | {"app.agent", "app.sim", "app.demo"},
    "app.kube": {"app.main", "app.api", "app.ui", "app.web", "app.agent", "app.sim"},
    "app.web": {"app.main", "app.api", "app.ui", "app.agent", "app.sim"},
    "app.api": {"app.main", "app.ui", "app.agent", "app.sim"},
    "app.ui": {"app.main", "app.api", "app.agent", "app.sim"},
    "app.background": {"app.main", "app.api", "app.ui", "app.kube"},
    "app.webhooks": {"app.main", "app.api", "app.ui", "app.kube", "app.agent", "app.sim"},
    "app.agent": DATABASE | SERVICE | {"app.sim", "app.demo"},
    "app.sim": DATABASE | SERVICE | {"app.agent", "app.demo"},
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
    """The package (app.inventory) or top-level module (app.main) a module belongs to."""
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
    assert "app.inventory.other_writers" in modules["app.kube.pod_sync"]
    assert "app.kubelet.names" in modules["app.inventory.schemas"]
    assert any(within(name, "app.web") for name in modules["app.ui.routes.devices"])
