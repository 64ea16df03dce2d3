"""The PostgreSQL store: the SQLite store's tables and semantics on a server that a team shares.

Every write is one transaction that first takes a transaction-scoped advisory lock, so writes are
serialised across threads and processes exactly as SQLite's ``BEGIN IMMEDIATE`` serialises them:
a check and the change it guards (acknowledging an open alarm, releasing an in-use spare) see no
other writer in between, and actions are numbered in commit order. Reads take no lock. Alarms are
keyed by id and unique per (node, opened ts), and every engine write is an upsert whose resolution
columns keep what is stored, so re-applying a step after a restart changes nothing and a stored
resolution is final. Text keys sort bytewise (``COLLATE "C"``), as in SQLite.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row

from peerwatch.alarms.errors import ConfigError, StoreError
from peerwatch.alarms.sql_store import META, SqlStore
from peerwatch.redact import redact_url

SCHEMA_VERSION = 1
TABLES = ("alarms", "nodes", "spares", "actions", "meta")
# Any constant: the key of the advisory lock every write takes ("peerwatc" as a bigint).
WRITE_LOCK = int.from_bytes(b"peerwatc", "big")
SCHEMA = """
CREATE TABLE IF NOT EXISTS alarms (
  id TEXT COLLATE "C" PRIMARY KEY, node TEXT COLLATE "C" NOT NULL, ts DOUBLE PRECISION NOT NULL,
  component TEXT NOT NULL, diagnosis TEXT NOT NULL, severity TEXT NOT NULL, score DOUBLE PRECISION NOT NULL,
  action TEXT NOT NULL, evidence TEXT NOT NULL, updated_ts DOUBLE PRECISION NOT NULL,
  resolved_ts DOUBLE PRECISION, resolved_by TEXT, opened_wall DOUBLE PRECISION NOT NULL,
  resolved_wall DOUBLE PRECISION, ack_by TEXT, ack_wall DOUBLE PRECISION, ack_note TEXT NOT NULL DEFAULT '',
  sent_labels TEXT, changes TEXT NOT NULL DEFAULT '[]', UNIQUE (node, ts));
