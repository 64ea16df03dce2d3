"""Sinks: write-back into a real VictoriaMetrics, the webhook against a local server, their counts on
/metrics (with a real Alertmanager), the Grafana dashboard."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from alertmanager import Alertmanager, alertmanager  # noqa: F401
from peerwatch.alarms.config import WebhookConfig
from peerwatch.alarms.sqlite_store import SQLiteStore
from peerwatch.alarms.store import StepChanges, StoredAlarm
from peerwatch.alarms.webhook import WebhookSink
from peerwatch.model import Alarm, Evidence
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock
from peerwatch.service.config import WritebackConfig
from peerwatch.service.metrics import Health, render
from peerwatch.service.writeback import WriteBack
from services import VictoriaMetrics

STEP = 1_764_470_010.0  # data time of the step written back: isolates this test's samples in the shared VM
EV = (Evidence("DCGM_FI_NVLINK_ERRORS", (("gpu", "3"), ("Hostname", "wbk003")), 41.0, 0.0, 12.0, "NVLink CRC"),)


def alarm(
    node: str, ts: float, diagnosis: str = "nvlink", severity: str = "critical", resolved: float | None = None
) -> Alarm:
    ident = hashlib.sha1(f"{node}|{ts}".encode()).hexdigest()[:12]
    return Alarm(ident, ts, node, "gpu/3", diagnosis, severity, 22.5, "swap", EV, ts + 30, resolved)


class Receiver:
    """A tiny webhook receiver on 127.0.0.1: records each POST, answers with scripted statuses (then 200)."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.statuses: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                if status == 200:
                    receiver.posts.append((dict(self.headers), orjson.loads(data)))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def states(self) -> list[tuple[str, str]]:
        return [(body["id"], body["state"]) for _, body in self.posts]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def export(vm: VictoriaMetrics, selector: str) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]:
    """Series matching ``selector`` at STEP: labels -> [(ms, value)]."""
    with httpx.Client(timeout=10.0) as client:
        client.get(f"{vm.url}/internal/force_flush")
        resp = client.get(
            f"{vm.url}/api/v1/export", params={"match[]": selector, "start": str(STEP - 1), "end": str(STEP + 1)}
        )
    resp.raise_for_status()
    out = {}
    for line in resp.text.splitlines():
        row = orjson.loads(line)
        labels = tuple(sorted((k, v) for k, v in row["metric"].items() if k != "__name__"))
        out[labels] = list(zip(row["timestamps"], row["values"], strict=True))
    return out


def test_each_step_is_written_back_and_alarm_changes_reach_the_webhook(
    tmp_path: Path, victoria_metrics: VictoriaMetrics, receiver: Receiver
) -> None:
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "writeback": {"url": victoria_metrics.url},
        "webhook": {"url": receiver.url, "headers": {"Authorization": "Bearer hook"}},
    }
    service = Service(config_from_dict(raw), clock=Clock(start=STEP, origin=time.time()))
    first = StoredAlarm(alarm("wbk003", STEP - 600), 1.0)
    service.store.commit(StepChanges([first], ("wbk003", "wbk004"), STEP, STEP))
    scores = {("wbk003", "gpu/3", "DCGM_FI_NVLINK_ERRORS"): 22.5, ("wbk004", "gpu/1", "DCGM_FI_DEV_GPU_TEMP"): 3.25}
    service.health = Health(evaluated_until=STEP, scores=scores)
    service.publish()
    service.publish()  # nothing new: neither a second sample nor a second post

    ms = round(STEP * 1000)
    got = export(victoria_metrics, '{__name__="peerwatch_anomaly_score",node=~"wbk.*"}')
    assert got == {
        (("component", "gpu/3"), ("metric", "DCGM_FI_NVLINK_ERRORS"), ("node", "wbk003")): [(ms, 22.5)],
        (("component", "gpu/1"), ("metric", "DCGM_FI_DEV_GPU_TEMP"), ("node", "wbk004")): [(ms, 3.25)],
    }
    risk = export(victoria_metrics, '{__name__="peerwatch_node_risk",node=~"wbk.*"}')
    assert set(risk) == {(("node", "wbk003"),), (("node", "wbk004"),)}
    assert risk[(("node", "wbk003"),)][0][1] > risk[(("node", "wbk004"),)][0][1]  # its swap counts against it
    assert export(victoria_metrics, "peerwatch_open_alarms") == {
        (("diagnosis", "nvlink"), ("severity", "critical")): [(ms, 1.0)]
    }

    headers, body = receiver.posts[0]
    assert headers["Authorization"] == "Bearer hook"
    assert list(body) == [
        "id", "ts", "node", "component", "diagnosis", "severity", "score", "action", "evidence", "state", "resolved_ts"
    ]  # fmt: skip
    assert (body["id"], body["state"], body["resolved_ts"]) == (first.id, "opened", None)
    assert body["evidence"][0]["note"] == "NVLink CRC"
    assert receiver.states() == [(first.id, "opened")]

    service.store.resolve(first.id, "ops", "", STEP + 30, time.time())
    service.changed()
    service.publish()
    assert receiver.states() == [(first.id, "opened"), (first.id, "resolved")]
    assert receiver.posts[-1][1]["resolved_ts"] == STEP + 30
    assert service.status()["sinks"] == {
        "writeback": {"url": victoria_metrics.url, "errors": 0, "last_error": None},
        "webhook": {"url": receiver.url, "errors": 0, "last_error": None},
    }
    service.stop()


