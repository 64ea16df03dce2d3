"""The stores (SQLite and PostgreSQL, one suite run over both) and alarm reconciliation: identity across
windows and restarts, final resolutions, the spare pool, concurrent writers, one serve per store."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from peerwatch.alarms.config import StoreConfig
from peerwatch.alarms.errors import ConfigError, Conflict, NotFound
from peerwatch.alarms.reconcile import Judged, reconcile
from peerwatch.alarms.spares import AVAILABLE, IN_USE
from peerwatch.alarms.store import ActionRecord, StepChanges, Store, StoredAlarm, node_risk
from peerwatch.alarms.stores import open_store
from peerwatch.cli import app
from peerwatch.model import Alarm, AlarmChange, Evidence
from peerwatch.service import Service
from peerwatch.service.config import config_from_dict
from peerwatch.service.live_sources import Fetch

OpenStore = Callable[[], Store]

EV = (Evidence("backendai_async_task_count", (("instance", "gpu003:6003"),), 869.0, 47.0, 35.1, "agent busy"),)


def alarm(node: str, ts: float, resolved: float | None = None, diagnosis: str = "nvlink", score: float = 10.0) -> Alarm:
    ident = hashlib.sha1(f"{node}|{ts}".encode()).hexdigest()[:12]
    return Alarm(ident, ts, node, "gpu/2", diagnosis, "critical", score, "swap", EV, ts + 60, resolved)


def stored(a: Alarm) -> StoredAlarm:
    return StoredAlarm(a, 1.0, "engine" if a.resolved_ts is not None else None)


def judged(until: float | None = None, start: float = 0.0, end: float = 1200.0) -> Judged:
    return Judged(start=start, end=end, evaluated_until=until, grace=120.0, quiet=1800.0, wall=5.0)


def test_a_new_alarm_is_inserted_and_an_identical_one_updated() -> None:
    (new,) = reconcile([], [alarm("gpu003", 300)], judged())
    assert new.alarm == alarm("gpu003", 300) and new.resolved_by is None and new.opened_wall == 5.0
    again = alarm("gpu003", 300, diagnosis="ecc_hbm", score=20)
    (row,) = reconcile([new], [again], judged(until=600))
    assert row.id == new.id and row.alarm.diagnosis == "ecc_hbm" and row.alarm.score == 20


def test_a_resolved_alarm_is_final() -> None:
    done = replace(stored(alarm("gpu003", 300, resolved=900)), resolved_by="user:ops")
    assert reconcile([done], [alarm("gpu003", 300)], judged(until=1000)) == []


def test_an_incident_seen_from_a_shifted_window_keeps_its_identity() -> None:
    old = stored(alarm("gpu003", 300))
    (row,) = reconcile([old], [alarm("gpu003", 780, diagnosis="unknown", score=30)], judged(until=1100))
    assert row.id == old.id and row.alarm.ts == 300 and row.alarm.diagnosis == "nvlink" and row.alarm.score == 30
    (ended,) = reconcile([old], [alarm("gpu003", 780, resolved=1150)], judged(until=1100))
    assert ended.id == old.id and ended.alarm.resolved_ts == 1150 and ended.resolved_by == "engine"


@pytest.mark.parametrize(
    ("opened", "until", "kept"),
    [
        (400.0, 1000.0, False),  # judged long ago and not raised then: an artefact of the window
        (950.0, 1000.0, True),  # within the grace for late samples
        (1050.0, 1000.0, True),  # new data
        (400.0, None, True),  # first evaluation ever: everything in the window is news
    ],
)
def test_openings_at_steps_already_judged_are_dropped(opened: float, until: float | None, kept: bool) -> None:
    rows = reconcile([], [alarm("gpu007", opened)], judged(until=until))
    assert bool(rows) == kept


def test_a_new_failure_after_a_precursor_is_a_second_alarm() -> None:
    precursor = stored(alarm("gpu003", 300))
    rows = reconcile([precursor], [alarm("gpu003", 300, resolved=900), alarm("gpu003", 900)], judged(until=880))
    by_ts = {r.alarm.ts: r for r in rows}
    assert by_ts[300].alarm.resolved_ts == 900 and by_ts[300].resolved_by == "engine"
    assert by_ts[900].open and by_ts[900].id != precursor.id


@pytest.mark.parametrize(
    ("start", "end", "resolved"),
    [
        (0.0, 2200.0, True),  # quiet for 30 min of data after its last finding (at 360)
        (0.0, 2100.0, False),
        (1500.0, 2200.0, False),  # restarted at 1500: not enough data since to call it quiet
    ],
)
def test_an_alarm_the_engine_no_longer_reports_resolves_after_a_quiet_spell(
    start: float, end: float, resolved: bool
) -> None:
    open_ = stored(alarm("gpu003", 300))
    rows = reconcile([open_], [], judged(until=end - 30, start=start, end=end))
    assert bool(rows) == resolved
    if resolved:
        assert rows[0].resolved_by == "absence" and rows[0].alarm.resolved_ts == end


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Opens the store under test, the same one at each call (as a restarted service would); closes them all."""
    if request.param == "sqlite":
        config = StoreConfig(sqlite=tmp_path / "s.sqlite")
    else:
        config = StoreConfig(postgres=request.getfixturevalue("postgres_url"))
    opened: list[Store] = []

    def open_() -> Store:
        opened.append(open_store(config))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()


