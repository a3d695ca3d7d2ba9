"""The package's layers hold, read from the code's own imports (every ``import`` statement, also those inside
functions): no module imports from a higher floor, and no modules import each other in a circle.

The floors, from the bottom (``docs/decisions/0253-layers-enforced-spark-package.md``): a module may import from its own floor and the
floors below it.  A new top-level module or package must be given a floor here.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "crowdspark"

#: floor -> the top-level modules and packages of ``crowdspark`` on it, bottom first
FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    ("core", frozenset({"version", "errors", "faces", "validation", "docstrings", "rng", "stats", "block",
                        "metrics"})),
    ("models", frozenset({"models", "quality", "label_metrics"})),
    ("config", frozenset({"config", "defaults"})),
    ("io", frozenset({"io", "synthetic", "lake"})),
    ("engine", frozenset({"engine"})),
    ("pipeline", frozenset({"pipeline"})),
    ("report", frozenset({"report", "status"})),
    ("faces", frozenset({"__init__", "__main__", "api", "ml", "cli", "spark_session"})),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def _imports(path: Path) -> set[str]:
    """The ``crowdspark`` modules ``path`` imports (``from a.b import c`` names ``a.b.c`` when that is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "crowdspark":
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "crowdspark")
    return found


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (itself and its own package's ``__init__`` left out)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = {t for t in _imports(path) if t in paths}
        graph[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return graph


def _unit(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _floor(module: str) -> int:
    unit = _unit(module)
    for index, (_, units) in enumerate(FLOORS):
        if unit in units:
            return index
    raise AssertionError(f"{module} ({unit}) is on no floor: add it to FLOORS in tests/test_layers.py")


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_every_module_is_on_a_floor():
    for module in _graph():
        _floor(module)


def test_no_module_imports_from_a_higher_floor():
    graph = _graph()
    upward = sorted(f"{a} (floor {FLOORS[_floor(a)][0]}) imports {b} (floor {FLOORS[_floor(b)][0]})"
                    for a, targets in graph.items() for b in targets if _floor(b) > _floor(a))
    assert not upward, "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle():
    circles = _circles(_graph())
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)


def test_the_checks_see_an_upward_import_and_a_circle():
    graph = {"crowdspark.models.a": {"crowdspark.pipeline.b"}, "crowdspark.pipeline.b": {"crowdspark.models.a"}}
    assert _floor("crowdspark.models.a") < _floor("crowdspark.pipeline.b")
    assert _circles(graph) == [["crowdspark.models.a", "crowdspark.pipeline.b"]]
    assert "crowdspark.engine.spark.blocks" in _graph()["crowdspark.pipeline.prepare"]  # a function's import
