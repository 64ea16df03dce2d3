"""The SQLite store: one file, WAL journal, one connection per thread, one transaction per step.

WAL with ``synchronous=NORMAL`` survives a killed process without losing a committed step (only a
power cut may lose the last ones). Alarms are keyed by id and unique per (node, opened ts), and
every write is an upsert, so re-applying a step after a restart changes nothing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import orjson

from peerwatch.model import Alarm, Evidence
from peerwatch.service.errors import Conflict, NotFound
from peerwatch.service.store import ActionRecord, NodeRecord, StepChanges, StoredAlarm

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS alarms (
  id TEXT PRIMARY KEY, node TEXT NOT NULL, ts REAL NOT NULL, component TEXT NOT NULL,
  diagnosis TEXT NOT NULL, severity TEXT NOT NULL, score REAL NOT NULL, action TEXT NOT NULL,
  evidence TEXT NOT NULL, updated_ts REAL NOT NULL, resolved_ts REAL, resolved_by TEXT,
  opened_wall REAL NOT NULL, resolved_wall REAL,
  ack_by TEXT, ack_wall REAL, ack_note TEXT NOT NULL DEFAULT '', sent_labels TEXT,
  UNIQUE (node, ts));
CREATE INDEX IF NOT EXISTS alarms_open ON alarms (resolved_ts);
CREATE TABLE IF NOT EXISTS nodes (node TEXT PRIMARY KEY, first_seen REAL NOT NULL, last_seen REAL NOT NULL);
CREATE TABLE IF NOT EXISTS spares (node TEXT PRIMARY KEY, state TEXT NOT NULL, since_wall REAL NOT NULL);
CREATE TABLE IF NOT EXISTS actions (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, wall REAL NOT NULL, kind TEXT NOT NULL, alarm_id TEXT,
  node TEXT NOT NULL, by TEXT NOT NULL, note TEXT NOT NULL DEFAULT '',
  spare TEXT, argv TEXT, mode TEXT, exit_code INTEGER, output TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# Columns added to a store created before remediation (schema 1 without them): added in place.
_ACTION_COLUMNS = {
    "spare": "TEXT",
    "argv": "TEXT",
    "mode": "TEXT",
    "exit_code": "INTEGER",
    "output": "TEXT NOT NULL DEFAULT ''",
}
_UPSERT = """
INSERT INTO alarms (id, node, ts, component, diagnosis, severity, score, action, evidence, updated_ts,
                    resolved_ts, resolved_by, opened_wall, resolved_wall)
VALUES (:id, :node, :ts, :component, :diagnosis, :severity, :score, :action, :evidence, :updated_ts,
        :resolved_ts, :resolved_by, :opened_wall, :resolved_wall)
ON CONFLICT (id) DO UPDATE SET
  component = excluded.component, diagnosis = excluded.diagnosis, severity = excluded.severity,
  score = excluded.score, action = excluded.action, evidence = excluded.evidence,
  updated_ts = max(alarms.updated_ts, excluded.updated_ts),
  resolved_by = coalesce(alarms.resolved_by, excluded.resolved_by),
  resolved_wall = coalesce(alarms.resolved_wall, excluded.resolved_wall),
  resolved_ts = coalesce(alarms.resolved_ts, excluded.resolved_ts)
