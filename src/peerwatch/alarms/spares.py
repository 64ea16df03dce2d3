"""The spare pool: which available spare to swap in, lowest lemon risk first, quarantine, and giving one back.

One place decides this for both the dashboard's spares page and ``POST .../remediate``, so the
spare a person is shown is the spare the service would pick. A spare is ``available`` (trusted);
``in_use`` once an executed swap brought it into service, until it is released; or
``quarantined``, not offered for swaps, when an alarm opened on it while it was available
(machines that fail keep failing) or a person put it there, until it is released (after a burn-in,
say). Only available spares are offered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peerwatch.alarms.store import OUT_OF_SERVICE, ActionRecord, Store, StoredAlarm

AVAILABLE = "available"
IN_USE = "in_use"
QUARANTINED = "quarantined"


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


def release(store: Store, spare: str, by: str, note: str, wall: float) -> ActionRecord:
    """Put an in-use or quarantined spare back in the pool as available, stored as a ``release`` action
    in the same transaction; NotFound if it is not in the pool, Conflict if it is available already.
    No command is run: the pool state is peerwatch's own bookkeeping of which spares it may swap in."""
    action = ActionRecord(wall, "release", None, spare, by, note, spare=spare)
    store.record_action(action, AVAILABLE, spare_was=(IN_USE, QUARANTINED))
    return action


def quarantine(store: Store, spare: str, by: str, note: str, wall: float, alarm_id: str | None = None) -> ActionRecord:
    """Take an available spare out of the offer, stored as a ``quarantine`` action in the same
    transaction; NotFound if it is not in the pool, Conflict if it is not available."""
    action = ActionRecord(wall, "quarantine", alarm_id, spare, by, note, spare=spare)
    store.record_action(action, QUARANTINED, spare_was=(AVAILABLE,))
    return action