def test_the_running_service_posts_its_blind_alarm(tmp_path: Path, receiver: Receiver) -> None:
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1", "timeout": 1}},
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "webhook": {"url": receiver.url},
        "clock": {"start": STEP, "speed": 30},
    }
    service = Service(config_from_dict(raw))
    service.start()
    try:
        deadline = time.monotonic() + 15
        while not receiver.posts and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        service.stop()
    assert receiver.posts, "the publisher thread posted nothing"
    body = receiver.posts[0][1]
    assert (body["node"], body["component"], body["state"]) == ("peerwatch", "source", "opened")


def test_write_back_lines_and_a_vanished_alarm_count_written_as_zero() -> None:
    sink = WriteBack(WritebackConfig(url="http://127.0.0.1:1"))
    health = Health(evaluated_until=100.0, scores={("n1", "gpu/0", "m"): 1.5})
    open_alarms = [StoredAlarm(alarm("n1", 40.0, "ecc_hbm", "warning"), 1.0)]
    assert sink.payload(health, open_alarms, {"n1": 2.0}) == [
        'peerwatch_anomaly_score{node="n1",component="gpu/0",metric="m"} 1.5 100000',
        'peerwatch_node_risk{node="n1"} 2 100000',  # one float formatter: integral values as integers
        'peerwatch_open_alarms{diagnosis="ecc_hbm",severity="warning"} 1 100000',
    ]
    sink._open_keys = {("ecc_hbm", "warning")}  # as after a successful push
    assert sink.payload(replace(health, evaluated_until=130.0), [], {})[-1] == (
        'peerwatch_open_alarms{diagnosis="ecc_hbm",severity="warning"} 0 130000'
    )
    assert sink.payload(Health(), [], {}) == []


def test_a_failed_write_back_is_counted_not_raised() -> None:
    sink = WriteBack(WritebackConfig(url="http://127.0.0.1:1", timeout=2.0))
    health = Health(evaluated_until=100.0, scores={("n1", "gpu/0", "m"): 1.5})
    result = sink.push(health, [], {})
    assert result.sent == 0 and result.error and "127.0.0.1:1" in result.error
    assert (sink.errors, sink.last_step) == (1, None) and sink.due(health)  # tried again at the next wake
    sink.close()


def test_webhook_lifecycle_retries_and_restart(tmp_path: Path, receiver: Receiver) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    old = StoredAlarm(alarm("n0", 10.0, resolved=20.0), 1.0, "engine", time.time() - 60)
    a = StoredAlarm(alarm("n1", 100.0, "unknown", "warning"), 2.0)
    store.commit(StepChanges([old, a]))
    slept: list[float] = []
    config = WebhookConfig(url=receiver.url)
    sink = WebhookSink(config, backoff=(0.01, 0.02, 0.04), sleep=slept.append)

    assert sink.sync(store).sent == 1  # the old resolution is not news to a new receiver
    assert receiver.states() == [(a.id, "opened")]
    assert sink.sync(store).sent == 0

    # The diagnosis settles (updated), a second alarm opens; the receiver fails twice first.
    store.commit(StepChanges([replace(a, alarm=replace(a.alarm, diagnosis="nvlink", severity="critical"))]))
    b = StoredAlarm(alarm("n2", 130.0), 3.0)
    store.commit(StepChanges([b]))
    receiver.statuses = [503, 500]
    assert sink.sync(store).sent == 2
    assert slept == [0.01, 0.02]
    assert receiver.states()[1:] == [(a.id, "updated"), (b.id, "opened")]
    assert receiver.posts[1][1]["diagnosis"] == "nvlink"

    # Down for good: the sync stops at the first change, keeps it, and a later sync sends it.
    store.resolve(a.id, "ops", "", 160.0, time.time())
    receiver.statuses = [502] * 4
    result = sink.sync(store)
    assert result.sent == 0 and result.error and "after 4 tries" in result.error and sink.errors == 1
    restarted = WebhookSink(config, backoff=(), sleep=slept.append)  # what was heard survives a restart
    assert restarted.sync(store).sent == 1
    assert receiver.states()[-1] == (a.id, "resolved")

    # A refusal (4xx) is not retried: the change is dropped and counted.
    store.resolve(b.id, "ops", "", 170.0, time.time())
    receiver.statuses = [400]
    result = restarted.sync(store)
    assert result.error and "dropped" in result.error and restarted.errors == 1
    assert restarted.sync(store).sent == 0
    store.close()


# --- sink counts on /metrics -----------------------------------------------------------------

SINKS = ("alertmanager", "writeback", "webhook")


