"""What the SQLite and PostgreSQL stores share: the Store Protocol in the SQL both speak, and their rows.

A store subclass gives a write transaction that no other writer interleaves with (SQLite's
``BEGIN IMMEDIATE``, an advisory lock on PostgreSQL) and reads; everything else is here, once.
Statements are written with ``?`` placeholders and ``{greatest}`` for the larger of two values;
:meth:`SqlStore._sql` puts in the driver's spelling.

The two reads every page and ``/metrics`` make, ``alarms`` and ``nodes``, are kept for
``READ_CACHE_SECONDS`` and dropped by any write through this store: decoding a few thousand alarms
with their evidence costs a tenth of a second of the interpreter's lock, and 50 clients asking for
it at once left the evaluation no time to run (docs/benchmarks.md, "HTTP under load"). A write by
another process is seen within that time.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from typing import Any, ClassVar, Protocol, TypeVar, cast

import orjson

from peerwatch.alarms.errors import Conflict, NotFound
from peerwatch.alarms.store import ActionRecord, NodeRecord, StepChanges, StoredAlarm, lease_holder
from peerwatch.model import Alarm, AlarmChange, Evidence

ACTION_COLUMNS = ("wall", "kind", "alarm_id", "node", "by", "note", "spare", "argv", "mode", "exit_code", "output")
# The engine-owned columns of an alarm row (people's columns are written by their own calls).
ALARM_COLUMNS = (
    "id",
    "node",
    "ts",
    "component",
    "diagnosis",
    "severity",
    "score",
    "action",
    "evidence",
    "updated_ts",
    "resolved_ts",
    "resolved_by",
    "opened_wall",
    "resolved_wall",
    "changes",
)
# A repeated step changes nothing: the engine's view is taken, a stored resolution kept.
UPSERT = f"""
INSERT INTO alarms ({", ".join(ALARM_COLUMNS)}) VALUES ({", ".join("?" * len(ALARM_COLUMNS))})
ON CONFLICT (id) DO UPDATE SET
  component = excluded.component, diagnosis = excluded.diagnosis, severity = excluded.severity,
  score = excluded.score, action = excluded.action, evidence = excluded.evidence, changes = excluded.changes,
  updated_ts = {{greatest}}(alarms.updated_ts, excluded.updated_ts),
  resolved_by = coalesce(alarms.resolved_by, excluded.resolved_by),
  resolved_wall = coalesce(alarms.resolved_wall, excluded.resolved_wall),
  resolved_ts = coalesce(alarms.resolved_ts, excluded.resolved_ts)
