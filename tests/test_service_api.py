"""The HTTP API over a service whose store (SQLite or PostgreSQL) holds alarms: reads, token-guarded changes,
errors, metrics, giving a spare back to the pool."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from peerwatch.alarms.alertmanager import AlertmanagerSink
from peerwatch.alarms.config import AlertmanagerConfig
from peerwatch.alarms.store import StepChanges, StoredAlarm
from peerwatch.model import Alarm, AlarmChange, Evidence
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock
from peerwatch.service.evaluation import Evaluation
from peerwatch.service.live_sources import Fetch
from peerwatch.service.metrics import Health

TOKEN = "t0ken"
EV = (Evidence("DCGM_FI_DEV_XID_ERRORS", (("gpu", "2"), ("Hostname", "gpu003")), 79.0, None, None, "XID 79"),)


def alarm(node: str, ts: float, diagnosis: str, resolved: float | None = None, action: str = "swap") -> Alarm:
    ident = hashlib.sha1(f"{node}|{ts}".encode()).hexdigest()[:12]
    return Alarm(ident, ts, node, "gpu/2", diagnosis, "critical", 22.5, action, EV, ts + 30, resolved)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The ``store`` setting: every test here runs on both stores."""
    if request.param == "sqlite":
        return {"sqlite": str(tmp_path / "s.sqlite")}
    return {"postgres": request.getfixturevalue("postgres_url")}


def make_service(store: dict[str, str], token: str | None = TOKEN, **settings: object) -> Service:
    raw: dict[str, object] = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},
        "store": store,
        "spares": ["gpu010"],
        "api": {"token": token} if token else {},
        **settings,
    }
    # Data time just after the alarms, so that risk is judged when they are recent.
    service = Service(config_from_dict(raw), clock=Clock(start=1_764_460_900.0, origin=time.time()))
    rows = [
        StoredAlarm(alarm("gpu003", 1_764_460_800.0, "gpu_fallen_off_bus"), 1.0),
        StoredAlarm(alarm("gpu004", 1_764_460_500.0, "ib_link", resolved=1_764_460_700.0), 1.0, "engine", 2.0),
    ]
    service.store.commit(StepChanges(rows, ("gpu003", "gpu004", "gpu005"), 1_764_460_830.0, 1_764_460_830.0))
    service.health = Health(scores={("gpu003", "gpu/2", "DCGM_FI_DEV_XID_ERRORS"): 22.5})
    return service


@contextmanager
def serving(service: Service) -> Iterator[TestClient]:
    with TestClient(create_app(service, run=False)) as c:
        try:
            yield c
        finally:
            service.store.close()


@pytest.fixture
def client(store: dict[str, str]) -> Iterator[TestClient]:
    with serving(make_service(store)) as c:
        yield c


def test_reads(client: TestClient) -> None:
    alarms = client.get("/api/v1/alarms").json()["alarms"]
    assert [a["node"] for a in alarms] == ["gpu003", "gpu004"]
    first = alarms[0]
    assert list(first)[:9] == ["id", "ts", "node", "component", "diagnosis", "severity", "score", "action", "evidence"]
    assert first["status"] == "open" and first["evidence"][0]["note"] == "XID 79"
    assert [a["node"] for a in client.get("/api/v1/alarms?status=open").json()["alarms"]] == ["gpu003"]
    assert client.get("/api/v1/alarms?node=gpu004").json()["alarms"][0]["status"] == "resolved"
    one = client.get(f"/api/v1/alarms/{first['id']}").json()
    assert one["id"] == first["id"] and one["actions"] == []
    nodes = {n["node"]: n for n in client.get("/api/v1/nodes").json()["nodes"]}
    assert nodes["gpu003"]["status"] == "alarm" and nodes["gpu003"]["open_alarms"] == [first["id"]]
    assert nodes["gpu003"]["components"] == {"gpu/2": 22.5}
    assert nodes["gpu005"]["status"] == "ok" and nodes["gpu010"]["status"] == "spare"
    assert nodes["gpu004"]["risk"] > nodes["gpu005"]["risk"]  # its swap alarm took it out and back
    assert client.get("/healthz").json()["status"] == "starting"
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/v1/alarms/{alarm_id}/acknowledge" in paths and "/api/v1/nodes" in paths


def test_errors_are_json_with_their_status(client: TestClient) -> None:
    resp = client.get("/api/v1/alarms/nope")
    assert resp.status_code == 404 and resp.json() == {"error": "no alarm with id 'nope'", "status": 404}
    resp = client.get("/api/v1/alarms?status=closed")
    assert resp.status_code == 400 and "status" in resp.json()["error"]


