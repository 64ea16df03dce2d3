"""The SQLite store: one file, WAL journal, one connection per thread, one transaction per step.

WAL with ``synchronous=NORMAL`` survives a killed process without losing a committed step (only a
power cut may lose the last ones). Alarms are keyed by id and unique per (node, opened ts), and
every write is an upsert, so re-applying a step after a restart changes nothing.

A store that cannot be used (not a database, corrupt or truncated, read-only, disk full, a newer
schema) raises :class:`~peerwatch.alarms.errors.StoreError` with one line naming the file and the
cause, when it is opened (which runs SQLite's ``quick_check``) and on any later read or write.
:func:`check_sqlite` does the same checks without changing anything (``serve --check``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from peerwatch.alarms.errors import StoreError
from peerwatch.alarms.sql_store import SqlStore

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

# What SQLite's messages mean for whoever runs peerwatch (matched in order, on the lowercased message).
_CAUSES = (
    ("file is not a database", "not a SQLite database (corrupt, or another kind of file)"),
    ("malformed", "corrupt or truncated"),
    ("readonly", "read-only: peerwatch writes its store (check the file's and its folder's permissions)"),
    ("unable to open", "cannot be opened (its folder is missing or not writable)"),
    ("disk is full", "the disk is full"),
    ("disk i/o error", "disk I/O error (disk full, a file size limit, or a failing disk)"),
    ("locked", "locked by another process for too long"),
)


def describe(path: Path, exc: BaseException) -> str:
    """One line: the store's path, what is wrong in plain words, and SQLite's (or the OS's) own message."""
    text = " ".join((exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)).split())
    cause = next((c for key, c in _CAUSES if key in text.lower()), None)
    return f"store.sqlite: {path}: {cause} ({text})" if cause else f"store.sqlite: {path}: {text}"


def _check_version(path: Path, version: int) -> None:
    if version not in (0, SCHEMA_VERSION):
        raise StoreError(
            f"store.sqlite: {path}: schema version {version}, this peerwatch knows {SCHEMA_VERSION} "
            "(made by another peerwatch release: use that one, or another store)"
        )


def _check_pages(path: Path, db: sqlite3.Connection) -> None:
    problems = [r[0] for r in db.execute("PRAGMA quick_check(3)").fetchall()]
    if problems != ["ok"]:
        # SQLite's report spans lines ("*** in database main ***\nPage 25: ..."): one line, its findings only
        found = " ".join(" ".join(problems).replace("*** in database main ***", "").split())
        raise StoreError(f"store.sqlite: {path}: corrupt or truncated ({found})")


def check_sqlite(path: Path) -> str:
    """Check the store at ``path`` as opening it would, without creating or changing anything (the file
    is read as immutable unless a running serve has a write-ahead log beside it); what was found, or
    :class:`StoreError`."""
    if not path.exists():
        folder = next((p for p in path.parents if p.exists()), None)
        if folder is None or not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(f"store.sqlite: {path}: does not exist and {folder} is not writable to create it")
        return f"{path} does not exist yet; serve will create it"
    if not os.access(path, os.R_OK | os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        raise StoreError(describe(path, sqlite3.OperationalError("attempt to write a readonly database")))
    live = path.with_name(path.name + "-wal").exists()
    uri = f"file:{quote(str(path.resolve()))}?mode=ro" + ("" if live else "&immutable=1")
    try:
        db = sqlite3.connect(uri, uri=True)
        try:
            _check_version(path, db.execute("PRAGMA user_version").fetchone()[0])
            _check_pages(path, db)
            count = db.execute("SELECT count(*) FROM alarms").fetchone()[0] if _has_alarms(db) else 0
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise StoreError(describe(path, exc)) from None
    return f"{path}: {count} alarms"


def _rollback(db: sqlite3.Connection) -> None:
    # A failed write may have ended the transaction itself (SQLITE_FULL can); a failed rollback adds nothing.
    with contextlib.suppress(sqlite3.Error):
        if db.in_transaction:
            db.execute("ROLLBACK")


def _has_alarms(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alarms'").fetchone() is not None


class SQLiteStore(SqlStore):
    """:class:`~peerwatch.alarms.store.Store` in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = f"store.sqlite: {path}"
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._create()
        except OSError as exc:
            raise StoreError(describe(path, exc)) from None

    def _create(self) -> None:
        with self._write() as db:
            _check_version(self.path, db.execute("PRAGMA user_version").fetchone()[0])
            _check_pages(self.path, db)
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
        try:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(describe(self.path, exc)) from None
        try:
            yield db
        except BaseException as exc:
            _rollback(db)
            if isinstance(exc, sqlite3.Error):
                raise StoreError(describe(self.path, exc)) from None
            raise
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(db)
            raise StoreError(describe(self.path, exc)) from None

    def _fetch(self, sql: str, args: Sequence[object]) -> list[sqlite3.Row]:
        try:
            return self._db().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(describe(self.path, exc)) from None

    def close(self) -> None:
        with self._lock:
            for db in self._all:
                db.close()
            self._all.clear()
        self._local = threading.local()
