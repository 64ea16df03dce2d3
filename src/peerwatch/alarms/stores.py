"""Which store the configuration asks for: PostgreSQL when ``store.postgres`` is set, else SQLite."""

from __future__ import annotations

from typing import TYPE_CHECKING

from peerwatch.alarms.config import StoreConfig
from peerwatch.alarms.sqlite_store import SQLiteStore, check_sqlite

if TYPE_CHECKING:
    from peerwatch.alarms.store import Store


def open_store(config: StoreConfig) -> Store:
    """Open (and create or check the tables of) the configured store; a ConfigError names what is wrong."""
    if config.postgres is not None:
        from peerwatch.alarms.postgres_store import PostgresStore  # psycopg is loaded only when used

        return PostgresStore(config.postgres, password=config.postgres_password())
    return SQLiteStore(config.sqlite)


def check_store(config: StoreConfig) -> str:
    """Check the configured store as opening it would, creating and changing nothing (``serve --check``);
    what was found, or a ConfigError / StoreError naming the store and the cause."""
    if config.postgres is not None:
        from peerwatch.alarms.postgres_store import PostgresStore

        store = PostgresStore(config.postgres, password=config.postgres_password(), create=False)
        store.close()
        return store.found
    return check_sqlite(config.sqlite)