def test_the_store_survives_a_reopen_and_upserts_are_idempotent(reopen: OpenStore) -> None:
    rows = [StoredAlarm(alarm("gpu003", 300), 1.0), StoredAlarm(alarm("gpu004", 330, resolved=600), 1.0, "engine", 2.0)]
    store = reopen()
    store.commit(StepChanges(rows, nodes=("gpu003", "gpu004"), seen_ts=600.0, evaluated_until=600.0))
    store.close()
    store = reopen()
    store.commit(StepChanges(rows, evaluated_until=630.0))  # the same step again, after a restart
    got = store.alarms()
    assert [s.alarm.node for s in got] == ["gpu004", "gpu003"]  # newest first
    assert got[1].alarm == rows[0].alarm and got[0].alarm.evidence == EV
    assert store.meta("evaluated_until") == "630.0"
    assert [s.id for s in store.alarms(open_only=True)] == [rows[0].id]
    assert [s.id for s in store.alarms(touching=700)] == [rows[0].id]
    assert {n.node for n in store.nodes()} == {"gpu003", "gpu004"}


def test_everything_survives_a_reopen_and_nothing_is_duplicated(reopen: OpenStore) -> None:
    a, b = StoredAlarm(alarm("gpu003", 300), 1.0), StoredAlarm(alarm("gpu004", 330), 1.0)
    store = reopen()
    store.set_spares(["gpu009", "gpu010"], 1.0)
    store.commit(StepChanges([a, b], ("gpu003", "gpu004"), 300.0, 300.0, {"clock": "1 2 3"}))
    store.acknowledge(a.id, "ops", "looking", 10.0)
    store.resolve(b.id, "ops", "fixed", 400.0, 11.0)
    swap = ActionRecord(12.0, "swap", a.id, "gpu003", "ops", "why", "gpu009", (("true",),), "execute", 0, "$ true")
    store.record_action(swap, IN_USE)
    store.mark_sent(a.id, {"node": "gpu003"})
    before = (store.alarms(), store.actions(), store.nodes(), store.meta("clock"))
    store.close()
    store = reopen()
    store.set_spares(["gpu009", "gpu010"], 20.0)  # a restart re-applies the configured pool: states stay
    store.commit(StepChanges([a, b], ("gpu003", "gpu004"), 330.0, 330.0))  # and the step in flight again
    after = store.alarms(), store.actions(), store.nodes(), store.meta("clock")
    assert after[0] == before[0] and after[1] == before[1] and after[3] == "1 2 3"
    assert after[1][-1] == swap and [x.kind for x in after[1]] == ["acknowledge", "resolve", "swap"]
    assert {n.node: (n.spare, n.last_seen) for n in after[2]} == {
        "gpu003": (None, 330.0),
        "gpu004": (None, 330.0),
        "gpu009": (IN_USE, 0.0),
        "gpu010": (AVAILABLE, 0.0),
    }
    got = store.alarm(a.id)
    assert got is not None and got.sent_labels == {"node": "gpu003"} and got.ack_note == "looking"


