"""Dashboard pages without a browser: every page answers 200 and shows 1,000 nodes; data is escaped;
bad plot requests are refused with their reason; workload groups from an evaluation reach the cluster
page and the API."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bigcluster import END, GPUS, NODES, SPARES, big_service, name, pages
from peerwatch.alarms.store import ActionRecord, StepChanges, StoredAlarm
from peerwatch.detect.workload import LONE_KIND
from peerwatch.model import Alarm, Evidence, SeriesBlock
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock
from peerwatch.service.live_sources import Fetch
from peerwatch.simulate import Scenario, simulate
from peerwatch.simulate.cluster import ClusterSpec


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Service]]:
    service = big_service(tmp_path_factory.mktemp("big"))
    with TestClient(create_app(service, run=False)) as client:  # the dashboard is part of the app
        yield client, service
    service.store.close()


def _get(client: TestClient, url: str) -> str:
    resp = client.get(url)
    assert resp.status_code == 200, (url, resp.text[:300])
    return resp.text


def test_every_page_at_1000_nodes(big: tuple[TestClient, Service]) -> None:
    """What each page shows of 1,000 nodes (how fast: benchmarks/bench_dashboard.py)."""
    client, service = big
    urls = pages(service)
    first = client.get(urls["catalog"])  # answers at once and starts building the report
    assert first.status_code == 200 and "building the report" in first.text
    deadline = time.monotonic() + 60
    while "building the report" in _get(client, urls["catalog"]):
        assert time.monotonic() < deadline, "the catalogue report was not built in 60 s"
        time.sleep(0.02)
    texts = {page: _get(client, url) for page, url in urls.items()}
    assert texts["cluster"].count('class="tile') == NODES
    assert texts["cluster"].count('<i class="c') >= NODES * 7
    assert "Spare pool (50)" in texts["cluster"] and "Open alarms (50)" in texts["cluster"]
    # Sections split by workload group: alarms (all busy), in service (busy, other job), spares (idle).
    assert texts["cluster"].count('data-group="') == NODES + 4
    heads = re.findall(r'<h3 class="workload" data-group="(\d)">([^<]*)', texts["cluster"])
    assert [g for g, _ in heads] == ["1", "1", "2", "3"]
    assert heads[2][1] == "group 2 of 3: 50 nodes, other job" and "idle" in heads[3][1]
    assert texts["alarms"].count('<rect class="bar') == 200 and "300 alarms" in texts["alarms"]
    # the timeline's time axis: round UTC times, the first with its date
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', texts["alarms"])
    assert 3 <= len(ticks) <= 10 and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", ticks[0]), ticks
    assert 'name="token"' in texts["alarm"] and texts["alarm"].count('class="plot"') == 3
    assert "swap in" in texts["spares"] and name(NODES - SPARES) in texts["spares"]
    assert "DCGM_FI_DEV_GPU_TEMP" in texts["catalog"]
    # pages without a form reload at each step (without JavaScript too); pages with plots only redraw them
    for page in ("cluster", "alarms", "spares"):
        assert '<noscript><meta http-equiv="refresh" content="30"></noscript>' in texts[page], page
        assert '<body data-refresh="page" data-every="30">' in texts[page], page
    for page in ("alarm", "node"):
        assert "http-equiv" not in texts[page] and '<body data-refresh="plots"' in texts[page], page
        assert "/static/uPlot.iife.min.js" in texts[page], page


def test_plots_at_1000_nodes(big: tuple[TestClient, Service]) -> None:
    """Each plot of the node page is the JSON of the node's line against its peers, with its unit."""
    client, service = big
    urls = [unescape(u) for u in re.findall(r'data-src="([^"]+)"', _get(client, f"/dashboard/nodes/{name(7)}"))]
    assert urls and len(set(urls)) == len(urls)
    for url in urls:
        band = client.get(url).json()
        assert len(band["timestamps"]) >= 10 and any(v is not None for v in band["value"]), url
        assert band["marks"] == [] and "unit" in band
    alarm = service.store.alarms(open_only=True, node=name(0))[0].alarm
    marked = re.findall(r'data-src="([^"]+)"', _get(client, pages(service)["alarm"]))
    assert len(marked) == 3 and all(f"mark={alarm.ts!r}" in unescape(u) for u in marked)  # the opening


