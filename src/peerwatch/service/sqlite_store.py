"""The SQLite store: one file, WAL journal, one connection per thread, one transaction per step.

WAL with ``synchronous=NORMAL`` survives a killed process without losing a committed step (only a
power cut may lose the last ones). Alarms are keyed by id and unique per (node, opened ts), and
every write is an upsert, so re-applying a step after a restart changes nothing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from peerwatch.service.sql_store import SqlStore

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS alarms (
  id TEXT PRIMARY KEY, node TEXT NOT NULL, ts REAL NOT NULL, component TEXT NOT NULL,
  diagnosis TEXT NOT NULL, severity TEXT NOT NULL, score REAL NOT NULL, action TEXT NOT NULL,
  evidence TEXT NOT NULL, updated_ts REAL NOT NULL, resolved_ts REAL, resolved_by TEXT,
  opened_wall REAL NOT NULL, resolved_wall REAL,
  ack_by TEXT, ack_wall REAL, ack_note TEXT NOT NULL DEFAULT '', sent_labels TEXT,
  changes TEXT NOT NULL DEFAULT '[]', UNIQUE (node, ts));
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


class SQLiteStore(SqlStore):
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
            if "changes" not in {r[1] for r in db.execute("PRAGMA table_info(alarms)")}:  # before escalations
                db.execute("ALTER TABLE alarms ADD COLUMN changes TEXT NOT NULL DEFAULT '[]'")
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

    def _fetch(self, sql: str, args: Sequence[object]) -> list[sqlite3.Row]:
        return self._db().execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            for db in self._all:
                db.close()
            self._all.clear()
        self._local = threading.local()