def test_people_and_the_engine_never_overwrite_each_other(reopen: OpenStore) -> None:
    store = reopen()
    a = StoredAlarm(alarm("gpu003", 300), 1.0)
    store.commit(StepChanges([a]))
    store.acknowledge(a.id, "ops", "looking", 10.0)
    store.commit(StepChanges([replace(a, alarm=replace(a.alarm, score=50.0))]))
    got = store.alarm(a.id)
    assert got is not None and got.status == "acknowledged" and got.ack_by == "ops" and got.alarm.score == 50.0
    store.resolve(a.id, "ops", "swapped", 900.0, 11.0)
    store.commit(StepChanges([a]))  # the engine still sees it open: the person's resolution stands
    got = store.alarm(a.id)
    assert got is not None and got.alarm.resolved_ts == 900.0 and got.resolved_by == "user:ops"
    assert [(x.kind, x.by) for x in store.actions(a.id)] == [("acknowledge", "ops"), ("resolve", "ops")]
    with pytest.raises(Conflict):
        store.resolve(a.id, "ops", "", 950.0, 12.0)
    with pytest.raises(Conflict):
        store.acknowledge(a.id, "ops", "", 12.0)
    with pytest.raises(NotFound):
        store.acknowledge("nope", "ops", "", 12.0)


def test_an_engine_resolution_is_final_too(reopen: OpenStore) -> None:
    store = reopen()
    a = StoredAlarm(alarm("gpu003", 300), 1.0)
    store.commit(StepChanges([a]))
    store.commit(StepChanges([StoredAlarm(alarm("gpu003", 300, resolved=600), 1.0, "absence", 7.0)]))
    store.commit(StepChanges([a]))  # a later, shorter window sees it open again: the resolution stands
    got = store.alarm(a.id)
    assert got is not None and (got.alarm.resolved_ts, got.resolved_by, got.resolved_wall) == (600, "absence", 7.0)


def test_spare_pool_and_risk(reopen: OpenStore) -> None:
    store = reopen()
    store.set_spares(["gpu009", "gpu010"], 1.0)
    store.commit(StepChanges([StoredAlarm(alarm("gpu003", 300, resolved=4000), 1.0, "engine", 2.0)], ("gpu003",), 300))
    store.set_spares(["gpu010"], 2.0)
    nodes = {n.node: n.spare for n in store.nodes()}
    assert nodes == {"gpu003": None, "gpu010": "available"}
    risk = node_risk(store.alarms(), nodes, at=5000.0)
    assert risk["gpu003"] > 10 * risk["gpu010"] and risk["gpu010"] == pytest.approx(1.0)
    store.set_spares([], 3.0)
    assert {n.node: n.spare for n in store.nodes()} == {"gpu003": None}


def test_a_spare_state_change_can_require_the_current_state(reopen: OpenStore) -> None:
    store = reopen()
    store.set_spares(["gpu010"], 1.0)
    release = ActionRecord(5.0, "release", None, "gpu010", "ops", "repaired", spare="gpu010")
    with pytest.raises(Conflict, match="gpu010 is available, not in_use"):
        store.record_action(release, AVAILABLE, spare_was=(IN_USE,))
    with pytest.raises(NotFound, match="'gpu011' is not in the spare pool"):
        store.record_action(replace(release, node="gpu011", spare="gpu011"), AVAILABLE, spare_was=(IN_USE,))
    assert store.actions() == []  # nothing written by a refused change
    store.record_action(ActionRecord(2.0, "swap", None, "gpu003", "ops", spare="gpu010", mode="execute"), IN_USE)
    store.record_action(release, AVAILABLE, spare_was=(IN_USE,))
    assert [n.spare for n in store.nodes()] == [AVAILABLE]
    assert [x.kind for x in store.actions()] == ["swap", "release"]


def test_concurrent_writers_neither_lose_nor_interleave(reopen: OpenStore) -> None:
    """Two stores on one database (two processes), several threads each: every write lands once, and a
    guarded change (release an in-use spare) is taken by exactly one of the writers racing for it."""
    stores = [reopen(), reopen()]
    stores[0].set_spares(["gpu010"], 1.0)
    stores[0].record_action(ActionRecord(2.0, "swap", None, "gpu003", "ops", spare="gpu010", mode="execute"), IN_USE)
    outcomes: list[str] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        store = stores[k % 2]
        for i in range(10):
            a = StoredAlarm(alarm(f"gpu{k:03d}", 300.0 + 30 * i), 1.0)
            store.commit(StepChanges([a], (f"gpu{k:03d}",), 300.0 + 30 * i, None, {f"w{k}": str(i)}))
            store.acknowledge(a.id, f"w{k}", "", 3.0)
        try:
            store.record_action(
                ActionRecord(4.0, "release", None, "gpu010", f"w{k}", spare="gpu010"), AVAILABLE, spare_was=IN_USE
            )
            outcome = "released"
        except Conflict:
            outcome = "conflict"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = stores[1]
    assert sorted(outcomes) == ["conflict"] * 5 + ["released"]
    assert len(store.alarms()) == 60 and all(s.status == "acknowledged" for s in store.alarms())
    kinds = [x.kind for x in store.actions()]
    assert kinds.count("acknowledge") == 60 and kinds.count("release") == 1
    assert [store.meta(f"w{k}") for k in range(6)] == ["9"] * 6


