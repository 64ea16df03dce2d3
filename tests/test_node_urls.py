"""Node names with reserved characters (``/``, ``%``, ``?``, ``#``) get working dashboard pages and API
paths: links escape them, routes read them back from the raw path (issue 18.4)."""

from __future__ import annotations

import re
import time
from html import unescape
from pathlib import Path
from urllib.parse import quote

from fastapi.testclient import TestClient

from peerwatch.alarms.store import StepChanges, StoredAlarm
from peerwatch.model import Alarm
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock

END = 1_764_460_800.0
NAMES = ("rack1/gpu01", "x/plot", "50%", "q?x#y", "gpu02")
SPARE = "pool/s1"


def test_reserved_characters_in_node_names(tmp_path: Path) -> None:
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "spares": [SPARE],
        "api": {"token": "t"},
    }
    service = Service(config_from_dict(raw), clock=Clock(start=END, origin=time.time()))
    rows = [
        StoredAlarm(Alarm(f"a{i}", END - 60, n, "gpu/0", "unknown", "warning", 9.0, "watch", (), END), 1.0)
        for i, n in enumerate(NAMES)
    ]
    service.store.commit(StepChanges(rows, NAMES, END, END))
    with TestClient(create_app(service, run=False)) as client:
        cluster = client.get("/dashboard/").text
        links = {unescape(h) for h in re.findall(r'href="(/dashboard/nodes/[^"]+)"', cluster)}
        assert links == {f"/dashboard/nodes/{quote(n, safe='')}" for n in (*NAMES, SPARE)}
        for node in (*NAMES, SPARE):
            page = client.get(f"/dashboard/nodes/{quote(node, safe='')}")
            assert page.status_code == 200 and f"<h1>Node {node.replace('&', '&amp;')}" in page.text, node
        assert client.get("/dashboard/nodes/rack1/gpu01").status_code == 200  # typed by hand, unescaped
        assert client.get("/dashboard/nodes/rack1%2Fgpu02").status_code == 404  # no such node: not another's page
        alarm_page = client.get("/dashboard/alarms/a0").text
        assert 'href="/dashboard/nodes/rack1%2Fgpu01"' in alarm_page
        peers = client.get(f"/api/v1/nodes/{quote('rack1/gpu01', safe='')}/peers", params={"metric": "m"})
        assert peers.status_code == 404 and "on 'rack1/gpu01'" in peers.json()["error"]
        url = f"/api/v1/spares/{quote(SPARE, safe='')}/quarantine"
        done = client.post(url, json={"by": "ops"}, headers={"Authorization": "Bearer t"})
        assert done.status_code == 200 and done.json()["spare"] == SPARE and done.json()["state"] == "quarantined"
    service.store.close()
