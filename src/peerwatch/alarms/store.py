"""What the service keeps between restarts, and the small Protocol every store implements.

An alarm's engine-owned fields (diagnosis, score, evidence, resolution) are written by the
evaluator in one transaction per step; people's fields (acknowledgement, a manual resolution) are
written by the API. The two never overwrite each other: a resolution, once stored, is final.
Node history for the lemon-risk model is derived from the alarms (an alarm whose action takes the
node out of service is a fault from its opening to its resolution), so it cannot drift from them.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from peerwatch.act.history import END, START, FaultEvent
from peerwatch.act.risk import RiskModel
from peerwatch.model import Alarm

OUT_OF_SERVICE = frozenset({"drain", "swap"})


@dataclass(frozen=True, slots=True)
class StoredAlarm:
    """An alarm with its lifecycle: who resolved it and when (data and wall time), acknowledgement."""

    alarm: Alarm
    opened_wall: float
    resolved_by: str | None = None  # engine | absence | source | user:<name>
    resolved_wall: float | None = None
    ack_by: str | None = None
    ack_wall: float | None = None
    ack_note: str = ""
    sent_labels: Mapping[str, str] | None = None  # the label set Alertmanager last received

    @property
    def id(self) -> str:
        return self.alarm.id

    @property
    def open(self) -> bool:
        return self.alarm.resolved_ts is None

    @property
    def status(self) -> str:
        if not self.open:
            return "resolved"
        return "acknowledged" if self.ack_by else "open"

    def as_json(self) -> dict[str, object]:
        """The GUIDE 3.1 alarm line plus its identity and lifecycle."""
        a = self.alarm
        return {
            "id": a.id,
            **a.as_json(),
            "status": self.status,
            "updated_ts": a.updated_ts,
            "resolved_ts": a.resolved_ts,
            "resolved_by": self.resolved_by,
            "opened_wall": self.opened_wall,
            "resolved_wall": self.resolved_wall,
            "acknowledged": None
            if self.ack_by is None
            else {"by": self.ack_by, "wall": self.ack_wall, "note": self.ack_note},
        }


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node the service has seen, and its place in the spare pool (``None``: not a spare)."""

    node: str
    first_seen: float
    last_seen: float
    spare: str | None = None


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """Something a person or the service did: acknowledge, resolve, or a remediation (drain, swap, undrain).

    A remediation also keeps the spare swapped in, the commands (argv lists), the mode
    (``dry-run``: rendered, not run; ``execute``), the first failing or last exit code and the output.
    """

    wall: float
    kind: str
    alarm_id: str | None
    node: str
    by: str
    note: str = ""
    spare: str | None = None
    argv: tuple[tuple[str, ...], ...] = ()
    mode: str | None = None
    exit_code: int | None = None
    output: str = ""

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "wall": self.wall,
            "kind": self.kind,
            "alarm_id": self.alarm_id,
            "node": self.node,
            "by": self.by,
            "note": self.note,
        }
        if self.mode is not None:
            out |= {
                "spare": self.spare,
                "argv": [list(a) for a in self.argv],
                "mode": self.mode,
                "exit_code": self.exit_code,
                "output": self.output,
            }
        return out


@dataclass(frozen=True, slots=True)
class StepChanges:
    """Everything one evaluation step writes, committed in one transaction."""

    alarms: Sequence[StoredAlarm] = ()
    nodes: Sequence[str] = ()
    seen_ts: float = 0.0
    evaluated_until: float | None = None
    meta: Mapping[str, str] = field(default_factory=dict)


class Store(Protocol):
    """Persistent state of the live service: ``SQLiteStore`` or ``PostgresStore``, with the same semantics."""

    def commit(self, changes: StepChanges) -> None:
        """Upsert alarms (engine-owned fields only), record nodes seen and meta; atomically."""
        ...

    def alarms(
        self,
        *,
        open_only: bool = False,
        node: str | None = None,
        touching: float | None = None,
        resolved_wall_after: float | None = None,
        limit: int = 1000,
    ) -> list[StoredAlarm]:
        """Newest first; ``touching``: open, or resolved at or after that data time;
        ``resolved_wall_after``: open, or resolved at or after that wall time."""
        ...

    def alarm(self, alarm_id: str) -> StoredAlarm | None: ...

    def acknowledge(self, alarm_id: str, by: str, note: str, wall: float) -> StoredAlarm: ...

    def resolve(self, alarm_id: str, by: str, note: str, at: float, wall: float) -> StoredAlarm: ...

    def mark_sent(self, alarm_id: str, labels: Mapping[str, str]) -> None: ...

    def nodes(self) -> list[NodeRecord]: ...

    def set_spares(self, nodes: Sequence[str], wall: float) -> None:
        """Make the spare pool hold exactly ``nodes`` (new ones available, others kept as they are)."""
        ...

    def actions(self, alarm_id: str | None = None) -> list[ActionRecord]: ...

    def record_action(
        self, action: ActionRecord, spare_state: str | None = None, *, spare_was: tuple[str, ...] = ()
    ) -> None:
        """Append ``action``; with ``spare_state``, set its spare's pool state too, atomically.

        With ``spare_was``, only if the spare is in one of those states now, checked in the same transaction:
        otherwise nothing is written and :class:`NotFound` (not in the pool) or :class:`Conflict` is raised.
        """
        ...

    def meta(self, key: str) -> str | None: ...

    def claim(self, key: str, owner: str, wall: float, ttl: float) -> str | None:
        """Hold the lease ``key`` for ``owner`` until ``wall + ttl``, atomically, unless another owner
        holds it (see ``lease_holder``); returns that holder, or None once it is ours."""
        ...

    def close(self) -> None: ...


def fault_events(alarms: Sequence[StoredAlarm]) -> list[FaultEvent]:
    """Node history for the risk model: alarms that take a node out of service, as fault start/end."""
    events = []
    for s in alarms:
        a = s.alarm
        if a.action not in OUT_OF_SERVICE:
            continue
        detail = f"{a.diagnosis} ({a.id})"
        events.append(FaultEvent(a.ts, a.node, START, a.component, detail))
        if a.resolved_ts is not None and math.isfinite(a.resolved_ts):
            events.append(FaultEvent(a.resolved_ts, a.node, END, a.component, detail))
    return sorted(events, key=lambda e: e.ts)


def node_risk(alarms: Sequence[StoredAlarm], nodes: Iterable[str], at: float) -> dict[str, float]:
    """Lemon risk of every node from the alarms that took nodes out of service."""
    model = RiskModel(nodes=nodes)
    for event in fault_events(alarms):
        if event.ts <= at:
            model.observe(event)
    return model.scores(at)


def lease_holder(value: str | None, owner: str, wall: float) -> str | None:
    """Who else holds a lease stored as ``"host:pid expiry"`` at wall time ``wall`` (None: nobody).

    A lease is free when it expired, is ``owner``'s, or belongs to a process of this host that is
    gone (a service killed with -9 and restarted at once need not wait for the expiry)."""
    if value is None:
        return None
    holder, _, expiry = value.rpartition(" ")
    if holder == owner or float(expiry) < wall:
        return None
    host, _, pid = holder.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # alive, another user's
            pass
    return holder


def lease_owner() -> str:
    """This process, as a lease names it."""
    return f"{socket.gethostname()}:{os.getpid()}"