def test_a_bad_store_setting_is_a_clear_error() -> None:
    source = {"tsdb": {"url": "http://127.0.0.1:1"}}
    with pytest.raises(
        ConfigError, match=r"store.postgres: must be a postgresql:// URL, got 'mysql://ops:\*\*\*@db/pw'"
    ):
        config_from_dict({"source": source, "store": {"postgres": "mysql://ops:secret@db/pw"}})
    with pytest.raises(ConfigError, match="store: give sqlite or postgres, not both"):
        config_from_dict({"source": source, "store": {"postgres": "postgresql://db/pw", "sqlite": "s.sqlite"}})


def test_an_unreachable_postgres_is_named_without_its_password(tmp_path: Path) -> None:
    from services import free_port  # nothing listens there

    port = free_port()
    url = f"postgresql://ops:s3cret@127.0.0.1:{port}/peerwatch?connect_timeout=3"
    with pytest.raises(ConfigError) as caught:
        open_store(StoreConfig(postgres=url))
    message = str(caught.value)
    assert message.startswith(f"store.postgres: cannot connect to postgresql://ops:***@127.0.0.1:{port}/peerwatch")
    assert "s3cret" not in message and "refused" in message.lower()
    password_file = tmp_path / "pw"
    password_file.write_text("s3cret\n")
    config = StoreConfig(postgres=url.replace("ops:s3cret@", "ops@"), postgres_password_file=password_file)
    assert config.postgres_password() == "s3cret"
    with pytest.raises(ConfigError) as caught:
        open_store(config)
    assert "s3cret" not in str(caught.value)


@pytest.mark.services
def test_a_lost_postgres_connection_fails_one_call_clearly_and_the_next_reconnects(postgres_url: str) -> None:
    import psycopg

    from peerwatch.alarms.postgres_store import StoreUnavailable

    store = open_store(StoreConfig(postgres=postgres_url))
    try:
        a = StoredAlarm(alarm("gpu003", 300), 1.0)
        store.commit(StepChanges([a]))
        with psycopg.connect(postgres_url, autocommit=True) as admin:  # as a server restart would
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'peerwatch' AND pid <> pg_backend_pid()"
            )
        with pytest.raises(StoreUnavailable) as caught:
            store.acknowledge(a.id, "ops", "", 2.0)
        assert caught.value.status == 503 and caught.value.message.startswith(f"store {postgres_url}: ")
        assert store.alarm(a.id) == a  # nothing of the failed call was kept; this call reconnected
        assert store.acknowledge(a.id, "ops", "", 3.0).ack_wall == 3.0
    finally:
        store.close()


