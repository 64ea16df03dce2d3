"""The SQLite store and alarm reconciliation: identity across windows and restarts, final resolutions."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from peerwatch.model import Alarm, Evidence
from peerwatch.service.errors import Conflict, NotFound
from peerwatch.service.metrics import node_risk
from peerwatch.service.reconcile import Judged, reconcile
from peerwatch.service.sqlite_store import SQLiteStore
from peerwatch.service.store import StepChanges, StoredAlarm

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


def test_the_store_survives_a_reopen_and_upserts_are_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    rows = [StoredAlarm(alarm("gpu003", 300), 1.0), StoredAlarm(alarm("gpu004", 330, resolved=600), 1.0, "engine", 2.0)]
    store = SQLiteStore(path)
    store.commit(StepChanges(rows, nodes=("gpu003", "gpu004"), seen_ts=600.0, evaluated_until=600.0))
    store.close()
    store = SQLiteStore(path)
    store.commit(StepChanges(rows, evaluated_until=630.0))  # the same step again, after a restart
    got = store.alarms()
    assert [s.alarm.node for s in got] == ["gpu004", "gpu003"]  # newest first
    assert got[1].alarm == rows[0].alarm and got[0].alarm.evidence == EV
    assert store.meta("evaluated_until") == "630.0"
    assert [s.id for s in store.alarms(open_only=True)] == [rows[0].id]
    assert [s.id for s in store.alarms(touching=700)] == [rows[0].id]
    assert {n.node for n in store.nodes()} == {"gpu003", "gpu004"}


def test_people_and_the_engine_never_overwrite_each_other(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
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


def test_spare_pool_and_risk(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.set_spares(["gpu009", "gpu010"], 1.0)
    store.commit(StepChanges([StoredAlarm(alarm("gpu003", 300, resolved=4000), 1.0, "engine", 2.0)], ("gpu003",), 300))
    store.set_spares(["gpu010"], 2.0)
    nodes = {n.node: n.spare for n in store.nodes()}
    assert nodes == {"gpu003": None, "gpu010": "available"}
    risk = node_risk(store.alarms(), nodes, at=5000.0)
    assert risk["gpu003"] > 10 * risk["gpu010"] and risk["gpu010"] == pytest.approx(1.0)
