"""The layers of DESIGN.md, read from the imports of every module under devicedeck/.

kubelet <- inventory <- kube <- (api, ui) <- main; api and ui share devicedeck/web and never import
each other; the agent and the simulators reach no database code and no domain.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "devicedeck"

DATABASE = {
    "devicedeck.db",
    "devicedeck.inventory",
    "devicedeck.auth",
    "sqlalchemy",
    "alembic",
    "psycopg",
}
SERVICE = {
    "devicedeck.main",
    "devicedeck.background",
    "devicedeck.api",
    "devicedeck.ui",
    "devicedeck.web",
    "devicedeck.kube",
}

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
    "devicedeck.background": {
        "devicedeck.main",
        "devicedeck.api",
        "devicedeck.ui",
        "devicedeck.kube",
    },
    "devicedeck.webhooks": {
        "devicedeck.main",
        "devicedeck.api",
        "devicedeck.ui",
        "devicedeck.kube",
        "devicedeck.agent",
        "devicedeck.sim",
    },
    "devicedeck.agent": DATABASE
    | SERVICE
    | {"devicedeck.sim", "devicedeck.demo", "devicedeck.truth"},
    "devicedeck.sim": DATABASE
    | SERVICE
    | {"devicedeck.agent", "devicedeck.demo", "devicedeck.truth"},
    # The oracle checks the service from outside, as a user would: through its API.
    "devicedeck.truth": DATABASE
    | SERVICE
    | {"devicedeck.agent", "devicedeck.demo.runner", "devicedeck.demo.tokens"},
}
# The oracle must not reach the database even through the modules it borrows.
OUTSIDE_CHECKERS = ("devicedeck.truth",)


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


def reachable(start: str, modules: dict[str, set[str]]) -> set[str]:
    """Every name a module imports, directly or through the devicedeck modules it imports
    (and their packages, which importing them runs)."""
    seen: set[str] = set()
    found: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo.extend(
            ".".join(parts[:i]) for i in range(2, len(parts)) if ".".join(parts[:i]) in modules
        )
        for name in modules.get(module, set()):
            found.add(name)
            if name in modules:
                todo.append(name)
    return found


def test_the_oracle_reaches_no_database_code_at_all() -> None:
    modules = all_imports()
    broken = []
    for module in sorted(modules):
        if not any(within(module, checker) for checker in OUTSIDE_CHECKERS):
            continue
        for name in sorted(reachable(module, modules)):
            if any(within(name, f) for f in DATABASE):
                broken.append(f"{module} reaches {name}")
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
    assert "devicedeck.inventory.other_writers" in modules["devicedeck.kube.pod_sync"]
    assert "devicedeck.kubelet.names" in modules["devicedeck.inventory.schemas"]
    assert any(within(name, "devicedeck.web") for name in modules["devicedeck.ui.routes.devices"])
    # The demo's own runner does reach the database, through its token module.
    assert any(within(name, "sqlalchemy") for name in reachable("devicedeck.demo.runner", modules))