@pytest.mark.services
def test_postgres_tables_go_to_the_schema_the_url_names(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA peerwatch")
    store = open_store(StoreConfig(postgres=postgres_url + "?options=-csearch_path%3Dpeerwatch"))
    try:
        store.set_spares(["gpu010"], 1.0)
    finally:
        store.close()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        tables = admin.execute(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_name = 'spares'"
        )
        assert tables.fetchall() == [("peerwatch", "spares")]


@pytest.mark.services
def test_a_user_who_may_only_read_and_write_the_tables(postgres_url: str) -> None:
    """A team's DBA creates the tables once (here: peerwatch's first start as the owner) and gives the
    service's user rights on them only; without the tables, that user gets a clear error."""
    import psycopg

    role = "pw_" + postgres_url.rpartition("/")[2]
    limited = postgres_url.replace("//peerwatch@", f"//{role}@")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        try:
            admin.execute(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}")
            with pytest.raises(ConfigError, match=r"cannot set up the tables: .*permission denied for schema public"):
                open_store(StoreConfig(postgres=limited))
            open_store(StoreConfig(postgres=postgres_url)).close()
            admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
            store = open_store(StoreConfig(postgres=limited))
            try:
                store.set_spares(["gpu010"], 1.0)
                store.record_action(
                    ActionRecord(2.0, "swap", None, "gpu003", "ops", spare="gpu010", mode="execute"), IN_USE
                )
                assert [n.spare for n in store.nodes()] == [IN_USE]
            finally:
                store.close()
        finally:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_one_serve_per_store_the_lease_is_held_renewed_expires_and_a_dead_holder_holds_nothing(
    reopen: OpenStore,
) -> None:
    a, b = reopen(), reopen()
    assert a.claim("serve_lease", "hosta:1", 1000.0, 120.0) is None
    assert b.claim("serve_lease", "hostb:2", 1010.0, 120.0) == "hosta:1"
    assert a.claim("serve_lease", "hosta:1", 1100.0, 120.0) is None  # renewed until 1220
    assert b.claim("serve_lease", "hostb:2", 1200.0, 120.0) == "hosta:1"
    assert b.claim("serve_lease", "hostb:2", 1221.0, 120.0) is None  # expired: taken over
    assert a.claim("serve_lease", "hosta:1", 1222.0, 120.0) == "hostb:2"
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process of this host killed with -9 leaves its lease behind
    assert b.claim("other", f"{socket.gethostname()}:{gone.pid}", 1000.0, 1e9) is None
    assert a.claim("other", "hosta:1", 1001.0, 120.0) is None
    assert a.meta("other") == f"hosta:1 {1121.0!r}"


def test_a_second_serve_on_a_held_store_refuses_to_start_and_a_service_that_lost_it_stops(tmp_path: Path) -> None:
    path = tmp_path / "pw.yaml"
    path.write_text(
        f"source:\n  tsdb: {{url: 'http://127.0.0.1:1', timeout: 1s}}\nstore: {{sqlite: {tmp_path}/s.sqlite}}\n"
    )
    other = open_store(StoreConfig(sqlite=tmp_path / "s.sqlite"))
    assert other.claim("serve_lease", "elsewhere:4242", time.time(), 3600.0) is None
    result = CliRunner().invoke(app, ["serve", "--config", str(path)])
    assert result.exit_code == 1, result.output
    assert "another peerwatch serve (elsewhere:4242) holds this store; one serve per store" in result.output
    service = Service(
        config_from_dict(
            {"source": {"tsdb": {"url": "http://127.0.0.1:1"}}, "store": {"sqlite": str(tmp_path / "s.sqlite")}}
        )
    )
    with pytest.raises(Conflict, match="elsewhere:4242"):
        service.evaluate(Fetch(time.time(), time.time(), 0))
    assert not service.leader
    other.close()
    service.store.close()


def test_an_escalated_alarm_keeps_its_changes_across_a_reopen(reopen: OpenStore) -> None:
    opened = AlarmChange(300.0, "warning", "performance_degradation", "watch", "node")
    now = AlarmChange(450.0, "critical", "nvlink", "swap", "gpu/2")
    escalated = replace(alarm("gpu003", 300), changes=(opened, now))
    store = reopen()
    store.commit(StepChanges([stored(escalated)]))
    store.close()
    (got,) = reopen().alarms()
    assert got.alarm.changes == (opened, now) and got.alarm.as_json()["diagnosis"] == "performance_degradation"


def _drop_changes_column(kind: str, where: str) -> None:
    """Make the store's alarms table as it was before alarms kept their escalations."""
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(where) as db:
            db.execute("ALTER TABLE alarms DROP COLUMN changes")
    else:
        import psycopg

        with psycopg.connect(where, autocommit=True) as db:
            db.execute("ALTER TABLE alarms DROP COLUMN changes")


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def test_a_store_made_before_escalations_gains_the_column_in_place(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = str(tmp_path / "s.sqlite") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    config = StoreConfig(sqlite=Path(where)) if kind == "sqlite" else StoreConfig(postgres=where)
    store = open_store(config)
    store.commit(StepChanges([stored(alarm("gpu003", 300))]))
    store.close()
    _drop_changes_column(kind, where)
    store = open_store(config)  # the old table: the column is added, the row kept
    (old,) = store.alarms()
    assert old.alarm.changes == () and old.alarm.node == "gpu003"
    first = AlarmChange(330.0, "warning", "unknown", "watch", "node")
    store.commit(StepChanges([stored(replace(alarm("gpu004", 330), changes=(first,)))]))
    assert [len(s.alarm.changes) for s in store.alarms()] == [1, 0]
    store.close()