"""
META = "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
_QUOTED = ", ".join(f'"{c}"' for c in ACTION_COLUMNS)  # "by" is reserved in PostgreSQL
ACTION_INSERT = f"INSERT INTO actions ({_QUOTED}) VALUES ({', '.join('?' * len(ACTION_COLUMNS))})"
ACTION_SELECT = f"SELECT {_QUOTED} FROM actions"
READ_CACHE_SECONDS = 1.0
log = logging.getLogger("peerwatch.service")
_READ_LOCK = threading.RLock()  # cached reads, one at a time (all stores: they share the interpreter's lock)
T = TypeVar("T")


class Row(Protocol):
    """A result row read by column name (``sqlite3.Row``, a psycopg ``dict_row``)."""

    def __getitem__(self, key: str, /) -> Any: ...


class Cursor(Protocol):
    """What a write transaction offers: a ``sqlite3.Connection`` or a psycopg cursor."""

    def execute(self, sql: str, args: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, args: Any, /) -> Any: ...


class SqlStore:
    """:class:`~peerwatch.alarms.store.Store` over any SQL store given ``_write`` and ``_read``."""

    placeholder: ClassVar[str] = "?"
    greatest: ClassVar[str] = "max"
    _generations: Iterator[int] | None = None
    _generation = 0
    _reads: dict[Hashable, tuple[int, float, Any]] | None = None
    _decoded: dict[tuple[Any, ...], StoredAlarm | None] | None = None  # rows decoded since the last write
    _decoded_before: dict[tuple[Any, ...], StoredAlarm | None] | None = None  # and between the two writes before
    where = "store"  # how messages name the store

    @contextmanager
    def _changing(self, cached: bool = True) -> Iterator[Cursor]:
        """A write transaction after which (committed or not) no read from before it is served again;
        ``cached`` False: it writes nothing the cached reads show (the lease, meta)."""
        try:
            with self._write() as db:
                yield db
        finally:
            if cached:
                if self._generations is None:
                    self._generations = itertools.count(1)
                self._generation = next(self._generations)  # atomic: concurrent writers never share a number
                self._reads = {}
                # Rows decoded since the write before last are dropped unless read again since the last:
                # a superseded version of a row is never read again, so what is kept stays what is read.
                self._decoded_before, self._decoded = self._decoded, {}

    def _cached(self, key: Hashable, read: Callable[[], T]) -> T:
        """``read()``, or its result from under ``READ_CACHE_SECONDS`` ago with no write since. One
        caller reads at a time and the others wait for its result: 50 callers each decoding the same
        rows at once, under the interpreter's lock, would each take 50 times as long."""
        with _READ_LOCK:
            generation, now = self._generation, time.monotonic()
            hit = (self._reads or {}).get(key)
            if hit is not None and hit[0] == generation and now - hit[1] < READ_CACHE_SECONDS:
                value: T = hit[2]
                return value
            value = read()
            if self._generation == generation:  # no write ended meanwhile: the result is current
                if self._reads is None:
                    self._reads = {}
                self._reads[key] = (generation, now, value)
            return value

    def _write(self) -> AbstractContextManager[Cursor]:
        """One write transaction, serialised against every other writer."""
        raise NotImplementedError

    def _fetch(self, sql: str, args: Sequence[object]) -> Sequence[Row]:
        """The rows of one read (``sql`` in the driver's spelling), outside any write."""
        raise NotImplementedError

    def _read(self, sql: str, args: Sequence[object] = ()) -> Sequence[Row]:
        return self._fetch(self._sql(sql), args)

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self.placeholder).replace("{greatest}", self.greatest)

    def _run(self, db: Cursor, sql: str, args: Sequence[object] = ()) -> Any:
        return db.execute(self._sql(sql), args)

    def _one(self, db: Cursor, sql: str, args: Sequence[object]) -> Row | None:
        row: Row | None = self._run(db, sql, args).fetchone()
        return row

    def commit(self, changes: StepChanges) -> None:
        meta = dict(changes.meta)
        if changes.evaluated_until is not None:
            meta["evaluated_until"] = repr(changes.evaluated_until)
        with self._changing(bool(changes.alarms or changes.nodes)) as db:
            if changes.alarms:
                db.executemany(self._sql(UPSERT), [alarm_columns(s) for s in changes.alarms])
            if changes.nodes:
                db.executemany(
                    self._sql(
                        "INSERT INTO nodes VALUES (?, ?, ?) ON CONFLICT (node) DO UPDATE SET "
                        "last_seen = {greatest}(nodes.last_seen, excluded.last_seen)"
                    ),
                    [(n, changes.seen_ts, changes.seen_ts) for n in changes.nodes],
                )
            if meta:
                db.executemany(self._sql(META), list(meta.items()))

    def alarms(
        self,
        *,
        open_only: bool = False,
        node: str | None = None,
        touching: float | None = None,
        resolved_wall_after: float | None = None,
        limit: int = 1000,
    ) -> list[StoredAlarm]:
        where: list[str] = []
        args: list[object] = []
        if open_only:
            where.append("resolved_ts IS NULL")
        if node is not None:
            where.append("node = ?")
            args.append(node)
        if touching is not None:
            where.append("(resolved_ts IS NULL OR resolved_ts >= ?)")
            args.append(touching)
        if resolved_wall_after is not None:
            where.append("(resolved_ts IS NULL OR resolved_wall >= ?)")
            args.append(resolved_wall_after)
        sql = "SELECT * FROM alarms" + (" WHERE " + " AND ".join(where) if where else "")
        key = ("alarms", open_only, node, touching, resolved_wall_after, limit)

        def read() -> list[StoredAlarm]:
            decoded = (self._decode(r) for r in self._read(sql + " ORDER BY ts DESC, node LIMIT ?", [*args, limit]))
            return [s for s in decoded if s is not None]

        return list(self._cached(key, read))

    def _decode(self, r: Row) -> StoredAlarm | None:
        """The row as a StoredAlarm, decoded once per content: a row unchanged since it was last read
        (most of them, step after step) costs a lookup, not its evidence's JSON. None for a row that
        cannot be decoded (damaged on disk): logged once, and the others are still read."""
        # sqlite3.Row iterates its values, psycopg's dict_row its keys
        key = tuple(r.values()) if isinstance(r, dict) else tuple(cast(Iterable[Any], r))
        if self._decoded is None:
            self._decoded = {}
        if key in self._decoded:
            return self._decoded[key]
        before = self._decoded_before or {}
        if key in before:
            found = before[key]
        else:
            try:
                found = stored_alarm(r)
            except (ValueError, TypeError, KeyError) as exc:  # orjson's errors are ValueErrors
                log.warning("%s: alarm row %r cannot be read, left out: %s", self.where, key[0], exc)
                found = None
        self._decoded[key] = found
        return found

    def alarm(self, alarm_id: str) -> StoredAlarm | None:
        rows = self._read("SELECT * FROM alarms WHERE id = ?", (alarm_id,))
        return self._decode(rows[0]) if rows else None

    def acknowledge(self, alarm_id: str, by: str, note: str, wall: float) -> StoredAlarm:
        with self._changing() as db:
            current = self._existing(db, alarm_id)
            if not current.open:
                raise Conflict(f"alarm {alarm_id} is resolved; there is nothing to acknowledge")
            self._run(
                db, "UPDATE alarms SET ack_by = ?, ack_wall = ?, ack_note = ? WHERE id = ?", (by, wall, note, alarm_id)
            )
            self._action(db, ActionRecord(wall, "acknowledge", alarm_id, current.alarm.node, by, note))
        return self._found(alarm_id)

    def resolve(self, alarm_id: str, by: str, note: str, at: float, wall: float) -> StoredAlarm:
        with self._changing() as db:
            current = self._existing(db, alarm_id)
            if not current.open:
                raise Conflict(f"alarm {alarm_id} is already resolved (by {current.resolved_by})")
            self._run(
                db,
                "UPDATE alarms SET resolved_ts = ?, resolved_by = ?, resolved_wall = ? WHERE id = ?",
                (max(at, current.alarm.ts), f"user:{by}", wall, alarm_id),
            )
            self._action(db, ActionRecord(wall, "resolve", alarm_id, current.alarm.node, by, note))
        return self._found(alarm_id)

    def mark_sent(self, alarm_id: str, labels: Mapping[str, str]) -> None:
        with self._changing() as db:
            self._run(
                db, "UPDATE alarms SET sent_labels = ? WHERE id = ?", (orjson.dumps(dict(labels)).decode(), alarm_id)
            )

    def nodes(self) -> list[NodeRecord]:
        def read() -> list[NodeRecord]:
            rows = self._read(
                "SELECT n.node, n.first_seen, n.last_seen, s.state FROM nodes n LEFT JOIN spares s USING (node) "
                "UNION SELECT s.node, NULL, NULL, s.state FROM spares s WHERE s.node NOT IN (SELECT node FROM nodes) "
                "ORDER BY 1"
            )
            return [NodeRecord(r["node"], r["first_seen"] or 0.0, r["last_seen"] or 0.0, r["state"]) for r in rows]

        return list(self._cached("nodes", read))

    def set_spares(self, nodes: Sequence[str], wall: float) -> None:
        with self._changing() as db:
            others = f" WHERE node NOT IN ({', '.join('?' * len(nodes))})" if nodes else ""
            self._run(db, "DELETE FROM spares" + others, list(nodes))
            if nodes:
                db.executemany(
                    self._sql("INSERT INTO spares VALUES (?, 'available', ?) ON CONFLICT (node) DO NOTHING"),
                    [(n, wall) for n in nodes],
                )

    def actions(self, alarm_id: str | None = None) -> list[ActionRecord]:
        sql, args = ACTION_SELECT, []
        if alarm_id is not None:
            sql, args = sql + " WHERE alarm_id = ?", [alarm_id]
        return [action_record(r) for r in self._read(sql + " ORDER BY seq", args)]

    def record_action(
        self, action: ActionRecord, spare_state: str | None = None, *, spare_was: tuple[str, ...] = ()
    ) -> None:
        with self._changing() as db:
            if spare_was:
                row = self._one(db, "SELECT state FROM spares WHERE node = ?", (action.spare,))
                check_spare(action.spare, None if row is None else row["state"], spare_was)
            self._action(db, action)
            if spare_state is not None and action.spare is not None:
                self._run(
                    db,
                    "UPDATE spares SET state = ?, since_wall = ? WHERE node = ?",
                    (spare_state, action.wall, action.spare),
                )

    def meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0]["value"]) if rows else None

    def claim(self, key: str, owner: str, wall: float, ttl: float) -> str | None:
        with self._changing(cached=False) as db:
            row = self._one(db, "SELECT value FROM meta WHERE key = ?", (key,))
            holder = lease_holder(None if row is None else str(row["value"]), owner, wall)
            if holder is None:
                self._run(db, META, (key, f"{owner} {wall + ttl!r}"))
            return holder

    def _existing(self, db: Cursor, alarm_id: str) -> StoredAlarm:
        row = self._one(db, "SELECT * FROM alarms WHERE id = ?", (alarm_id,))
        found = None if row is None else self._decode(row)
        if found is None:
            raise NotFound(f"no alarm with id {alarm_id!r}" + ("" if row is None else " that can be read"))
        return found

    def _found(self, alarm_id: str) -> StoredAlarm:
        found = self.alarm(alarm_id)
        assert found is not None
        return found

    def _action(self, db: Cursor, a: ActionRecord) -> None:
        self._run(db, ACTION_INSERT, action_columns(a))


def alarm_columns(s: StoredAlarm) -> tuple[object, ...]:
    """An alarm's values in :data:`ALARM_COLUMNS` order."""
    a = s.alarm
    evidence = orjson.dumps([e.as_json() for e in a.evidence]).decode()
    return (
        a.id,
        a.node,
        a.ts,
        a.component,
        a.diagnosis,
        a.severity,
        a.score,
        a.action,
        evidence,
        a.updated_ts,
        a.resolved_ts,
        s.resolved_by,
        s.opened_wall,
        s.resolved_wall,
        orjson.dumps([asdict(c) for c in a.changes]).decode(),
    )


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
        changes=tuple(AlarmChange(**c) for c in orjson.loads(r["changes"] or "[]")),
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
