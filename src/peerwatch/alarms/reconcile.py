"""Reconciling each evaluation's alarms with the stored ones: one incident, one alarm, across windows and restarts.

The engine reports after each evaluation the incidents it has open and those it just resolved.
After a restart it re-derives them from its warm-up window, so the same incident can come back
with another opening time (its start was before the window, or the service restarted with less
history). The rules, in order, for each engine alarm:

1. the same (node, opened ts) as a stored alarm: it is that alarm; an open one takes the engine's
   diagnosis, evidence, score and resolution;
2. a stored alarm on the node that is still open, opened no later, and not matched by rule 1: the
   incident goes on; it keeps its identity and diagnosis, takes the higher score and any resolution;
3. an opening at a time already judged (at or before the last evaluated step, less ``grace``): an
   artefact of the shorter history after a restart, since the run that judged that time did not
   raise it; dropped;
4. otherwise a new alarm.

A stored open alarm that no engine alarm matched resolves once its node has been quiet for
``quiet`` seconds of data (``resolved_by: absence``). Stored resolutions are final.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from peerwatch.alarms.store import StoredAlarm
from peerwatch.model import Alarm

SERVICE_NODE = "peerwatch"  # alarms about peerwatch itself (monitoring blind); never the engine's


@dataclass(frozen=True, slots=True)
class Judged:
    """What one evaluation saw: its data span and what earlier evaluations had already judged."""

    start: float  # data time of the first step with data
    end: float  # data time of the last step evaluated
    evaluated_until: float | None  # last step of earlier evaluations (None: never evaluated)
    grace: float  # openings this close to the last evaluated step are news even after a restart
    quiet: float  # data seconds without an engine alarm before a stored one resolves
    wall: float


def reconcile(stored: Sequence[StoredAlarm], engine: Sequence[Alarm], judged: Judged) -> list[StoredAlarm]:
    """Rows to upsert: new alarms, open ones updated, ones resolved. ``stored``: open or recent alarms."""
    by_key = {(s.alarm.node, s.alarm.ts): s for s in stored}
    open_on: dict[str, list[StoredAlarm]] = defaultdict(list)
    for s in sorted(stored, key=lambda s: s.alarm.ts):
        if s.open and s.alarm.node != SERVICE_NODE:
            open_on[s.alarm.node].append(s)
    matched: set[str] = set()
    out: dict[str, StoredAlarm] = {}
    rest: list[Alarm] = []
    for a in sorted(engine, key=lambda a: (a.ts, a.node)):
        same = by_key.get((a.node, a.ts))
        if same is None:
            rest.append(a)
            continue
        matched.add(same.id)
        if same.open:
            out[same.id] = _merge(same, a, judged.wall, whole=True)
    for a in rest:
        going_on = [s for s in open_on[a.node] if s.id not in matched and s.alarm.ts <= a.ts]
        if going_on:
            s = going_on[-1]
            matched.add(s.id)
            out[s.id] = _merge(s, a, judged.wall, whole=False)
        elif judged.evaluated_until is not None and a.ts <= judged.evaluated_until - judged.grace:
            continue
        elif a.id not in out:
            resolved = a.resolved_ts is not None
            out[a.id] = StoredAlarm(a, judged.wall, "engine" if resolved else None, judged.wall if resolved else None)
    for alarms in open_on.values():
        for s in alarms:
            quiet_since = max(s.alarm.updated_ts, judged.start)
            if s.id not in matched and judged.end - quiet_since >= judged.quiet:
                ended = replace(s.alarm, resolved_ts=max(judged.end, s.alarm.ts))
                out[s.id] = replace(s, alarm=ended, resolved_by="absence", resolved_wall=judged.wall)
    return list(out.values())


def _merge(s: StoredAlarm, a: Alarm, wall: float, *, whole: bool) -> StoredAlarm:
    """The stored alarm updated by the engine's view of it (``whole``: seen from its opening)."""
    base = s.alarm
    if whole:
        new = replace(a, id=base.id, ts=base.ts, updated_ts=max(base.updated_ts, a.updated_ts))
    else:
        new = replace(base, score=max(base.score, a.score), updated_ts=max(base.updated_ts, a.updated_ts))
        new = replace(new, resolved_ts=None if a.resolved_ts is None else max(a.resolved_ts, base.ts))
    if new.resolved_ts is None:
        return replace(s, alarm=new)
    return replace(s, alarm=new, resolved_by="engine", resolved_wall=wall)
