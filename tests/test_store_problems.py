"""A store that cannot be used ends ``serve`` and ``serve --check`` with one line on stderr naming the
store and the cause, exit 2, no traceback; ``serve --check`` creates and changes nothing (issue 18.5)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peerwatch.alarms.errors import ConfigError, StoreError
from peerwatch.alarms.sqlite_store import SQLiteStore, check_sqlite
from peerwatch.alarms.store import StepChanges, StoredAlarm
from peerwatch.model import Alarm
from peerwatch.service import Service, load_config
from test_scrape import TextServer

UNREACHABLE = "source:\n  tsdb: {url: 'http://127.0.0.1:1', timeout: 1s}\n"
T0 = 1_764_460_000.0


def run_serve(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "peerwatch", "serve", "--config", str(config), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)


def good_store(path: Path, alarms: int = 2000) -> None:
    """A real store with enough alarms to span many pages, checkpointed into the main file."""
    store = SQLiteStore(path)
    rows = [
        StoredAlarm(Alarm(f"a{i}", T0 + i, f"gpu{i:04d}", "gpu/0", "nvlink", "warning", 9.0, "watch", (), T0 + i), 1.0)
        for i in range(alarms)
    ]
    store.commit(StepChanges(rows, [f"gpu{i:04d}" for i in range(alarms)], T0, T0))
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def corrupt(path: Path) -> None:
    path.write_bytes(os.urandom(16384))


def truncated(path: Path) -> None:
    good_store(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def newer_schema(path: Path) -> None:
    good_store(path, 3)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version = 7")


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """The store file made unwritable: chmod for a user, the immutable attribute for root (whom
    permissions do not stop)."""
    good_store(path, 3)
    if os.geteuid() != 0:
        path.chmod(0o444)
        yield
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], check=False).returncode:
        pytest.skip("running as root, and chattr +i is not available to make a file read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "corrupt": (corrupt, "not a SQLite database"),
    "truncated": (truncated, "corrupt or truncated"),
    "newer schema": (newer_schema, "schema version 7, this peerwatch knows 1"),
}


def one_line_error(result: subprocess.CompletedProcess[str], store: Path, cause: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: store.sqlite: {store}: ") and cause in lines[0], lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("check", [False, True], ids=["serve", "check"])
def test_a_broken_store_is_one_line_and_exit_2(tmp_path: Path, case: str, check: bool) -> None:
    make, cause = CASES[case]
    store = tmp_path / "s.sqlite"
    make(store)
    before = store.read_bytes()
    config = tmp_path / "pw.yaml"
    config.write_text(UNREACHABLE + f"store: {{sqlite: {store}}}\n")
    one_line_error(run_serve(config, *(["--check"] if check else [])), store, cause)
    if check:
        assert store.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["pw.yaml", "s.sqlite"]


def test_a_read_only_store_is_one_line_and_exit_2(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    config = tmp_path / "pw.yaml"
    config.write_text(UNREACHABLE + f"store: {{sqlite: {store}}}\n")
    with read_only(store):
        for args in ((), ("--check",)):
            one_line_error(run_serve(config, *args), store, "read-only")


def test_a_full_disk_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A real full file system: a 16 KiB tmpfs in a user and mount namespace of the test's own."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], check=False).returncode:
        pytest.skip("no unprivileged user and mount namespaces here to mount a small tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    store = mount / "s.sqlite"
    config = tmp_path / "pw.yaml"
    config.write_text(UNREACHABLE + f"store: {{sqlite: {store}}}\n")
    script = (
        f"mount -t tmpfs -o size=16k tmpfs {mount} && head -c 12288 /dev/zero > {mount}/fill && "
        f"exec {sys.executable} -m peerwatch serve --config {config}"
    )
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    one_line_error(result, store, "the disk is full")


def test_serve_check_creates_no_store_and_fixes_no_clock(tmp_path: Path) -> None:
    store = tmp_path / "state" / "s.sqlite"
    config = tmp_path / "pw.yaml"
    config.write_text(UNREACHABLE + f"store: {{sqlite: {store}}}\nclock: {{start: {T0}, speed: 10}}\n")
    result = run_serve(config, "--check")
    assert result.returncode == 1 and "source http://127.0.0.1:1" in result.stderr  # the source is down
    assert not (tmp_path / "state").exists()  # neither the store nor its folder
    good_store(store, 3)  # a store that exists already gains no clock origin either
    before = store.read_bytes()
    assert run_serve(config, "--check").returncode == 1
    assert store.read_bytes() == before and sorted(p.name for p in store.parent.iterdir()) == ["s.sqlite"]
    started = time.time()
    service = Service(load_config(config))
    # The origin is when serve started, not when the check ran: data time begins at clock.start.
    assert service.clock.origin >= started and service.clock.now() < T0 + 10 * (time.time() - started) + 1
    service.store.close()


def test_serve_check_ok_names_the_store(tmp_path: Path) -> None:
    server = TextServer(lambda: (200, b"node_load1 0.5\n"))
    try:
        store = tmp_path / "s.sqlite"
        config = tmp_path / "pw.yaml"
        config.write_text(f"source:\n  scrape: {{targets: ['{server.url}']}}\nstore: {{sqlite: {store}}}\n")
        result = run_serve(config, "--check")
        assert result.returncode == 0, result.stderr
        assert f"store {store} does not exist yet; serve will create it" in result.stdout
        assert not store.exists()
        good_store(store, 5)
        result = run_serve(config, "--check")
        assert result.returncode == 0 and f"store {store}: 5 alarms" in result.stdout
    finally:
        server.close()


def test_a_store_broken_while_open_names_itself_on_every_call(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    good_store(path)
    store = SQLiteStore(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    caught: list[BaseException] = []

    def read() -> None:  # a thread of the API: a connection of its own, no pages cached
        try:
            store.alarms(limit=100_000)
        except BaseException as exc:
            caught.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert len(caught) == 1 and isinstance(caught[0], StoreError)
    assert caught[0].message.startswith(f"store.sqlite: {path}: corrupt or truncated") and caught[0].status == 503
    store.close()
    with pytest.raises(StoreError, match="corrupt or truncated"):
        check_sqlite(path)


@pytest.mark.services
def test_serve_check_creates_no_postgres_tables(postgres_url: str) -> None:
    import psycopg

    from peerwatch.alarms.config import StoreConfig
    from peerwatch.alarms.stores import check_store, open_store

    config = StoreConfig(postgres=postgres_url)
    assert check_store(config).endswith("no peerwatch tables yet; serve will create them")
    with psycopg.connect(postgres_url) as db:
        assert db.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
    open_store(config).close()
    assert check_store(config).endswith("peerwatch tables present")
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    with pytest.raises(ConfigError, match="schema version 7, this peerwatch knows 1"):
        check_store(config)


def test_demo_with_a_broken_state_store_is_one_line_and_exit_2(tmp_path: Path) -> None:
    corrupt(tmp_path / "peerwatch.sqlite")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "peerwatch", "demo", "--state", str(tmp_path), "--port", str(port)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    one_line_error(result, tmp_path / "peerwatch.sqlite", "not a SQLite database")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("pristine") / "s.sqlite"
    good_store(path, 300)
    return path.read_bytes()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.one_of(st.none(), st.floats(0.0, 1.0)),
    flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 255)), max_size=8),
)
def test_any_damage_is_a_store_error_or_a_working_store(
    tmp_path_factory: pytest.TempPathFactory, pristine: bytes, cut: float | None, flips: list[tuple[float, int]]
) -> None:
    """Fuzz (issue 18.7, for 18.5): a store truncated anywhere and with bytes overwritten anywhere either
    opens and reads, or gives StoreError naming the file; never another exception."""
    data = bytearray(pristine if cut is None else pristine[: int(len(pristine) * cut)])
    for where, value in flips:
        if data:
            data[min(int(where * len(data)), len(data) - 1)] = value
    path = tmp_path_factory.mktemp("damaged") / "s.sqlite"
    path.write_bytes(bytes(data))

    def open_and_read() -> None:
        store = SQLiteStore(path)
        try:
            store.alarms(limit=100_000)
            store.nodes()
        finally:
            store.close()

    for attempt in (lambda: check_sqlite(path), open_and_read):
        try:
            attempt()
        except StoreError as exc:
            assert exc.message.startswith(f"store.sqlite: {path}: ") and "\n" not in exc.message


def test_a_damaged_row_is_left_out_and_the_rest_is_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s.sqlite"
    good_store(path, 5)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE alarms SET evidence = '[{\"metric\": ' WHERE id = 'a2'")  # as a flipped byte leaves it
    store = SQLiteStore(path)
    assert sorted(s.id for s in store.alarms()) == ["a0", "a1", "a3", "a4"]
    assert store.alarm("a2") is None and store.alarm("a3") is not None
    assert f"store.sqlite: {path}: alarm row 'a2' cannot be read, left out" in caplog.text
    store.close()
