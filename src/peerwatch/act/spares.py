"""The spare pool: which available spare to swap in, lowest lemon risk first.

One place decides this for both the dashboard's spares page and ``POST .../remediate``, so the
spare a person is shown is the spare the service would pick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peerwatch.service.store import OUT_OF_SERVICE, StoredAlarm

AVAILABLE = "available"
IN_USE = "in_use"


@dataclass(frozen=True, slots=True)
class Swap:
    alarm: StoredAlarm
    spare: str | None  # None: no available spare left
    spare_risk: float | None


def spare_pool(views: Sequence[Mapping[str, Any]]) -> list[tuple[float, str]]:
    """Available spares without an open alarm, as ``(risk, node)``, lowest risk first (ties by name)."""
    return sorted(
        (float(v["risk"]), str(v["node"])) for v in views if v.get("spare") == AVAILABLE and v["status"] != "alarm"
    )


def recommend(open_alarms: Sequence[StoredAlarm], views: Sequence[Mapping[str, Any]]) -> list[Swap]:
    """One row per open alarm that takes its node out, critical and swap first, with a spare or None."""
    wanted = [s for s in open_alarms if s.alarm.action in OUT_OF_SERVICE]
    wanted.sort(key=lambda s: (s.alarm.severity != "critical", s.alarm.action != "swap", s.alarm.ts))
    pool = spare_pool(views)
    out, taken = [], set()
    for s in wanted:
        if s.alarm.node in taken:  # a second alarm on the same node needs no second spare
            continue
        taken.add(s.alarm.node)
        pick = pool.pop(0) if pool else None
        out.append(Swap(s, pick[1] if pick else None, pick[0] if pick else None))
    return out
