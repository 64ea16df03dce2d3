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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from peerwatch.act.history import END, START, FaultEvent
from peerwatch.model import Alarm, Evidence
from peerwatch.service.errors import Conflict, NotFound

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


# -- how records are kept in SQL tables (shared by the SQLite and PostgreSQL stores) ------------


class Row(Protocol):
    """A result row read by column name (``sqlite3.Row``, a psycopg ``dict_row``)."""

    def __getitem__(self, key: str, /) -> Any: ...


ACTION_COLUMNS = ("wall", "kind", "alarm_id", "node", "by", "note", "spare", "argv", "mode", "exit_code", "output")


def alarms_query(
    mark: str,
    *,
    open_only: bool,
    node: str | None,
    touching: float | None,
    resolved_wall_after: float | None,
    limit: int,
) -> tuple[str, list[object]]:
    """``Store.alarms`` as SQL with ``mark`` as the placeholder (``?`` for SQLite, ``%s`` for psycopg)."""
    where: list[str] = []
    args: list[object] = []
    if open_only:
        where.append("resolved_ts IS NULL")
    if node is not None:
        where.append(f"node = {mark}")
        args.append(node)
    if touching is not None:
        where.append(f"(resolved_ts IS NULL OR resolved_ts >= {mark})")
        args.append(touching)
    if resolved_wall_after is not None:
        where.append(f"(resolved_ts IS NULL OR resolved_wall >= {mark})")
        args.append(resolved_wall_after)
    sql = "SELECT * FROM alarms" + (" WHERE " + " AND ".join(where) if where else "")
    return sql + f" ORDER BY ts DESC, node LIMIT {mark}", [*args, limit]


def alarm_columns(s: StoredAlarm) -> dict[str, object]:
    """The engine-owned columns of an alarm row (people's columns are written by their own calls)."""
    a = s.alarm
    return {
        "id": a.id,
        "node": a.node,
        "ts": a.ts,
        "component": a.component,
        "diagnosis": a.diagnosis,
        "severity": a.severity,
        "score": a.score,
        "action": a.action,
        "evidence": orjson.dumps([e.as_json() for e in a.evidence]).decode(),
        "updated_ts": a.updated_ts,
        "resolved_ts": a.resolved_ts,
        "resolved_by": s.resolved_by,
        "opened_wall": s.opened_wall,
        "resolved_wall": s.resolved_wall,
    }


def stored_alarm(r: Row) -> StoredAlarm:
    """An alarms row back as a :class:`StoredAlarm`."""
    alarm = Alarm(
        id=r["id"],
        ts=r["ts"],
        node=r["node"],
        component=r["component"],
        diagnosis=r["diagnosis"],
        severity=r["severity"],
        score=r["score"],
        action=r["action"],
        evidence=tuple(_evidence(e) for e in orjson.loads(r["evidence"])),
        updated_ts=r["updated_ts"],
        resolved_ts=r["resolved_ts"],
    )
    return StoredAlarm(
        alarm=alarm,
        opened_wall=r["opened_wall"],
        resolved_by=r["resolved_by"],
        resolved_wall=r["resolved_wall"],
        ack_by=r["ack_by"],
        ack_wall=r["ack_wall"],
        ack_note=r["ack_note"],
        sent_labels=None if r["sent_labels"] is None else orjson.loads(r["sent_labels"]),
    )


def action_columns(a: ActionRecord) -> tuple[object, ...]:
    """An action's values in :data:`ACTION_COLUMNS` order (argv as a JSON list of lists)."""
    argv = orjson.dumps([list(x) for x in a.argv]).decode() if a.argv else None
    return (a.wall, a.kind, a.alarm_id, a.node, a.by, a.note, a.spare, argv, a.mode, a.exit_code, a.output)


def action_record(r: Row) -> ActionRecord:
    """An actions row (:data:`ACTION_COLUMNS`) back as an :class:`ActionRecord`."""
    return ActionRecord(
        wall=r["wall"],
        kind=r["kind"],
        alarm_id=r["alarm_id"],
        node=r["node"],
        by=r["by"],
        note=r["note"],
        spare=r["spare"],
        argv=tuple(tuple(a) for a in orjson.loads(r["argv"])) if r["argv"] else (),
        mode=r["mode"],
        exit_code=r["exit_code"],
        output=r["output"] or "",
    )


def check_spare(spare: str | None, state: str | None, wanted: tuple[str, ...]) -> None:
    """Raise unless the spare's pool ``state`` (None: not in the pool) is one of ``wanted``
    (``record_action(spare_was=)``)."""
    if state is None:
        raise NotFound(f"{spare!r} is not in the spare pool (setting spares)")
    if state not in wanted:
        raise Conflict(f"spare {spare} is {state}, not {' or '.join(wanted)}")


def _evidence(item: dict[str, object]) -> Evidence:
    def num(x: object) -> float | None:
        return None if x is None else float(x)  # type: ignore[arg-type]

    labels = item.get("labels") or {}
    assert isinstance(labels, dict)
    value = num(item.get("value"))
    return Evidence(
        metric=str(item["metric"]),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        value=float("nan") if value is None else value,
        peer_median=num(item.get("peer_median")),
        robust_z=num(item.get("robust_z")),
        note=str(item.get("note") or ""),
    )


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
