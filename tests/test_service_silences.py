"""Alertmanager both ways, against a real Alertmanager: an acknowledgement becomes a silence that ends
with the alarm; a silence made in Alertmanager acknowledges the alarm; alerts link the alarm's page
and its diagnosis' runbook."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from alertmanager import Alertmanager, alertmanager  # noqa: F401
from peerwatch.alarms.delivery import iso
from peerwatch.alarms.store import StepChanges, StoredAlarm
from peerwatch.model import Alarm, Evidence
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock

pytestmark = pytest.mark.services
TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PUBLIC = "https://peerwatch.example.org"
RUNBOOKS = "https://git.example.org/peerwatch/blob/main/docs/runbooks"
NOW = 1_764_460_800.0


def make_service(tmp_path: Path, am_url: str) -> Service:
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "alertmanager": {"url": am_url, "labels": {"cluster": "test"}, "runbook_base": RUNBOOKS},
        "api": {"token": TOKEN, "url": PUBLIC},
    }
    return Service(config_from_dict(raw), clock=Clock(start=NOW, origin=time.time()))


def open_alarm(service: Service, ident: str, node: str, diagnosis: str = "ecc_hbm") -> str:
    ev = (Evidence("DCGM_FI_DEV_ROW_REMAP_FAILURE", (("gpu", "1"),), 1.0, 0.0, None, "row remap failed"),)
    alarm = Alarm(ident, NOW - 300, node, "gpu/1", diagnosis, "critical", 9.0, "swap", ev, NOW - 270)
    service.store.commit(StepChanges([StoredAlarm(alarm, time.time())], (node,), NOW, NOW))
    return ident


@pytest.fixture
def served(tmp_path: Path, alertmanager: Alertmanager) -> Iterator[tuple[Service, TestClient]]:  # noqa: F811
    service = make_service(tmp_path, alertmanager.url)
    with TestClient(create_app(service, run=False)) as client:
        yield service, client
    service.stop()


def silences(am: Alertmanager, alarm_id: str) -> list[dict[str, Any]]:
    """Every silence (any state) with a matcher on ``alarm_id``."""
    resp = httpx.get(f"{am.url}/api/v2/silences", timeout=5.0)
    resp.raise_for_status()
    return [s for s in resp.json() if {"name": "alarm_id", "value": alarm_id} in _plain(s["matchers"])]


def _plain(matchers: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"name": m["name"], "value": m["value"]} for m in matchers]


def alert_of(am: Alertmanager, alarm_id: str) -> dict[str, Any] | None:
    return next((a for a in am.alerts() if a["labels"].get("alarm_id") == alarm_id), None)


def test_an_acknowledgement_silences_the_alert_until_the_alarm_resolves(
    served: tuple[Service, TestClient],
    alertmanager: Alertmanager,  # noqa: F811
    tmp_path: Path,
) -> None:
    service, client = served
    ident = open_alarm(service, "ack0000000001", "sil001")
    service.notify()
    assert alertmanager.wait("the alert", lambda: alert_of(alertmanager, ident))["status"]["state"] == "active"
    assert silences(alertmanager, ident) == []

    resp = client.post(
        f"/api/v1/alarms/{ident}/acknowledge", json={"by": "alice", "note": "swap at 18:00"}, headers=AUTH
    )
    assert resp.status_code == 200 and resp.json()["status"] == "acknowledged"
    service.notify()
    [made] = silences(alertmanager, ident)
    assert made["status"]["state"] == "active"
    assert (made["createdBy"], made["comment"]) == ("alice", "swap at 18:00")
    assert sorted((m["name"], m["value"], m["isEqual"], m["isRegex"]) for m in made["matchers"]) == [
        ("alarm_id", ident, True, False),
        ("alertname", "PeerwatchAlarm", True, False),
        ("cluster", "test", True, False),
        ("component", "gpu/1", True, False),
        ("node", "sil001", True, False),
    ]  # its identity: not diagnosis or severity, which change as the alarm escalates
    ends = datetime.fromisoformat(made["endsAt"].replace("Z", "+00:00")).timestamp()
    assert ends > time.time() + 300 * 86400  # until the alarm resolves, not a guess of how long it takes
    muted = alertmanager.wait("the alert silenced", lambda: (alert_of(alertmanager, ident) or {}).get("status"))
    assert made["id"] in muted["silencedBy"]

    # Later rounds, and a restarted peerwatch on the same store, make no second silence.
    service.notify()
    again = make_service(tmp_path, alertmanager.url)
    again.notify()
    assert [s["id"] for s in silences(alertmanager, ident)] == [made["id"]]

    resp = client.post(f"/api/v1/alarms/{ident}/resolve", json={"by": "alice", "note": "swapped"}, headers=AUTH)
    assert resp.status_code == 200
    again.notify()
    [ended] = silences(alertmanager, ident)
    assert ended["id"] == made["id"] and ended["status"]["state"] == "expired"
    again.stop()


def test_a_silence_made_in_alertmanager_acknowledges_the_alarm(
    served: tuple[Service, TestClient],
    alertmanager: Alertmanager,  # noqa: F811
) -> None:
    service, client = served
    ident = open_alarm(service, "ack0000000002", "sil002")
    other = open_alarm(service, "ack0000000003", "sil003")
    service.notify()
    alertmanager.wait("the alerts", lambda: alert_of(alertmanager, ident) and alert_of(alertmanager, other))

    # Someone silences the whole node in Alertmanager's UI: whatever matchers, Alertmanager matches.
    now = time.time()
    body = {
        "matchers": [{"name": "node", "value": "sil00[2]", "isRegex": True, "isEqual": True}],
        "startsAt": iso(now),
        "endsAt": iso(now + 7200),
        "createdBy": "bob",
        "comment": "node in maintenance, ticket OPS-1234",
    }
    silence_id = httpx.post(f"{alertmanager.url}/api/v2/silences", json=body, timeout=5.0).json()["silenceID"]
    alertmanager.wait("the alert silenced", lambda: (alert_of(alertmanager, ident) or {})["status"]["silencedBy"])
    service.notify()

    row = client.get(f"/api/v1/alarms/{ident}").json()
    assert row["status"] == "acknowledged" and row["acknowledged"]["by"] == "bob"
    assert row["acknowledged"]["note"] == f"node in maintenance, ticket OPS-1234 (Alertmanager silence {silence_id})"
    assert [(a["kind"], a["by"]) for a in row["actions"]] == [("acknowledge", "bob")]
    assert client.get(f"/api/v1/alarms/{other}").json()["status"] == "open"  # not matched, not acknowledged

    # peerwatch never ends a silence it did not make, nor makes one of its own beside it.
    client.post(f"/api/v1/alarms/{ident}/resolve", json={"by": "bob"}, headers=AUTH)
    service.notify()
    [kept] = [s for s in httpx.get(f"{alertmanager.url}/api/v2/silences").json() if s["id"] == silence_id]
    assert kept["status"]["state"] == "active"
    assert [s["id"] for s in silences(alertmanager, ident)] == []


def test_alerts_link_the_alarm_page_and_the_runbook(
    served: tuple[Service, TestClient],
    alertmanager: Alertmanager,  # noqa: F811
) -> None:
    service, client = served
    ident = open_alarm(service, "ack0000000004", "sil004", diagnosis="ib_link")
    service.notify()
    alert = alertmanager.wait("the alert", lambda: alert_of(alertmanager, ident))
    assert alert["generatorURL"] == f"{PUBLIC}/dashboard/alarms/{ident}"
    page = client.get(alert["generatorURL"].removeprefix(PUBLIC))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html") and ident in page.text
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}/ib_link.md"
    assert f'<p id="runbook">runbook: <a href="{RUNBOOKS}/ib_link.md">ib_link</a></p>' in page.text
    runbook = Path(__file__).resolve().parents[1] / "docs" / "runbooks" / "ib_link.md"
    assert runbook.is_file()


def test_the_running_service_silences_an_acknowledged_alarm_at_once(
    tmp_path: Path,
    alertmanager: Alertmanager,  # noqa: F811
) -> None:
    """The API's acknowledgement wakes the notifier: the silence comes well before the next resend (1 min)."""
    service = make_service(tmp_path, alertmanager.url)
    ident = open_alarm(service, "ack0000000005", "sil005")
    with TestClient(create_app(service, run=True)) as client:  # threads run; the source is down (blind)
        alertmanager.wait("the alert", lambda: alert_of(alertmanager, ident), timeout=15)
        client.post(f"/api/v1/alarms/{ident}/acknowledge", json={"by": "carol", "note": "on it"}, headers=AUTH)
        [made] = alertmanager.wait("the silence", lambda: silences(alertmanager, ident), timeout=15)
        assert (made["createdBy"], made["comment"]) == ("carol", "on it")