def test_peer_band_json(big: tuple[TestClient, Service]) -> None:
    client, _ = big
    resp = client.get(
        f"/api/v1/nodes/{name(7)}/peers", params={"metric": "DCGM_FI_DEV_GPU_TEMP", "labels": '{"gpu": "3"}'}
    )
    assert resp.status_code == 200, resp.text
    band = resp.json()
    assert band["component"] == "gpu/3" and band["band"] == [10.0, 90.0] and band["unit"] == "°C"
    # peers: the other GPUs of non-spare nodes, its own node's other GPUs included
    assert band["peers"] == (NODES - SPARES) * GPUS - 1
    value, median = band["value"][-1], band["median"][-1]
    assert value > 70 and 59 < median < 61 and band["low"][-1] < median < band["high"][-1]
    # a counter is shown as a rate, as the engine sees it
    rate = client.get(f"/api/v1/nodes/{name(1)}/peers", params={"metric": "node_intr_total"}).json()
    assert 300 < rate["median"][-1] < 370  # 9-11 thousand per 30 s step: ~333 per second
    assert rate["unit"] == "/s"
    marked = client.get(f"/api/v1/nodes/{name(1)}/peers", params={"metric": "node_load1", "mark": END - 600}).json()
    assert marked["marks"] == [{"ts": END - 600, "label": "alarm opened"}] and marked["unit"] == ""
    assert client.get(f"/api/v1/nodes/{name(1)}/peers", params={"metric": "nope"}).status_code == 404
    bad = client.get(f"/api/v1/nodes/{name(1)}/peers", params={"metric": "node_load1", "labels": "[1]"})
    assert bad.status_code == 400 and "labels" in bad.json()["error"]


def test_data_is_escaped_and_unknown_ids_are_404(tmp_path: Path) -> None:
    raw = {"source": {"tsdb": {"url": "http://127.0.0.1:1"}}, "store": {"sqlite": str(tmp_path / "s.sqlite")}}
    service = Service(config_from_dict(raw), clock=Clock(start=END, origin=time.time()))
    evil = '<script>alert("x")</script>'
    ev = (Evidence("m", (("gpu", evil),), 1.0, 0.0, 9.0, evil),)
    alarm = Alarm("a1", END - 60, evil, "gpu/0", "unknown", "warning", 9.0, "swap", ev, END)
    service.store.commit(StepChanges([StoredAlarm(alarm, 1.0)], (evil,), END, END))
    app = create_app(service, run=False)  # the dashboard is part of the app
    with TestClient(app) as client:
        for url in ("/dashboard/", "/dashboard/alarms", "/dashboard/alarms/a1", "/dashboard/spares"):
            text = client.get(url).text
            assert evil not in text and "&lt;script&gt;" in text, url
        page = client.get("/dashboard/alarms/a1").text
        assert "no api.token" in page and 'name="token"' not in page  # no token configured: no form
        assert client.get("/dashboard/alarms/nope").status_code == 404
        assert client.get("/dashboard/nodes/nope").status_code == 404
        assert client.get("/dashboard/static/../app.py").status_code == 404
        assert "/api/v1/nodes/{node}/peers" in client.get("/openapi.json").json()["paths"]
        empty = client.get("/dashboard/catalog")
        assert empty.status_code == 200 and "nothing judged yet" in empty.text
    service.store.close()


def test_workload_groups_from_an_evaluation(tmp_path: Path) -> None:
    """A simulated cluster (9 training nodes; of 3 spares one runs a lighter job, 2 idle) evaluated once:
    each node's group reaches ``GET /api/v1/nodes`` and the cluster page splits its sections by group;
    the node on a job of its own is in no group of peers, and the page names it."""
    sim = simulate(Scenario("groups", ClusterSpec(nodes=12, spares=3, light_job_nodes=1), hours=1.0, seed=3))
    at = sim.grid.start + 1800  # the light job runs from 21 min at the latest to 36 min at the earliest
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},  # never polled: the test feeds the buffer
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "window": "1h",
        "spares": [sim.layout.names[i] for i in sim.layout.spares],
    }
    service = Service(config_from_dict(raw), clock=Clock(start=at, origin=time.time()))
    with TestClient(create_app(service, run=False)) as client:  # before any evaluation: no group
        assert all(n["group"] is None for n in client.get("/api/v1/nodes").json()["nodes"])
    service.buffer.add(
        SeriesBlock(b.key, b.timestamps[b.timestamps <= at], b.values[b.timestamps <= at], b.mtype)
        for b in sim.blocks()
    )
    service.evaluate(Fetch(at, at, 1))
    with TestClient(create_app(service, run=False)) as client:
        nodes = {n["node"]: n for n in client.get("/api/v1/nodes").json()["nodes"]}
        page = client.get("/dashboard/").text
    light, *idle = raw["spares"]
    kinds = {name: n["group"]["kind"] for name, n in nodes.items()}
    assert kinds == {name: LONE_KIND if name == light else "idle" if name in idle else "busy" for name in nodes}
    assert nodes[idle[0]]["group"] == {
        "id": 2, "of": 3, "size": 2, "kind": "idle", "label": "group 2 of 3: 2 nodes, idle"
    }  # fmt: skip
    assert nodes["gpu001"]["group"]["label"] == "group 1 of 3: 9 nodes, busy"
    spare_section = page[page.index('<section class="group spare">') :]
    assert spare_section.index(f"group 3 of 3: 1 node, {LONE_KIND}") < spare_section.index(f'data-node="{light}"')
    assert spare_section.index("group 2 of 3: 2 nodes, idle") < spare_section.index(f'data-node="{idle[0]}"')
    # the light job's node is compared with nobody, and the page says so by name
    assert f"not compared, no node shares their work: {light}</p>" in page
    assert "workload groups (a node is compared with its own group only)" in page


