"""What ``GET /api/v1/nodes`` shows of each node: alarms, latest scores, lemon risk, spare-pool state,
workload group."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from peerwatch.act.history import START
from peerwatch.alarms.state import LiveState
from peerwatch.alarms.store import fault_events, node_risk


def node_views(service: LiveState) -> list[dict[str, Any]]:
    """One entry per node seen or listed as a spare, in name order."""
    records = service.store.nodes()
    open_on: dict[str, list[str]] = defaultdict(list)
    for s in service.store.alarms(open_only=True, limit=100_000):
        open_on[s.alarm.node].append(s.id)
    by_component: dict[str, dict[str, float]] = defaultdict(dict)
    for (node, component, _metric), score in service.scores.items():
        by_component[node][component] = max(by_component[node].get(component, 0.0), round(score, 3))
    groups = service.groups
    everything = service.store.alarms(limit=100_000)
    risk = node_risk(everything, (r.node for r in records), service.now())
    incidents = Counter(e.node for e in fault_events(everything) if e.kind == START)
    out = []
    for r in records:
        components = by_component.get(r.node, {})
        group = groups.get(r.node)
        if open_on.get(r.node):
            status = "alarm"
        elif r.spare is not None:
            status = "spare"
        else:
            status = "ok" if r.last_seen else "unseen"
        out.append(
            {
                "node": r.node,
                "status": status,
                "open_alarms": open_on.get(r.node, []),
                "score": max(components.values(), default=0.0),
                "components": components,
                "risk": round(risk.get(r.node, 1.0), 4),
                "incidents": incidents.get(r.node, 0),  # alarms that took it out of service (drain, swap)
                "spare": r.spare,
                "group": group.as_json() if group is not None else None,  # None: not in the last evaluation
                "first_seen": r.first_seen or None,
                "last_seen": r.last_seen or None,
            }
        )
    return out
