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

from peerwatch.service.errors import Conflict, NotFound
from peerwatch.service.store import (
    ACTION_COLUMNS,
    ActionRecord,
    NodeRecord,
    StepChanges,
    StoredAlarm,
    action_columns,
    action_record,
    alarm_columns,
    alarms_query,
    check_spare,
    lease_holder,
    stored_alarm,
)

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
            db.executemany(_UPSERT, [alarm_columns(s) for s in changes.alarms])
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
        sql, args = alarms_query(
            "?",
            open_only=open_only,
            node=node,
            touching=touching,
            resolved_wall_after=resolved_wall_after,
            limit=limit,
        )
        return [stored_alarm(r) for r in self._db().execute(sql, args).fetchall()]

    def alarm(self, alarm_id: str) -> StoredAlarm | None:
        row = self._db().execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,)).fetchone()
        return None if row is None else stored_alarm(row)

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
        sql, args = f"SELECT {', '.join(ACTION_COLUMNS)} FROM actions", []
        if alarm_id is not None:
            sql, args = sql + " WHERE alarm_id = ?", [alarm_id]
        return [action_record(r) for r in self._db().execute(sql + " ORDER BY seq", args).fetchall()]

    def record_action(
        self, action: ActionRecord, spare_state: str | None = None, *, spare_was: tuple[str, ...] = ()
    ) -> None:
        with self._write() as db:
            if spare_was:
                row = db.execute("SELECT state FROM spares WHERE node = ?", (action.spare,)).fetchone()
                check_spare(action.spare, None if row is None else row[0], spare_was)
            _action(db, action)
            if spare_state is not None and action.spare is not None:
                db.execute(
                    "UPDATE spares SET state = ?, since_wall = ? WHERE node = ?",
                    (spare_state, action.wall, action.spare),
                )

    def meta(self, key: str) -> str | None:
        row = self._db().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def claim(self, key: str, owner: str, wall: float, ttl: float) -> str | None:
        with self._write() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            holder = lease_holder(None if row is None else str(row[0]), owner, wall)
            if holder is None:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, f"{owner} {wall + ttl!r}"))
            return holder

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
        return stored_alarm(row)

    def _found(self, alarm_id: str) -> StoredAlarm:
        found = self.alarm(alarm_id)
        assert found is not None
        return found


def _action(db: sqlite3.Connection, a: ActionRecord) -> None:
    db.execute(
        f"INSERT INTO actions ({', '.join(ACTION_COLUMNS)}) VALUES ({', '.join('?' * len(ACTION_COLUMNS))})",
        action_columns(a),
    )
