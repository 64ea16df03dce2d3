"""A source that fails or stalls raises the "monitoring blind" alarm, and fresh data resolves it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import orjson

from peerwatch.service import Service, config_from_dict
from services import Service as Binary
from services import VictoriaMetrics, free_port

METRIC = "pwsvc_blind_gauge"


def _blind(service: Service) -> list[dict[str, object]]:
    return [s.as_json() for s in service.store.alarms(node="peerwatch")]


def test_an_unreachable_tsdb_is_an_alarm_naming_url_and_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    raw = {"source": {"tsdb": {"url": url, "timeout": "2s"}}, "store": {"sqlite": str(tmp_path / "s.sqlite")}}
    service = Service(config_from_dict(raw))
    rows = service.evaluate(service.collect())
    (alarm,) = rows
    assert (alarm.alarm.node, alarm.alarm.component, alarm.alarm.diagnosis) == (
        "peerwatch",
        "source",
        "monitoring_blind",
    )
    assert alarm.alarm.severity == "critical" and alarm.open
    (evidence,) = alarm.alarm.evidence
    assert dict(evidence.labels) == {"source": url} and url in evidence.note and "ConnectError" in evidence.note
    assert service.status()["status"] == "blind" and service.health.blind and service.health.evaluations == 0
    # Still failing: the same alarm goes on, no second one.
    service.evaluate(service.collect())
    assert len(_blind(service)) == 1


def _import(vm: VictoriaMetrics, times: list[float]) -> None:
    lines = [
        orjson.dumps(
            {
                "metric": {"__name__": METRIC, "instance": f"gpu00{n}:9100"},
                "values": [1.0 + n for _ in times],
                "timestamps": [int(t * 1000) for t in times],
            }
        )
        for n in range(1, 4)
    ]
    with httpx.Client(timeout=30.0) as client:
        assert client.post(f"{vm.url}/api/v1/import", content=b"\n".join(lines)).status_code in (200, 204)
        deadline = time.monotonic() + 15
        while True:  # until the newest sample can be read back
            client.get(f"{vm.url}/internal/force_flush")
            resp = client.get(f"{vm.url}/api/v1/export", params={"match[]": METRIC, "start": str(int(times[-1]) - 1)})
            if str(int(times[-1] * 1000)) in resp.text:
                return
            assert time.monotonic() < deadline, resp.text
            time.sleep(0.2)


def test_a_stalled_tsdb_is_an_alarm_until_fresh_data_arrives(victoria_metrics: VictoriaMetrics, tmp_path: Path) -> None:
    now = time.time()
    _import(victoria_metrics, [now - 1200 + 30 * i for i in range(10)])  # the newest is 15 min old
    raw = {
        "source": {"tsdb": {"url": victoria_metrics.url, "matchers": [f'{{__name__="{METRIC}"}}'], "format": "csv"}},
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
    }
    service = Service(config_from_dict(raw))
    fetch, samples = service.collect(), 0
    while fetch.backlog:  # the window comes a read at a time, each judged: old data, no alarm
        assert fetch.error is None and service.evaluate(fetch) == []
        samples += fetch.samples
        fetch = service.collect()
    assert fetch.error is None and samples + fetch.samples == 30
    (alarm,) = service.evaluate(fetch)
    note = alarm.alarm.evidence[0].note
    assert alarm.alarm.diagnosis == "monitoring_blind"
    assert re.fullmatch(r"no fresh data: newest sample is 9\d\ds old .*", note), note

    _import(victoria_metrics, [now - 90, now - 60, now - 30])
    time.sleep(max(0.0, now + 1 - time.time()))
    rows = service.evaluate(service.collect())
    (ended,) = [r for r in rows if r.alarm.node == "peerwatch"]
    assert ended.id == alarm.id and not ended.open and ended.resolved_by == "source"
    assert service.status()["status"] == "ok"


def test_scrape_targets_down_are_exporter_down_and_discovery_heals_it(node_exporter: Binary, tmp_path: Path) -> None:
    live = node_exporter.url.removeprefix("http://")
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    sd = tmp_path / "targets.json"
    sd.write_text(json.dumps([{"targets": [live, *dead], "labels": {"job": "node"}}]))
    raw = {
        "source": {"scrape": {"file_sd": [str(sd)], "timeout": "2s"}},
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
    }
    service = Service(config_from_dict(raw))
    fetch = service.collect()
    assert fetch.targets == 3 and len(fetch.down) == 2
    (alarm,) = service.evaluate(fetch)
    assert alarm.alarm.diagnosis == "exporter_down" and alarm.open
    assert alarm.alarm.evidence[0].note == "2 of 3 scrape targets failed"
    assert {dict(e.labels).get("instance") for e in alarm.alarm.evidence[1:]} == {f"http://{d}/metrics" for d in dead}
    assert service.health.evaluations == 1  # part of the cluster is still visible: it is still judged

    time.sleep(1.1)  # a new modification time for the file
    sd.write_text(json.dumps([{"targets": [live], "labels": {"job": "node"}}]))
    rows = service.evaluate(service.collect())
    (ended,) = [r for r in rows if r.alarm.node == "peerwatch"]
    assert ended.id == alarm.id and ended.resolved_by == "source"
    assert {n.node for n in service.store.nodes()} == {"127.0.0.1"}
