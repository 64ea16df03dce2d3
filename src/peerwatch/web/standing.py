"""Lemon risk as people read it: a node's rank among the fleet by risk and how often it was taken out
before, instead of the risk model's raw factor ("104.8×" says little, and grows without bound)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peerwatch.web.format import count


@dataclass(frozen=True, slots=True)
class Standing:
    """``rank`` of ``of`` nodes by lemon risk (1: likeliest to fail next; ties share a rank) and the
    number of incidents (alarms that took the node out of service, an open one included)."""

    rank: int
    of: int
    incidents: int
    risk: float

    @property
    def top_percent(self) -> int:
        return max(1, round(100 * self.rank / max(self.of, 1)))

    def text(self) -> str:
        """``rank 2 of 63 (top 3%) · 3 incidents so far``; ``no incident so far`` for a clean record (an
        incident: an alarm that took the node out of service, an open one included)."""
        if self.incidents == 0:
            return "no incident so far"
        return f"rank {self.rank} of {self.of} (top {self.top_percent}%) · {count(self.incidents, 'incident')} so far"

    def tip(self) -> str:
        return f"{self.text()}; lemon risk {self.risk:.3g}× a node with no history (docs/fleet.md)"


def standings(views: Sequence[Mapping[str, Any]]) -> dict[str, Standing]:
    """Every node's standing among ``views`` (``alarms.views.node_views``)."""
    ordered = sorted(views, key=lambda v: (-float(v["risk"]), -int(v.get("incidents", 0))))
    out: dict[str, Standing] = {}
    rank, last = 0, None
    for i, v in enumerate(ordered, start=1):
        key = (float(v["risk"]), int(v.get("incidents", 0)))
        if key != last:
            rank, last = i, key
        out[str(v["node"])] = Standing(rank, len(ordered), key[1], key[0])
    return out