def _out(node: str, ts: float, resolved: float | None) -> StoredAlarm:
    """A swap alarm (takes the node out of service), resolved at ``resolved`` or still open."""
    a = Alarm(f"{node}-{ts:.0f}", ts, node, "gpu/1", "ecc_hbm", "critical", 20.0, "swap", (), ts + 30, resolved)
    return StoredAlarm(a, 1.0, None if resolved is None else "engine", None if resolved is None else 2.0)


def test_risk_as_rank_spares_counting_nodes_out_and_dry_runs_marked(tmp_path: Path) -> None:
    """A lemon with 3 past outages and a node out now: ranks and incident counts instead of "104.8×", spare
    advice that counts the node out now, a dry-run drain apart from an executed one."""
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},
        "store": {"sqlite": str(tmp_path / "s.sqlite")},
        "spares": ["s1", "s2"],
    }
    service = Service(config_from_dict(raw), clock=Clock(start=END, origin=time.time()))
    day = 86_400.0
    rows = [_out("lemon", END - k * day, END - k * day + 3600) for k in (9, 6, 3)] + [_out("n2", END - 600, None)]
    service.store.commit(StepChanges(rows, ("lemon", "n2", "n3", "n4"), END, END))
    open_id = rows[-1].id
    dry = ActionRecord(time.time(), "drain", open_id, "n2", "oncall", "ecc", None, (("scontrol", "x"),), "dry-run")
    ran = ActionRecord(time.time(), "drain", open_id, "n2", "oncall", "ecc", None, (("scontrol", "y"),), "execute", 0)
    service.store.record_action(dry)
    service.store.record_action(ran)
    with TestClient(create_app(service, run=False)) as client:
        nodes = {n["node"]: n for n in client.get("/api/v1/nodes").json()["nodes"]}
        assert nodes["lemon"]["incidents"] == 3 and nodes["n2"]["incidents"] == 1 and nodes["n3"]["incidents"] == 0
        assert nodes["lemon"]["risk"] > 2  # the raw factor the pages no longer show
        cluster, spares = _get(client, "/dashboard/"), _get(client, "/dashboard/spares")
        node, alarm = _get(client, "/dashboard/nodes/lemon"), _get(client, f"/dashboard/alarms/{open_id}")
    # n2, out now, is the likeliest to fail next (a fresh fault weighs most: docs/fleet.md), then the lemon
    rank = 1 + sum(n["risk"] > nodes["lemon"]["risk"] for n in nodes.values())
    assert rank == 2 and len(nodes) == 6
    tile = cluster[cluster.index('data-node="lemon"') :].split("</div></div>")[0]
    assert "lemon #2 · 3 incidents</span>" in tile
    assert "×" not in re.sub(r'title="[^"]*"', "", tile)  # the raw factor only in the tooltip
    n2 = cluster[cluster.index('data-node="n2"') :].split("</div></div>")[0]
    assert "lemon #" not in n2 and nodes["n2"]["risk"] >= 2  # one fault, however fresh, is no lemon yet
    assert "lemon risk: rank 2 of 6 (top 33%) · 3 incidents so far" in node
    lemons = spares[spares.index("Likeliest to fail next") :]
    assert re.search(r"lemon</a></td><td>2 of 6 \(top 33%\)</td><td>3</td>", lemons), lemons
    assert "n3" not in lemons  # no past incident: not a lemon
    # one node is out now: the advice never says to keep fewer spares than that
    assert "<b>1 node</b> an open alarm takes out of service now; keep at least <b>1 spare</b>" in spares
    assert "Keep at least 0" not in spares and "keep at least <b>0" not in spares
    actions = alarm[alarm.index("<h2>Actions</h2>") :]
    dry_row, ran_row = re.findall(r"<tr[^>]*>.*?</tr>", actions)[1:3]
    assert (
        'class="dry-run"' in dry_row and "dry-run: nothing run" in dry_row and "would run: <code>scontrol x" in dry_row
    )
    assert "dry-run" not in ran_row and "executed (exit 0)" in ran_row and "ran: <code>scontrol y" in ran_row
    service.store.close()


def test_swagger_ui_is_served_offline(big: tuple[TestClient, Service]) -> None:
    """/docs loads Swagger UI from peerwatch itself: no URL in the page names another host."""
    client, _ = big
    page = _get(client, "/docs")
    urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", page)
    assert "/dashboard/static/swagger-ui-bundle.js" in urls and "/dashboard/static/swagger-ui.css" in urls
    assert not [u for u in urls if "//" in u], urls
    assert not re.search(r"https?://", page.replace("http://www.w3.org", "")), page
    assert '"validatorUrl": null' in page.replace("'", '"')
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "uPlot.iife.min.js", "uPlot.min.css"):
        assert client.get(f"/dashboard/static/{asset}").status_code == 200, asset
    assert client.get("/redoc").status_code == 404  # ReDoc only exists from a CDN