CREATE INDEX IF NOT EXISTS alarms_open ON alarms (resolved_ts);
CREATE TABLE IF NOT EXISTS nodes (
  node TEXT COLLATE "C" PRIMARY KEY, first_seen DOUBLE PRECISION NOT NULL, last_seen DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS spares (
  node TEXT COLLATE "C" PRIMARY KEY, state TEXT NOT NULL, since_wall DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS actions (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, wall DOUBLE PRECISION NOT NULL, kind TEXT NOT NULL,
  alarm_id TEXT COLLATE "C", node TEXT COLLATE "C" NOT NULL, "by" TEXT NOT NULL, note TEXT NOT NULL DEFAULT '',
  spare TEXT, argv TEXT, mode TEXT, exit_code INTEGER, output TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS actions_alarm ON actions (alarm_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);
"""
IDLE_KEPT = 8  # idle connections kept for reuse; the API's worker threads may briefly hold more
IDLE_CHECK = 10.0  # a connection idle longer than this is checked before use (the server may have restarted)

Connection = psycopg.Connection[DictRow]
Cursor = psycopg.Cursor[DictRow]


class StoreUnavailable(StoreError):
    """The PostgreSQL server cannot be reached or failed mid-request (its transaction rolled back, unless
    the connection broke during the commit itself)."""

    status = 503


class PostgresStore(SqlStore):
    """:class:`~peerwatch.alarms.store.Store` in a PostgreSQL database (tables in its default schema).

    ``url`` is a libpq URL (``postgresql://user@host:5432/db``); ``password``, when given, is used
    instead of one in the URL (libpq's ``PGPASSWORD`` and ``~/.pgpass`` work too). Messages name
    the URL with its password masked. One connection per concurrent caller, reused.
    """

    placeholder = "%s"
    greatest = "greatest"

    def __init__(
        self, url: str, *, password: str | None = None, connect_timeout: int = 10, create: bool = True
    ) -> None:
        self.url = url
        self.where = redact_url(url)
        options: dict[str, Any] = {"application_name": "peerwatch"}
        if "connect_timeout" not in _conninfo(url):
            options["connect_timeout"] = connect_timeout
        if password is not None:
            options["password"] = password
        self._options = options
        self._idle: list[tuple[float, Connection]] = []
        self._lock = threading.Lock()
        self._closed = False
        self.found = ""  # what opening found (``create=False``: ``serve --check`` changes nothing)
        try:
            with self._write() if create else self._cursor() as db:
                self._create(db, create)
        except StoreUnavailable as exc:
            raise ConfigError(f"store.postgres: {exc.message}") from None
        except psycopg.Error as exc:  # e.g. no right to create the tables
            raise ConfigError(f"store.postgres: {self.where}: cannot set up the tables: {_reason(exc)}") from None

    def _create(self, db: Cursor, create: bool = True) -> None:
        # Only when one is missing: CREATE ... IF NOT EXISTS still needs the right to create, which a
        # user given only reads and writes on tables made for it lacks.
        missing = db.execute("SELECT 1 FROM unnest(%s::text[]) t WHERE to_regclass(t) IS NULL", (list(TABLES),))
        if missing.fetchone() is not None:
            if not create:
                self.found = f"{self.where}: no peerwatch tables yet; serve will create them"
                return
            db.execute(SCHEMA)
        # Tables made before alarms kept their escalations.
        has_changes = db.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_name = 'alarms' AND column_name = 'changes'"
        ).fetchone()
        if has_changes is None and create:
            db.execute("ALTER TABLE alarms ADD COLUMN changes TEXT NOT NULL DEFAULT '[]'")
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None and row["value"] != str(SCHEMA_VERSION):
            raise ConfigError(
                f"store.postgres: {self.where}: schema version {row['value']}, this peerwatch knows {SCHEMA_VERSION}"
            )
        if create:
            db.execute(self._sql(META), ("schema_version", str(SCHEMA_VERSION)))
        self.found = f"{self.where}: peerwatch tables present"

    # -- connections -----------------------------------------------------------------------------

    def _connect(self) -> Connection:
        try:
            return psycopg.connect(self.url, autocommit=True, row_factory=dict_row, **self._options)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot connect to {self.where}: {_reason(exc)}") from None

    def _take(self) -> Connection:
        while True:
            with self._lock:
                if not self._idle:
                    break
                since, db = self._idle.pop()
            if time.monotonic() - since < IDLE_CHECK:
                return db
            try:
                db.execute("SELECT 1")
                return db
            except psycopg.Error:
                db.close()  # dead (a server restart): the other idle ones are likely dead too
                self._drop_idle()
                break
        return self._connect()

    def _give(self, db: Connection) -> None:
        reusable = not db.closed and db.info.transaction_status == TransactionStatus.IDLE
        with self._lock:
            if reusable and not self._closed and len(self._idle) < IDLE_KEPT:
                self._idle.append((time.monotonic(), db))
                return
        db.close()

    @contextmanager
    def _cursor(self) -> Iterator[Cursor]:
        db = self._take()
        try:
            with db.cursor() as cur:
                yield cur
        except psycopg.OperationalError as exc:
            db.close()  # broken, or in a state we cannot trust: never reused
            self._drop_idle()  # a server restart killed the idle ones too: fail one call, not one per connection
            raise StoreUnavailable(f"store {self.where}: {_reason(exc)}") from exc
        except BaseException:
            self._give(db)
            raise
        self._give(db)

    @contextmanager
    def _write(self) -> Iterator[Cursor]:
        with self._cursor() as cur, cur.connection.transaction():
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            yield cur

    def _fetch(self, sql: str, args: Sequence[object]) -> list[DictRow]:
        with self._cursor() as cur:
            return cur.execute(sql, args).fetchall()

    def close(self) -> None:
        """Close the idle connections; those in use close when their call ends. A later call reconnects."""
        with self._lock:
            self._closed = True
        self._drop_idle()

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, db in idle:
            db.close()


def _conninfo(url: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ConfigError(f"store.postgres: {redact_url(url)}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    # libpq's messages run over several lines ("connection to server ... failed: ...\n\tIs the server running ...").
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