def test_another_clusters_silence_does_not_acknowledge(
    served: tuple[Service, TestClient],
    alertmanager: Alertmanager,  # noqa: F811
) -> None:
    """Two peerwatch instances (cluster labels) share one Alertmanager: each reads only its own alerts."""
    service, client = served
    ident = open_alarm(service, "ack0000000006", "sil006")
    service.notify()
    # The other cluster's alert with the same alarm id, silenced there.
    now = time.time()
    theirs = {"alertname": "PeerwatchAlarm", "alarm_id": ident, "node": "sil006", "cluster": "other"}
    alert = {"labels": theirs, "startsAt": iso(now - 60), "endsAt": iso(now + 600)}
    httpx.post(f"{alertmanager.url}/api/v2/alerts", json=[alert], timeout=5.0).raise_for_status()
    matchers = [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in theirs.items()]
    body = {"matchers": matchers, "startsAt": iso(now), "endsAt": iso(now + 600), "createdBy": "dan", "comment": "x"}
    httpx.post(f"{alertmanager.url}/api/v2/silences", json=body, timeout=5.0).raise_for_status()
    alertmanager.wait(
        "their alert silenced",
        lambda: [a for a in alertmanager.alerts() if a["labels"] == theirs and a["status"]["silencedBy"]],
    )
    service.notify()
    assert client.get(f"/api/v1/alarms/{ident}").json()["status"] == "open"
