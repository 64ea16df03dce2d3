"""What keeps the API answering 50 clients while the service evaluates (issue 18.6; figures in
docs/benchmarks.md, "HTTP under load"): store reads kept until the next write, unchanged rows decoded
once, renderings reused for the same rows, and few request threads beside the evaluation."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from anyio import to_thread
from fastapi.testclient import TestClient

from peerwatch.alarms import sql_store
from peerwatch.alarms.rendered import Rendered
from peerwatch.alarms.sqlite_store import SQLiteStore
from peerwatch.alarms.store import StepChanges, StoredAlarm
from peerwatch.model import Alarm, Evidence
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import API_THREADS, create_app
from peerwatch.service.clock import Clock

T0 = 1_764_460_000.0
EV = (Evidence("DCGM_FI_DEV_GPU_TEMP", (("gpu", "1"),), 91.0, 60.0, 12.0, "hot"),)


def row(i: int, resolved: float | None = None) -> StoredAlarm:
    a = Alarm(
        f"a{i}", T0 + i, f"gpu{i:03d}", "gpu/1", "thermal_throttle", "warning", 9.0, "watch", EV, T0 + i, resolved
    )
    return StoredAlarm(a, 1.0, None if resolved is None else "engine", None if resolved is None else 2.0)


def test_reads_are_kept_until_a_write_and_unchanged_rows_decoded_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.commit(StepChanges([row(i) for i in range(5)], ("gpu000",), T0, T0))
    first, again = store.alarms(), store.alarms()
    assert first == again and all(a is b for a, b in zip(first, again, strict=True))
    store.claim("lease", "me", time.time(), 60.0)  # a write the cached reads do not show keeps them
    assert all(a is b for a, b in zip(first, store.alarms(), strict=True))
    store.commit(StepChanges([row(2, resolved=T0 + 100)]))  # one row changes
    after = {s.id: s for s in store.alarms()}
    assert not after["a2"].open and after["a2"] is not {s.id: s for s in first}["a2"]
    assert all(after[s.id] is s for s in first if s.id != "a2")  # the others: the same objects, not decoded again
    store.set_spares([], 1.0)
    store.alarms()
    kept = [*(store._decoded or {}).values(), *(store._decoded_before or {}).values()]
    old_a2 = next(s for s in first if s.id == "a2")
    assert len(kept) <= 10 and not any(s is old_a2 for s in kept)  # a superseded row is let go
    assert [n.node for n in store.nodes()] == ["gpu000"]
    store.set_spares(["gpu009"], 1.0)
    assert [n.node for n in store.nodes()] == ["gpu000", "gpu009"]  # a write is seen at once
    store.close()


def test_another_process_write_is_seen_within_the_cache_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql_store, "READ_CACHE_SECONDS", 0.2)
    ours, theirs = SQLiteStore(tmp_path / "s.sqlite"), SQLiteStore(tmp_path / "s.sqlite")
    assert ours.alarms() == []
    theirs.commit(StepChanges([row(1)]))
    time.sleep(0.25)
    assert [s.id for s in ours.alarms()] == ["a1"]
    ours.close()
    theirs.close()


def test_a_rendering_is_reused_only_for_the_same_rows() -> None:
    kept = Rendered[str](size=2)
    a, b = row(1), row(2)
    made: list[int] = []

    def make() -> str:
        made.append(1)
        return f"page {len(made)}"

    assert kept.get("k", [a, b], make) == "page 1"
    assert kept.get("k", [a, b], make) == "page 1" and len(made) == 1
    assert kept.get("k", [a, row(2)], make) == "page 2"  # equal but not the same object: made again
    assert kept.get("k", [a], make) == "page 3"


def test_the_api_renders_an_unchanged_alarm_list_once_and_keeps_few_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = {"source": {"tsdb": {"url": "http://127.0.0.1:1"}}, "store": {"sqlite": str(tmp_path / "s.sqlite")}}
    service = Service(config_from_dict(raw), clock=Clock(start=T0 + 900, origin=time.time()))
    service.store.commit(StepChanges([row(i) for i in range(20)], (), T0, T0))
    calls = []
    original = StoredAlarm.as_json

    def counted(self: StoredAlarm) -> dict[str, object]:
        calls.append(self.id)
        return original(self)

    monkeypatch.setattr(StoredAlarm, "as_json", counted)
    with TestClient(create_app(service, run=False)) as client:
        first = client.get("/api/v1/alarms").json()
        assert len(first["alarms"]) == 20 and len(calls) == 20
        assert client.get("/api/v1/alarms").json() == first and len(calls) == 20
        service.store.commit(StepChanges([row(3, resolved=T0 + 100)]))
        changed = client.get("/api/v1/alarms").json()
        assert len(calls) == 40 and changed != first  # a changed row: the list is rendered again

        async def tokens() -> float:
            return to_thread.current_default_thread_limiter().total_tokens

        assert client.portal is not None and client.portal.call(tokens) == API_THREADS
    service.store.close()