def sink_metrics(service: Service) -> dict[str, dict[str, float]]:
    """``/metrics`` of ``service`` through its API: metric name -> sink -> value."""
    with TestClient(create_app(service, run=False)) as client:
        text = client.get("/metrics").text
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("peerwatch_sink_"):
                out.setdefault(sample.name, {})[sample.labels["sink"]] = sample.value
    return out


def sink_service(tmp_path: Path, am: str, vm: str, hook: str) -> Service:
    """A service with all three sinks and one open alarm, at data time STEP."""
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "alertmanager": {"url": am, "timeout": 2},
        "writeback": {"url": vm, "timeout": 2},
        "webhook": {"url": hook, "timeout": 2},
    }
    service = Service(config_from_dict(raw), clock=Clock(start=STEP, origin=time.time()))
    assert service.webhook is not None
    service.webhook.backoff = ()  # one try per change: no sleeping between retries
    service.store.commit(StepChanges([StoredAlarm(alarm("snk001", STEP - 300), 1.0)], ("snk001",), STEP, STEP))
    service.health = replace(service.health, evaluated_until=STEP, scores={("snk001", "gpu/3", "m"): 5.0})
    return service


def test_failing_sinks_count_errors_on_metrics(tmp_path: Path) -> None:
    closed = "http://127.0.0.1:1"  # nothing listens on port 1
    service = sink_service(tmp_path, closed, closed, closed + "/hook")
    before = sink_metrics(service)
    assert before["peerwatch_sink_sends_total"] == dict.fromkeys(SINKS, 0.0)
    assert before["peerwatch_sink_errors_total"] == dict.fromkeys(SINKS, 0.0)
    assert "peerwatch_sink_last_success_timestamp_seconds" not in before  # absent before the first success
    service.notify()
    service.publish()
    service.publish()  # the write-back step was not pushed, so it is tried again
    after = sink_metrics(service)
    assert after["peerwatch_sink_sends_total"] == {"alertmanager": 1.0, "writeback": 2.0, "webhook": 2.0}
    assert after["peerwatch_sink_errors_total"] == after["peerwatch_sink_sends_total"]
    assert "peerwatch_sink_last_success_timestamp_seconds" not in after
    sinks = service.status()["sinks"]
    assert {k: v["errors"] for k, v in sinks.items()} == {"writeback": 2, "webhook": 2}  # as /healthz shows
    service.stop()


def test_working_sinks_count_sends_not_errors(
    tmp_path: Path,
    alertmanager: Alertmanager,  # noqa: F811
    victoria_metrics: VictoriaMetrics,
    receiver: Receiver,
) -> None:
    service = sink_service(tmp_path, alertmanager.url, victoria_metrics.url, receiver.url)
    t0 = time.time()
    service.notify()
    service.publish()
    got = sink_metrics(service)
    assert got["peerwatch_sink_sends_total"] == dict.fromkeys(SINKS, 1.0)
    assert got["peerwatch_sink_errors_total"] == dict.fromkeys(SINKS, 0.0)
    stamps = got["peerwatch_sink_last_success_timestamp_seconds"]
    assert set(stamps) == set(SINKS) and all(t0 <= t <= time.time() for t in stamps.values())
    alarm_id = service.store.alarms(open_only=True)[0].id
    alertmanager.wait("the alert", lambda: [a for a in alertmanager.alerts() if a["labels"]["alarm_id"] == alarm_id])
    assert receiver.states() == [(alarm_id, "opened")]
    service.stop()


# --- the Grafana dashboard -------------------------------------------------------------------

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"}


def exported_names() -> set[str]:
    """Every metric name peerwatch's /metrics renders."""
    text = render(Health(evaluated_until=1.0), [], {})
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords or labels."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    words = re.findall(r"(?<![\w.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", expr)
    return {w for w in words if w not in PROMQL_WORDS}


def test_metric_names_in_promql() -> None:
    assert metric_names('topk(5, max by (node) (peerwatch_node_risk{node=~"gpu.*"}))') == {"peerwatch_node_risk"}
    assert metric_names("sum(a) / on (node) group_left b > 0.5") == {"a", "b"}


def test_the_grafana_dashboard_uses_only_metrics_peerwatch_exports() -> None:
    text = resources.files("peerwatch").joinpath("data/grafana/peerwatch.json").read_text()
    dash = orjson.loads(text)
    assert dash["title"] and dash["uid"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    names = exported_names()
    assert {"peerwatch_anomaly_score", "peerwatch_node_risk", "peerwatch_open_alarms"} <= names
    used: set[str] = set()
    kinds = set()
    for panel in dash["panels"]:
        kinds.add(panel["type"])
        assert panel["title"] and set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["refId"] and target["datasource"] == panel["datasource"]
            found = metric_names(target["expr"])
            assert found and found <= names, (panel["title"], target["expr"], found - names)
            used |= found
    assert used >= {"peerwatch_anomaly_score", "peerwatch_node_risk", "peerwatch_open_alarms"}
    assert {"heatmap", "table"} <= kinds
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
