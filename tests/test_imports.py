"""Import graph of peerwatch between its rooms (issue 17 item 2): every import goes down ``ORDER``.

Nodes are the sub-packages (``alarms``, ``service``…) and each top-level module (``engine``,
``cli``…). Every ``import`` / ``from … import`` in src/peerwatch/**/*.py counts, at module level
and inside functions (a lazy import is still a dependency), absolute and relative alike, and under
``if TYPE_CHECKING:`` too: a type named from a higher room is a dependency on it all the same (a
lower room that needs a higher one's object names it by a Protocol of its own: alarms/blind.py's
``Collection``, alarms/delivery.py's ``WallClock``).

``ORDER`` lists the rooms in tiers, lowest first, in the order data flows through them; a room may
import only rooms of lower tiers (never one beside it or above it). A new room must be placed in
it, and a room that is gone must leave it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "peerwatch"

ORDER: tuple[tuple[str, ...], ...] = (
    ("promtext", "redact", "series_budget", "progress", "children"),  # leaves: import nothing of peerwatch
    ("model",),  # the data every stage passes on
    ("sources", "act", "training", "xid_catalog", "render"),  # inputs; fleet history and risk; Xid knowledge
    ("frames", "agent", "simulate", "evaluate"),  # samples -> steps; and the tools beside the pipeline
    ("catalog",),  # what each metric family means
    ("detect",),  # scores only
    ("decide",),  # policy, diagnosis, actions
    ("settings",),  # the detection settings table (it nests the detectors' and the policy's)
    ("offload",),  # a detector judging in a child process, for the engine
    ("engine", "settings_doc"),  # detect + decide over frames, for analyze and serve
    ("alarms",),  # a live alarm's life: store, reconciliation, blindness, sinks, remediation
    ("web",),  # the dashboard, over the alarms room
    ("service",),  # composition: runner, API, config, demo
    ("cli",),
    ("__main__",),
)


def _room(module: str) -> str | None:
    """``peerwatch.detect.states`` -> ``detect``; None outside peerwatch."""
    parts = module.split(".")
    if parts[0] != "peerwatch" or len(parts) < 2:
        return None
    return parts[1]


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it is."""
    return (node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom))


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


def tiers(order: Sequence[Sequence[str]]) -> dict[str, int]:
    """Room -> its tier in ``order`` (0 lowest)."""
    return {room: i for i, tier in enumerate(order) for room in tier}


def upward_edges(
    edges: dict[tuple[str, str], set[str]], order: Sequence[Sequence[str]]
) -> dict[tuple[str, str], set[str]]:
    """Edges that do not go to a lower tier (a room beside or above), or touch a room not in ``order``."""
    tier = tiers(order)
    return {(a, b): files for (a, b), files in edges.items() if a not in tier or b not in tier or tier[b] >= tier[a]}


@pytest.fixture(scope="module")
def edges() -> dict[tuple[str, str], set[str]]:
    return import_edges()


def test_graph_sees_known_imports(edges: dict[tuple[str, str], set[str]]) -> None:
    # Guards the parser: these edges exist (module-level, relative, function-level and
    # TYPE_CHECKING forms).
    assert ("cli", "service") in edges
    assert ("detect", "catalog") in edges
    assert ("service", "detect") in edges
    assert ("cli", "settings") in edges  # only under TYPE_CHECKING in cli.py


def test_order_names_every_room_once() -> None:
    rooms = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    rooms |= {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    listed = [room for tier in ORDER for room in tier]
    assert len(listed) == len(set(listed)), "a room is listed twice in ORDER"
    assert not rooms - set(listed), f"rooms missing from ORDER (place them): {sorted(rooms - set(listed))}"
    assert not set(listed) - rooms, f"rooms in ORDER that no longer exist: {sorted(set(listed) - rooms)}"


def test_every_import_goes_down_the_order(edges: dict[tuple[str, str], set[str]]) -> None:
    tier = tiers(ORDER)
    wrong = {
        f"{a} (tier {tier.get(a)}) -> {b} (tier {tier.get(b)})": sorted(files)
        for (a, b), files in upward_edges(edges, ORDER).items()
    }
    assert not wrong, f"imports that go up or sideways in ORDER: {wrong}"


def test_no_import_cycles(edges: dict[tuple[str, str], set[str]]) -> None:
    found = cycles(edges)
    detail = {
        cycle: {f"{a}->{b}": sorted(edges[(a, b)]) for a in cycle for b in cycle if (a, b) in edges} for cycle in found
    }
    assert not detail, f"import cycle between rooms: {detail}"


def test_cycle_finder_finds_a_cycle() -> None:
    # The checker itself must be able to fail.
    fake = {("a", "b"): {"x"}, ("b", "c"): {"y"}, ("c", "a"): {"z"}, ("c", "d"): {"w"}}
    assert cycles(fake) == [("a", "b", "c")]


def test_order_checker_flags_up_and_sideways_edges() -> None:
    order = (("model",), ("detect", "sources"), ("service",))
    fake = {
        ("detect", "model"): {"down"},
        ("service", "detect"): {"down two"},
        ("detect", "service"): {"up"},
        ("detect", "sources"): {"sideways"},
        ("detect", "newroom"): {"unplaced"},
    }
    assert upward_edges(fake, order) == {
        ("detect", "service"): {"up"},
        ("detect", "sources"): {"sideways"},
        ("detect", "newroom"): {"unplaced"},
    }
