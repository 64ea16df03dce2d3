""" "Monitoring blind": a source that fails or stalls is an alarm, never silence.

The alarm is about peerwatch itself: node ``peerwatch``, component ``source``. Its diagnosis is
``exporter_down`` when scrape targets fail, else :data:`BLIND_DIAGNOSIS` (the TSDB cannot be
read, or its newest sample is older than ``stale_steps`` steps). It opens at the first blind step
and resolves at the first step that sees fresh data again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from peerwatch.alarms.reconcile import SERVICE_NODE
from peerwatch.alarms.store import StoredAlarm
from peerwatch.model import Alarm, Evidence


class Collection(Protocol):
    """What one collection of the service's source brought (service/live_sources.Fetch)."""

    @property
    def at(self) -> float: ...  # data time of the attempt
    @property
    def targets(self) -> int: ...  # scrape targets tried (0 for a TSDB)
    @property
    def down(self) -> Sequence[tuple[str, str]]: ...  # (target URL, why) of failed scrapes
    @property
    def error(self) -> str | None: ...  # the whole source failed
    @property
    def backlog(self) -> bool: ...  # more was there to read up to ``at``: old data by design


BLIND_COMPONENT = "source"
BLIND_DIAGNOSIS = "monitoring_blind"
MAX_EVIDENCE = 8


@dataclass(frozen=True, slots=True)
class Blindness:
    """Why the service cannot see the cluster (or part of it) at one step."""

    diagnosis: str
    evidence: tuple[Evidence, ...]
    total: bool  # nothing usable arrived: the engine must not judge this step

    @property
    def reason(self) -> str:
        return self.evidence[0].note if self.evidence else self.diagnosis


def blindness(
    fetch: Collection,
    newest: float | None,
    *,
    since: float,
    source: str,
    step: float,
    stale_steps: int,
    down_share: float,
) -> Blindness | None:
    """Whether ``fetch`` leaves the service blind; None when the source is healthy.

    ``newest``: the newest sample ever received (None: none yet); ``since``: when the service
    started, so that a source with no data at all is blind only once it has had time to send some.
    """
    where = (("source", source),)
    if fetch.targets and fetch.down and len(fetch.down) >= down_share * fetch.targets:
        evidence = tuple(
            Evidence("up", (("instance", url),), 0.0, note=f"scrape failed: {why}")
            for url, why in fetch.down[:MAX_EVIDENCE]
        )
        summary = Evidence(
            "peerwatch_scrape_targets_down",
            where,
            float(len(fetch.down)),
            note=f"{len(fetch.down)} of {fetch.targets} scrape targets failed",
        )
        return Blindness("exporter_down", (summary, *evidence), total=len(fetch.down) == fetch.targets)
    if fetch.error is not None:
        return Blindness(BLIND_DIAGNOSIS, (Evidence("peerwatch_source_up", where, 0.0, note=fetch.error),), True)
    age = fetch.at - (since if newest is None else newest)
    if age > stale_steps * step and not fetch.backlog:  # a backlog read is old data by design
        what = "no samples at all" if newest is None else f"newest sample is {age:.0f}s old"
        note = f"no fresh data: {what} (stale after {stale_steps} steps of {step:g}s)"
        return Blindness(BLIND_DIAGNOSIS, (Evidence("peerwatch_source_age_seconds", where, age, note=note),), True)
    return None


def blind_changes(
    open_blind: Sequence[StoredAlarm], blind: Blindness | None, now: float, wall: float
) -> list[StoredAlarm]:
    """Open, update or resolve the blind alarm for this step."""
    if blind is None:
        return [
            replace(
                s, alarm=replace(s.alarm, resolved_ts=max(now, s.alarm.ts)), resolved_by="source", resolved_wall=wall
            )
            for s in open_blind
        ]
    if open_blind:
        s = open_blind[-1]
        # The first cause names the alarm; later evidence shows how it goes on.
        return [replace(s, alarm=replace(s.alarm, updated_ts=now, evidence=blind.evidence))]
    ident = hashlib.sha1(f"{SERVICE_NODE}|{now}".encode()).hexdigest()[:12]
    alarm = Alarm(
        id=ident,
        ts=now,
        node=SERVICE_NODE,
        component=BLIND_COMPONENT,
        diagnosis=blind.diagnosis,
        severity="critical",
        score=0.0,
        action="watch",
        evidence=blind.evidence,
        updated_ts=now,
    )
    return [StoredAlarm(alarm, wall)]
