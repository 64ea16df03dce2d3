"""Import graph of peerwatch between its rooms (issue 17 item 2).

Nodes are the sub-packages (``act``, ``service``…) and each top-level module (``frames``,
``cli``…). Every ``import`` / ``from … import`` in src/peerwatch/**/*.py counts, at module level
and inside functions (a lazy import is still a dependency), absolute and relative alike. Imports
under ``if TYPE_CHECKING:`` are ignored: they never run, and they are how a lower room may name a
higher room's type without depending on it.

Today's tangles are listed as KNOWN with their reason; the test fails on a new one and on a KNOWN
one that has gone (so the lists only shrink).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "peerwatch"

# The core must not reach up into these rooms.
CORE = frozenset({"sources", "frames", "catalog", "detect", "decide"})
UPPER = frozenset({"service", "web", "act"})

# (from room, to room) -> why it is there today. Each one is a debt to remove.
# None today: the core imports nothing from service/web/act at run time.
KNOWN_BACK_ARROWS: dict[tuple[str, str], str] = {}

# Cycles as the sorted tuple of rooms in one strongly connected component -> why.
KNOWN_CYCLES: dict[tuple[str, ...], str] = {}


def _room(module: str) -> str | None:
    """``peerwatch.detect.states`` -> ``detect``; None outside peerwatch."""
    parts = module.split(".")
    if parts[0] != "peerwatch" or len(parts) < 2:
        return None
    return parts[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _module_name(path: Path) -> tuple[str, bool]:
    """Dotted module name of a source file, and whether it is a package ``__init__``."""
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Absolute module names an import statement names (``from x import y`` also names x.y)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base_parts = package[: len(package) - (node.level - 1)]
        base = ".".join(base_parts + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    # `from peerwatch import frames` names the top-level module frames, not peerwatch itself.
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_edges() -> dict[tuple[str, str], set[str]]:
    """(from room, to room) -> the files where that edge is made."""
    edges: dict[tuple[str, str], set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module, is_package = _module_name(path)
        source = _room(module)
        if source is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree):
            for target in _targets(node, module, is_package):
                room = _room(target)
                if room is None or room == source or not _is_room(room):
                    continue
                edges.setdefault((source, room), set()).add(str(path.relative_to(SRC)))
    return edges


def _is_room(name: str) -> bool:
    return (SRC / name).is_dir() or (SRC / f"{name}.py").is_file()


def cycles(edges: dict[tuple[str, str], set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components with more than one room (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def back_arrows(edges: dict[tuple[str, str], set[str]]) -> dict[tuple[str, str], set[str]]:
    return {edge: files for edge, files in edges.items() if edge[0] in CORE and edge[1] in UPPER}


@pytest.fixture(scope="module")
def edges() -> dict[tuple[str, str], set[str]]:
    return import_edges()


def test_graph_sees_known_imports(edges: dict[tuple[str, str], set[str]]) -> None:
    # Guards the parser: these edges exist (module-level, relative, function-level forms).
    assert ("cli", "service") in edges
    assert ("detect", "catalog") in edges
    assert ("service", "detect") in edges


def test_no_new_back_arrows_from_core(edges: dict[tuple[str, str], set[str]]) -> None:
    found = back_arrows(edges)
    new = {edge: sorted(files) for edge, files in found.items() if edge not in KNOWN_BACK_ARROWS}
    assert not new, f"core imports an upper room (sources/detect/... must not import service/web/act): {new}"
    gone = sorted(set(KNOWN_BACK_ARROWS) - set(found))
    assert not gone, f"these KNOWN back arrows are gone; delete them from KNOWN_BACK_ARROWS: {gone}"


def test_no_new_import_cycles(edges: dict[tuple[str, str], set[str]]) -> None:
    found = cycles(edges)
    detail = {
        cycle: {f"{a}->{b}": sorted(edges[(a, b)]) for a in cycle for b in cycle if (a, b) in edges}
        for cycle in found
        if cycle not in KNOWN_CYCLES
    }
    assert not detail, f"new import cycle between rooms: {detail}"
    gone = sorted(set(KNOWN_CYCLES) - set(found))
    assert not gone, f"these KNOWN cycles are gone or changed; update KNOWN_CYCLES: {gone}"


def test_cycle_finder_finds_a_cycle() -> None:
    # The checker itself must be able to fail.
    fake = {("a", "b"): {"x"}, ("b", "c"): {"y"}, ("c", "a"): {"z"}, ("c", "d"): {"w"}}
    assert cycles(fake) == [("a", "b", "c")]


def test_back_arrow_finder_flags_core_to_upper() -> None:
    fake = {("detect", "service"): {"x"}, ("service", "detect"): {"y"}, ("web", "act"): {"z"}}
    assert back_arrows(fake) == {("detect", "service"): {"x"}}