def test_state_changes_need_the_token(client: TestClient) -> None:
    ident = client.get("/api/v1/alarms?status=open").json()["alarms"][0]["id"]
    url = f"/api/v1/alarms/{ident}/acknowledge"
    assert client.post(url).status_code == 401
    assert client.post(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.post(url, headers={"Authorization": TOKEN}).status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    resp = client.post(url, json={"by": "ops", "note": "on it"}, headers=auth)
    assert resp.status_code == 200 and resp.json()["acknowledged"]["by"] == "ops"
    assert client.post(url, json={"by": "ops", "extra": 1}, headers=auth).status_code == 400
    resolved = client.post(f"/api/v1/alarms/{ident}/resolve", json={"by": "ops"}, headers=auth)
    assert resolved.status_code == 200 and resolved.json()["resolved_by"] == "user:ops"
    again = client.post(f"/api/v1/alarms/{ident}/resolve", headers=auth)
    assert again.status_code == 409 and "already resolved" in again.json()["error"]
    kinds = [a["kind"] for a in client.get(f"/api/v1/alarms/{ident}").json()["actions"]]
    assert kinds == ["acknowledge", "resolve"]


def test_without_a_configured_token_nothing_changes(store: dict[str, str]) -> None:
    with serving(make_service(store, token=None)) as c:
        ident = c.get("/api/v1/alarms").json()["alarms"][0]["id"]
        resp = c.post(f"/api/v1/alarms/{ident}/resolve", headers={"Authorization": "Bearer x"})
        assert resp.status_code == 403 and "no api.token" in resp.json()["error"]


def test_metrics(client: TestClient) -> None:
    resp = client.get("/metrics")
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    score = families["peerwatch_anomaly_score"].samples[0]
    assert score.labels == {"node": "gpu003", "component": "gpu/2", "metric": "DCGM_FI_DEV_XID_ERRORS"}
    assert score.value == 22.5
    open_ = {(s.labels["diagnosis"], s.labels["severity"]): s.value for s in families["peerwatch_open_alarms"].samples}
    assert open_[("gpu_fallen_off_bus", "critical")] == 1 and open_[("gpu_fallen_off_bus", "warning")] == 0
    assert open_[("ib_link", "critical")] == 0 and open_[("nvlink", "warning")] == 0
    risk = {s.labels["node"]: s.value for s in families["peerwatch_node_risk"].samples}
    assert set(risk) == {"gpu003", "gpu004", "gpu005", "gpu010"} and risk["gpu004"] > risk["gpu005"]
    assert families["peerwatch_monitoring_blind"].samples[0].value == 0


def test_alert_payload_and_a_changed_label_set(tmp_path: Path) -> None:
    service = make_service({"sqlite": str(tmp_path / "s.sqlite")})
    clock = Clock(start=1_764_460_000.0, origin=1_800_000_000.0, speed=10.0)
    sink = AlertmanagerSink(AlertmanagerConfig(url="http://am:9093", labels={"cluster": "a", "node": "x"}), clock)
    s = service.store.alarms(open_only=True)[0]
    body = sink.alert(s, wall=1_800_000_100.0)
    assert body["labels"] == {
        "cluster": "a",
        "alertname": "PeerwatchAlarm",
        "node": "gpu003",
        "component": "gpu/2",
        "diagnosis": "gpu_fallen_off_bus",
        "severity": "critical",
        "alarm_id": s.id,
    }
    assert body["startsAt"] == "2027-01-15T08:01:20.000Z"  # data time 1764460800 on the 10x clock
    assert body["endsAt"] == "2027-01-15T08:05:40.000Z"  # four resend intervals ahead
    annotations = body["annotations"]
    assert isinstance(annotations, dict) and "XID 79" in annotations["description"]
    changed = StoredAlarm(s.alarm, s.opened_wall, sent_labels={**sink.labels(s), "severity": "warning"})
    alerts, to_mark = sink._alerts([changed], wall=1_800_000_100.0)
    assert len(alerts) == 2 and to_mark == [changed]
    old = alerts[1]
    assert old["labels"]["severity"] == "warning" and old["endsAt"] == "2027-01-15T08:01:40.000Z"  # type: ignore[index]


def test_an_escalated_alarm_keeps_its_alert_identity(tmp_path: Path) -> None:
    """Alertmanager is updated, not paged again: the labels stay those the alarm opened with."""
    service = make_service({"sqlite": str(tmp_path / "s.sqlite")})
    clock = Clock(start=1_764_460_000.0, origin=1_800_000_000.0, speed=10.0)
    sink = AlertmanagerSink(AlertmanagerConfig(url="http://am:9093"), clock)
    s = service.store.alarms(open_only=True)[0]
    opened = AlarmChange(s.alarm.ts, "warning", "performance_degradation", "watch", "node")
    now = AlarmChange(s.alarm.ts + 300, s.alarm.severity, s.alarm.diagnosis, s.alarm.action, s.alarm.component)
    escalated = replace(s, alarm=replace(s.alarm, changes=(opened, now)), sent_labels=None)
    first = replace(s, alarm=replace(s.alarm, diagnosis="performance_degradation", severity="warning", changes=()))
    first = replace(first, alarm=replace(first.alarm, action="watch", component="node"))
    assert sink.labels(escalated) == sink.labels(first)
    alerts, _ = sink._alerts([replace(escalated, sent_labels=sink.labels(first))], wall=1_800_000_100.0)
    assert len(alerts) == 1  # no resolved twin of an old label set: the same alert, updated
    annotations = alerts[0]["annotations"]
    assert isinstance(annotations, dict) and annotations["diagnosis_now"] == s.alarm.diagnosis
    # The escalation survives the store.
    service.store.commit(StepChanges(alarms=(escalated,)))
    stored = service.store.alarm(s.id)
    assert stored is not None and stored.alarm.changes == (opened, now)


def test_a_swapped_in_spare_is_released_back_to_the_pool(store: dict[str, str]) -> None:
    remediation = {"mode": "execute", "templates": {"drain": [["true"]], "swap_in": [["true"]]}}
    with serving(make_service(store, remediation=remediation)) as c:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        ident = c.get("/api/v1/alarms?status=open").json()["alarms"][0]["id"]

        def spare() -> str:
            return str({n["node"]: n for n in c.get("/api/v1/nodes").json()["nodes"]}["gpu010"]["spare"])

        swap = c.post(f"/api/v1/alarms/{ident}/remediate", json={"action": "swap", "by": "ops"}, headers=auth)
        assert swap.status_code == 200 and swap.json()["spare"] == "gpu010" and spare() == "in_use"
        again = c.post(f"/api/v1/alarms/{ident}/remediate", json={"action": "swap", "by": "ops"}, headers=auth)
        assert again.status_code == 409 and "no spare available" in again.json()["error"]

        url = "/api/v1/spares/gpu010/release"
        assert c.post(url, json={"by": "ops"}).status_code == 401
        assert c.post(url, json={"by": "ops", "state": "x"}, headers=auth).status_code == 400
        resp = c.post(url, json={"by": "ops", "note": "gpu003 repaired, gpu010 back to spare"}, headers=auth)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert (body["kind"], body["node"], body["spare"], body["state"], body["by"]) == (
            "release",
            "gpu010",
            "gpu010",
            "available",
            "ops",
        )
        assert spare() == "available"
        twice = c.post(url, headers=auth)
        assert twice.status_code == 409
        assert twice.json()["error"] == "spare gpu010 is available, not in_use or quarantined"
        unknown = c.post("/api/v1/spares/gpu003/release", headers=auth)
        assert unknown.status_code == 404 and "not in the spare pool" in unknown.json()["error"]

        actions = c.get("/api/v1/actions").json()["actions"]
        assert [(a["kind"], a["node"]) for a in actions] == [("swap", "gpu003"), ("release", "gpu010")]
        assert actions[1]["note"] == "gpu003 repaired, gpu010 back to spare" and actions[1]["alarm_id"] is None
        offered = c.post(f"/api/v1/alarms/{ident}/remediate", json={"action": "swap", "by": "ops"}, headers=auth)
        assert offered.status_code == 200 and offered.json()["spare"] == "gpu010"  # in the pool again


def test_a_spare_is_quarantined_when_an_alarm_opens_on_it_or_by_hand_and_released_after(
    store: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(
        store, remediation={"mode": "execute", "templates": {"drain": [["true"]], "swap_in": [["true"]]}}
    )
    on_spare = alarm("gpu010", 1_764_460_830.0, "ecc_hbm")
    found = Evaluation(1_764_460_800.0, 1_764_460_830.0, ("gpu003", "gpu010"), (on_spare,))
    monkeypatch.setattr(service.evaluator, "evaluate", lambda *_: found)
    with serving(service) as c:
        auth = {"Authorization": f"Bearer {TOKEN}"}

        def spare() -> str:
            return str({n["node"]: n for n in c.get("/api/v1/nodes").json()["nodes"]}["gpu010"]["spare"])

        service.evaluate(Fetch(1_764_460_830.0, 1_764_460_830.0, 1))
        assert spare() == "quarantined"
        (auto,) = [a for a in c.get("/api/v1/actions").json()["actions"] if a["kind"] == "quarantine"]
        assert (auto["node"], auto["by"], auto["alarm_id"]) == ("gpu010", "peerwatch", on_spare.id)
        opened = {a["node"]: a["id"] for a in c.get("/api/v1/alarms?status=open").json()["alarms"]}
        body = {"action": "swap", "by": "ops"}
        swap = c.post(f"/api/v1/alarms/{opened['gpu003']}/remediate", json=body, headers=auth)
        assert swap.status_code == 409, swap.text
        assert "no spare available" in swap.json()["error"]
        url = "/api/v1/spares/gpu010"
        assert c.post(f"{url}/quarantine", headers=auth).status_code == 409  # quarantined already
        assert c.post(f"{url}/release", json={"by": "ops", "note": "burn-in passed"}, headers=auth).status_code == 200
        assert spare() == "available"
        assert c.post(f"{url}/quarantine", json={"by": "ops"}).status_code == 401
        resp = c.post(f"{url}/quarantine", json={"by": "ops", "note": "fan noise"}, headers=auth)
        assert resp.status_code == 200 and resp.json()["state"] == "quarantined" and spare() == "quarantined"
        assert c.post("/api/v1/spares/gpu003/quarantine", headers=auth).status_code == 404
