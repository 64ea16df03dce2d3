"""The cluster page: every node × component category as a heat map, grouped by standing.

A cell is the strongest detector score at the last evaluated step among the node's components of
that category (``gpu/3`` is ``gpu``, ``ib/mlx5_0`` is ``ib``); a cell with an open alarm is
outlined. Nodes are grouped: open alarm, in service, spare pool, not seen; when the last evaluation
found more than one workload group (the peers a node is compared with), each of those sections is
split by workload group, so an idle spare pool or nodes on another job show as blocks of their own;
nodes whose work no other node shares (never compared) are named in the legend.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peerwatch.detect.workload import LONE_KIND
from peerwatch.model import ScoreKey
from peerwatch.web.format import count, number
from peerwatch.web.page import badge, esc
from peerwatch.web.paths import node_url
from peerwatch.web.standing import Standing, standings

CATEGORIES = ("gpu", "nvswitch", "ib", "net", "nfs", "disk", "node")
# A tile is marked a lemon from this lemon risk (times likelier to fail next than a node with no history)
# and this many incidents: one fresh fault alone lifts the risk, but a lemon is a node that fails again.
LEMON, LEMON_INCIDENTS = 2.0, 2
LEVELS = ((10.0, "l3"), (4.0, "l2"), (0.0, "l1"))  # score at least -> cell class
GROUPS = (("alarm", "Open alarms"), ("ok", "In service"), ("spare", "Spare pool"), ("unseen", "Not seen yet"))
UNGROUPED = "no workload group: not in the last evaluation"


def category(component: str) -> str:
    """``gpu/3`` -> ``gpu``; anything unknown counts as ``node``."""
    head = component.split("/", 1)[0].split(":", 1)[0]
    return head if head in CATEGORIES else "node"


@dataclass(frozen=True, slots=True)
class Cell:
    score: float | None
    metric: str = ""
    component: str = ""
    alarm: bool = False


def cells(scores: Mapping[ScoreKey, float], alarm_components: Mapping[str, set[str]]) -> dict[str, dict[str, Cell]]:
    """Per node and category: the strongest score, where it was, and whether an alarm is open there."""
    best: dict[str, dict[str, Cell]] = defaultdict(dict)
    for (node, component, metric), score in scores.items():
        cat = category(component)
        held = best[node].get(cat)
        if held is None or (held.score or 0.0) < score:
            best[node][cat] = Cell(score, metric, component)
    for node, components in alarm_components.items():
        for cat in {category(c) for c in components}:
            held = best[node].get(cat, Cell(None))
            best[node][cat] = Cell(held.score, held.metric, held.component, alarm=True)
    return best


def _cell_html(cat: str, cell: Cell | None) -> str:
    if cell is None or (cell.score is None and not cell.alarm):
        return '<i class="c"></i>'
    level = next((cls for floor, cls in LEVELS if (cell.score or 0.0) >= floor), "l1")
    where = f" — {cell.metric} on {cell.component}" if cell.metric else ""
    title = f"{cat}: {number(cell.score)}{where}{' — open alarm' if cell.alarm else ''}"
    return f'<i class="c {level}{" alarm" if cell.alarm else ""}" title="{esc(title)}"></i>'


def _tile(prefix: str, view: Mapping[str, Any], row: Mapping[str, Cell], standing: Standing | None) -> str:
    node = str(view["node"])
    extra = ""
    if view.get("spare"):
        extra = f" {badge('spare ' + str(view['spare']), 'spare')}"
    if standing is not None and standing.risk >= LEMON and standing.incidents >= LEMON_INCIDENTS:
        extra += (
            f' <span class="risk" title="{esc(standing.tip())}">lemon #{standing.rank}'
            f" · {count(standing.incidents, 'incident')}</span>"
        )
    grid = "".join(_cell_html(cat, row.get(cat)) for cat in CATEGORIES)
    group = view.get("group")
    where = f' data-group="{group["id"]}" title="{esc(group["label"])}"' if group else ""
    href = esc(node_url(f"{prefix}/nodes", node))
    return (
        f'<div class="tile {esc(view["status"])}" data-node="{esc(node)}"{where}>'
        f'<a href="{href}">{esc(node)}</a>{extra}<div class="cells">{grid}</div></div>'
    )


def _group_id(view: Mapping[str, Any]) -> int:
    group = view.get("group")
    return int(group["id"]) if group else 0  # 0: ungrouped, listed last


def _blocks(
    prefix: str,
    members: Sequence[Mapping[str, Any]],
    by_node: Mapping[str, Mapping[str, Cell]],
    split: bool,
    ranks: Mapping[str, Standing],
) -> str:
    """The tiles of one section; with ``split``, one block per workload group under its own heading."""
    parts: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for v in members:
        parts[_group_id(v) if split else 0].append(v)
    out = []
    for gid in sorted(parts, key=lambda g: (g == 0, g)):
        tiles = "\n".join(
            _tile(prefix, v, by_node.get(str(v["node"]), {}), ranks.get(str(v["node"]))) for v in parts[gid]
        )
        head = ""
        if split:
            group = parts[gid][0].get("group")
            here = len(parts[gid])
            title = str(group["label"]) if group else UNGROUPED
            count = f" <small>({here} in this section)</small>" if not group or here != group["size"] else ""
            head = f'<h3 class="workload" data-group="{gid}">{esc(title)}{count}</h3>'
        out.append(f'{head}<div class="heatmap">{tiles}</div>')
    return "\n".join(out)


def render_cluster(
    prefix: str,
    views: Sequence[Mapping[str, Any]],
    scores: Mapping[ScoreKey, float],
    open_components: Mapping[str, set[str]],
) -> str:
    """The heat map body, one section per standing of nodes, split by workload group when there are
    several (``views``: ``alarms.views.node_views``)."""
    by_node = cells(scores, open_components)
    ranks = standings(views)
    counts: dict[str, int] = defaultdict(int)
    workload: dict[int, str] = {}
    for v in views:
        counts[str(v["status"])] += 1
        if v.get("group"):
            workload[int(v["group"]["id"])] = str(v["group"]["label"])
    legend = (
        '<p class="legend">columns: '
        + " ".join(f"<b>{c}</b>" for c in CATEGORIES)
        + ' · score <i class="c l1"></i> below 4 <i class="c l2"></i> 4–10 <i class="c l3"></i> 10+'
        ' <i class="c alarm"></i> open alarm · '
        + ", ".join(f"{counts[k]} {name.lower()}" for k, name in GROUPS)
        + "</p>"
    )
    if workload:
        alone = sorted(str(v["node"]) for v in views if v.get("group") and v["group"]["kind"] == LONE_KIND)
        legend += (
            '<p class="legend">workload groups (a node is compared with its own group only): '
            + " · ".join(esc(workload[g]) for g in sorted(workload))
            + "</p>"
        )
        if alone:  # their soft metrics never alarm by comparison; hardware signals still do
            legend += (
                '<p class="legend lone">not compared, no node shares their work: '
                + ", ".join(esc(n) for n in alone)
                + "</p>"
            )
    split = len(workload) > 1
    sections = []
    for key, name in GROUPS:
        members = [v for v in views if v["status"] == key]
        if not members:
            continue
        sections.append(
            f'<section class="group {key}"><h2>{esc(name)} ({len(members)})</h2>'
            f"{_blocks(prefix, members, by_node, split, ranks)}</section>"
        )
    if not sections:
        sections.append('<p class="muted">no node seen yet: the first evaluation has not run</p>')
    return legend + "\n".join(sections)