"""


class SQLiteStore:
    """:class:`~peerwatch.service.store.Store` in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        with self._write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise RuntimeError(f"{path}: schema version {version}, this peerwatch knows {SCHEMA_VERSION}")
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            have = {r[1] for r in db.execute("PRAGMA table_info(actions)")}
            for name, kind in _ACTION_COLUMNS.items():
                if name not in have:
                    db.execute(f"ALTER TABLE actions ADD COLUMN {name} {kind}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            self._local.db = db
            with self._lock:
                self._all.append(db)
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def commit(self, changes: StepChanges) -> None:
        with self._write() as db:
            db.executemany(_UPSERT, [_row(s) for s in changes.alarms])
            db.executemany(
                "INSERT INTO nodes VALUES (?, ?, ?) ON CONFLICT (node) DO UPDATE SET "
                "last_seen = max(nodes.last_seen, excluded.last_seen)",
                [(n, changes.seen_ts, changes.seen_ts) for n in changes.nodes],
            )
            meta = dict(changes.meta)
            if changes.evaluated_until is not None:
                meta["evaluated_until"] = repr(changes.evaluated_until)
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(meta.items()))

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
        rows = self._db().execute(sql + " ORDER BY ts DESC, node LIMIT ?", [*args, limit]).fetchall()
        return [_stored(r) for r in rows]

    def alarm(self, alarm_id: str) -> StoredAlarm | None:
        row = self._db().execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,)).fetchone()
        return None if row is None else _stored(row)

    def acknowledge(self, alarm_id: str, by: str, note: str, wall: float) -> StoredAlarm:
        with self._write() as db:
            current = self._existing(db, alarm_id)
            if not current.open:
                raise Conflict(f"alarm {alarm_id} is resolved; there is nothing to acknowledge")
            db.execute(
                "UPDATE alarms SET ack_by = ?, ack_wall = ?, ack_note = ? WHERE id = ?", (by, wall, note, alarm_id)
            )
            _action(db, ActionRecord(wall, "acknowledge", alarm_id, current.alarm.node, by, note))
        return self._found(alarm_id)

    def resolve(self, alarm_id: str, by: str, note: str, at: float, wall: float) -> StoredAlarm:
        with self._write() as db:
            current = self._existing(db, alarm_id)
            if not current.open:
                raise Conflict(f"alarm {alarm_id} is already resolved (by {current.resolved_by})")
            db.execute(
                "UPDATE alarms SET resolved_ts = ?, resolved_by = ?, resolved_wall = ? WHERE id = ?",
                (max(at, current.alarm.ts), f"user:{by}", wall, alarm_id),
            )
            _action(db, ActionRecord(wall, "resolve", alarm_id, current.alarm.node, by, note))
        return self._found(alarm_id)

    def mark_sent(self, alarm_id: str, labels: Mapping[str, str]) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE alarms SET sent_labels = ? WHERE id = ?", (orjson.dumps(dict(labels)).decode(), alarm_id)
            )

    def nodes(self) -> list[NodeRecord]:
        rows = (
            self._db()
            .execute(
                "SELECT n.node, n.first_seen, n.last_seen, s.state FROM nodes n LEFT JOIN spares s USING (node) "
                "UNION SELECT s.node, NULL, NULL, s.state FROM spares s WHERE s.node NOT IN (SELECT node FROM nodes) "
                "ORDER BY 1"
            )
            .fetchall()
        )
        return [
            NodeRecord(r[0], r[1] if r[1] is not None else 0.0, r[2] if r[2] is not None else 0.0, r[3]) for r in rows
        ]

    def set_spares(self, nodes: Sequence[str], wall: float) -> None:
        with self._write() as db:
            db.execute(f"DELETE FROM spares WHERE node NOT IN ({','.join('?' * len(nodes))})", list(nodes))
            db.executemany("INSERT OR IGNORE INTO spares VALUES (?, 'available', ?)", [(n, wall) for n in nodes])

    def actions(self, alarm_id: str | None = None) -> list[ActionRecord]:
        sql, args = "SELECT wall, kind, alarm_id, node, by, note, spare, argv, mode, exit_code, output FROM actions", []
        if alarm_id is not None:
            sql, args = sql + " WHERE alarm_id = ?", [alarm_id]
        rows = self._db().execute(sql + " ORDER BY seq", args).fetchall()
        return [
            ActionRecord(
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
            for r in rows
        ]

    def record_action(self, action: ActionRecord, spare_state: str | None = None) -> None:
        with self._write() as db:
            _action(db, action)
            if spare_state is not None and action.spare is not None:
                db.execute(
                    "UPDATE spares SET state = ?, since_wall = ? WHERE node = ?",
                    (spare_state, action.wall, action.spare),
                )

    def meta(self, key: str) -> str | None:
        row = self._db().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        with self._lock:
            for db in self._all:
                db.close()
            self._all.clear()
        self._local = threading.local()

    def _existing(self, db: sqlite3.Connection, alarm_id: str) -> StoredAlarm:
        row = db.execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,)).fetchone()
        if row is None:
            raise NotFound(f"no alarm with id {alarm_id!r}")
        return _stored(row)

    def _found(self, alarm_id: str) -> StoredAlarm:
        found = self.alarm(alarm_id)
        assert found is not None
        return found


def _action(db: sqlite3.Connection, a: ActionRecord) -> None:
    db.execute(
        "INSERT INTO actions (wall, kind, alarm_id, node, by, note, spare, argv, mode, exit_code, output) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            a.wall,
            a.kind,
            a.alarm_id,
            a.node,
            a.by,
            a.note,
            a.spare,
            orjson.dumps([list(x) for x in a.argv]).decode() if a.argv else None,
            a.mode,
            a.exit_code,
            a.output,
        ),
    )


def _row(s: StoredAlarm) -> dict[str, object]:
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


def _stored(r: sqlite3.Row) -> StoredAlarm:
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
