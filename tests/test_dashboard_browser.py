"""The dashboard in real headless Chromium: a service runs over a simulated NVLink fault until its alarm
opens; the pages show the faulty node, its evidence plots render, and acknowledging from the page works."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from browser import Chromium, Served, chromium_fixture  # noqa: F401
from peerwatch.model import SeriesBlock
from peerwatch.service import Service, config_from_dict
from peerwatch.service.app import create_app
from peerwatch.service.clock import Clock
from peerwatch.service.live_sources import Fetch
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate

TOKEN = "dash-token"
FAULTY, SPARE = "gpu003", "gpu008"
STEP = 30.0
EXTRA_STEPS = 6


@dataclass
class Live:
    service: Service
    served: Served
    alarm_id: str
    step: Callable[[], float]  # feeds and evaluates the next step of the recording; its time

    def page(self, browser: Chromium, path: str) -> Any:
        page = browser.context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.errors = errors
        response = page.goto(self.served.url + path)
        assert response is not None and response.status == 200, path
        return page


def _cut(blocks: list[SeriesBlock], after: float, until: float) -> Iterator[SeriesBlock]:
    for b in blocks:
        m = (b.timestamps > after) & (b.timestamps <= until)
        if m.any():
            yield SeriesBlock(b.key, b.timestamps[m], b.values[m], b.mtype)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """8 simulated nodes (gpu008 the spare) with an NVLink fault on gpu003 GPU 2: the service is fed step
    by step from minute 10 and evaluated at each step until the alarm on gpu003 opens."""
    fault = FaultRequest("nvlink_xid", node=FAULTY, gpu=2, at=0.5)  # precursor from ~9 min, XID at 30
    sim = simulate(Scenario("dashboard", default_spec(8), hours=1.0, seed=2, faults=(fault,)))
    blocks = list(sim.blocks())
    start = sim.grid.start
    raw = {
        "source": {"tsdb": {"url": "http://127.0.0.1:1"}},  # never polled: the test feeds the buffer
        "store": {"sqlite": str(tmp_path_factory.mktemp("dash") / "s.sqlite")},
        "window": "1h",
        "spares": [SPARE],
        "api": {"token": TOKEN},
    }
    service = Service(config_from_dict(raw), clock=Clock(start=start + 600, origin=time.time()))
    service.buffer.add(_cut(blocks, 0, start + 600))
    at, alarm = start + 600, None
    while alarm is None:
        assert at < start + 2400, "no alarm on the faulty node within 40 simulated minutes"
        service.buffer.add(_cut(blocks, at, at + STEP))
        at += STEP
        service.evaluate(Fetch(at, at, 1))
        alarm = next((s for s in service.store.alarms(open_only=True) if s.alarm.node == FAULTY), None)

    def step() -> float:
        nonlocal at
        service.buffer.add(_cut(blocks, at, at + STEP))
        at += STEP
        service.evaluate(Fetch(at, at, 1))
        return at

    for _ in range(EXTRA_STEPS):  # the alarm gathers evidence as the fault develops
        step()
    served = Served(create_app(service, run=False))  # the dashboard is part of the app
    try:
        yield Live(service, served, alarm.id, step)
    finally:
        served.stop()
        service.store.close()


def test_cluster_page_shows_the_faulty_node_and_the_spare(live: Live, chromium: Chromium) -> None:
    page = live.page(chromium, "/dashboard/")
    tile = page.locator(f'.group.alarm .tile[data-node="{FAULTY}"]')
    assert tile.count() == 1 and tile.locator(".c.alarm").count() == 1  # its gpu cell carries the alarm
    assert page.locator(f'.group.spare .tile[data-node="{SPARE}"]').count() == 1
    assert page.locator(".tile").count() == 8
    tile.locator("a").click()
    page.wait_for_url(f"**/dashboard/nodes/{FAULTY}")
    page.wait_for_function(
        "document.querySelectorAll('.plot').length === document.querySelectorAll('.plot.loaded').length"
    )
    # one plot per metric and component: the alarm's evidence, not again for the score it left
    titles = [t.split(" ")[0] for t in page.locator(".evidence h3").all_inner_texts()]
    assert sorted(titles) == sorted(set(titles)) and len(titles) >= 2, titles
    assert page.locator(".plot canvas").count() == len(titles)
    assert page.errors == []
    page.close()


def _loaded(page: Any) -> None:
    page.wait_for_function(
        "document.querySelectorAll('.plot').length === document.querySelectorAll('.plot.loaded').length"
    )


def test_alarm_page_plots_the_evidence_against_the_peers(live: Live, chromium: Chromium) -> None:
    page = live.page(chromium, "/dashboard/alarms")
    page.locator(f'table.alarms a[href="/dashboard/alarms/{live.alarm_id}"]').click()
    page.wait_for_url(f"**/dashboard/alarms/{live.alarm_id}")
    assert FAULTY in page.locator("h1").inner_text()
    _loaded(page)
    assert page.locator(".evidence .plot canvas").count() >= 2
    # The precursor: the scheduler agent's task count, the node's line far above its peers' band.
    box = page.locator('.evidence:has(h3:has-text("backendai_async_task_count")) .plot')
    data = httpx.get(live.served.url + (box.get_attribute("data-src") or "")).json()
    assert data["value"][-1] > 5 * data["high"][-1] and len(data["timestamps"]) >= 10
    assert [m["ts"] for m in data["marks"]] == [live.service.store.alarm(live.alarm_id).alarm.ts]  # type: ignore[union-attr]
    assert box.get_attribute("data-marks") == "1"  # the alarm's opening, drawn
    # Time ticks in UTC within the plotted span, the date on the first; y ticks as numbers.
    ticks = (box.get_attribute("data-x-ticks") or "").split("|")
    first = datetime.fromtimestamp(data["timestamps"][0], UTC)
    last = datetime.fromtimestamp(data["timestamps"][-1], UTC)
    assert ticks[0].startswith(first.strftime("%Y-%m-%d\n")) and len(ticks) >= 4, ticks
    for t in ticks:
        hm = t.rsplit("\n", 1)[-1]
        assert re.fullmatch(r"\d\d:\d\d", hm) and first.strftime("%H:%M") <= hm <= last.strftime("%H:%M"), ticks
    yticks = (box.get_attribute("data-y-ticks") or "").split("|")
    assert len(yticks) >= 3 and all(re.fullmatch(r"-?[\d.]+[kMGT]?", y) for y in yticks), yticks
    # Hovering over the plot shows the node's value at that step (uPlot's live legend).
    over = box.locator(".u-over")
    bb = over.bounding_box()
    over.hover(position={"x": bb["width"] - 2, "y": bb["height"] / 2})
    legend = box.locator(".u-legend .u-series")
    page.wait_for_function("el => el.textContent !== '–'", arg=legend.nth(4).locator(".u-value").element_handle())
    shown = legend.nth(4).locator(".u-value").inner_text()
    assert float(shown.split()[0]) == pytest.approx(data["value"][-1], rel=1e-3), shown
    assert legend.nth(0).locator(".u-value").inner_text() == last.strftime("%Y-%m-%d %H:%M:%SZ")
    assert page.errors == []
    page.close()


def test_a_flat_peer_band_is_still_drawn(live: Live, chromium: Chromium) -> None:
    """Every GPU's memory clock is 3996 MHz all along: the band has no height in data, yet it is drawn."""
    page = live.page(chromium, f"/dashboard/nodes/{FAULTY}")
    _loaded(page)
    src = "/api/v1/nodes/gpu001/peers?metric=DCGM_FI_DEV_MEM_CLOCK&labels=%7B%22gpu%22%3A%220%22%7D"
    data = httpx.get(live.served.url + src).json()
    assert set(data["low"]) == set(data["high"]) == {3996.0} and data["unit"] == "MHz"
    page.evaluate(
        """src => { const box = document.createElement("div"); box.className = "plot flat"; box.dataset.src = src;
        document.querySelector("main").appendChild(box); return window.peerwatch.loadPlot(box); }""",
        src,
    )
    box = page.locator(".plot.flat")
    page.wait_for_function("document.querySelector('.plot.flat').dataset.bandPx >= 6")
    assert float(box.get_attribute("data-band-px") or 0) >= 6
    yticks = [float(y) for y in (box.get_attribute("data-y-ticks") or "").split("|")]
    assert min(yticks) < 3996 < max(yticks) and len(yticks) >= 3  # a range padded around the flat value
    assert page.errors == []
    page.close()


def test_acknowledge_from_the_alarm_page(live: Live, chromium: Chromium) -> None:
    page = live.page(chromium, f"/dashboard/alarms/{live.alarm_id}")
    form = page.locator("form#ack")
    form.locator("input[name=token]").fill("wrong")
    form.locator("button").click()
    page.wait_for_selector("form#ack .result.error")
    assert "401" in form.locator(".result").inner_text()
    api = f"{live.served.url}/api/v1/alarms/{live.alarm_id}"
    assert httpx.get(api).json()["status"] == "open"

    form.locator("input[name=token]").fill(TOKEN)
    form.locator("input[name=by]").fill("oncall")
    form.locator("input[name=note]").fill("swapping gpu003")
    form.locator("button").click()
    page.wait_for_selector("form#ack .result.ok")
    assert page.locator("#alarm-status .badge").inner_text() == "acknowledged"
    assert form.locator("input[name=token]").input_value() == ""  # not kept in the page
    body = httpx.get(api).json()
    assert body["status"] == "acknowledged"
    assert body["acknowledged"]["by"] == "oncall" and body["acknowledged"]["note"] == "swapping gpu003"
    page.reload()
    assert "acknowledged by oncall" in page.locator("main").inner_text()
    assert [e for e in page.errors if "status of 401" not in e] == []  # the refused attempt is logged
    page.close()


def test_other_pages_and_nothing_leaves_loopback(live: Live, chromium: Chromium) -> None:
    page = live.page(chromium, "/dashboard/spares")
    swaps = page.locator("table.swaps")
    if swaps.count():  # the alarm's action decides whether a swap is asked for
        assert SPARE in swaps.inner_text()
    assert SPARE in page.locator("main").inner_text()
    page.goto(live.served.url + "/dashboard/catalog")  # built in the background; the page reloads itself
    page.wait_for_selector("table.families", timeout=30_000)
    rows = page.locator("table.families tbody tr")
    total = rows.count()
    assert total > 50
    # Filter: every word must appear in the row; "carrying signal only" hides the families set aside.
    page.fill(".filter input[name=q]", "dcgm_exporter gpu_temp")
    shown = page.locator("table.families tbody tr:not([hidden])")
    assert shown.count() == 1 and "DCGM_FI_DEV_GPU_TEMP" in shown.inner_text()
    assert page.locator(".filter .count").inner_text() == f"1 of {total} families"
    page.fill(".filter input[name=q]", "")
    page.check(".filter input[name=active]")
    signal = [t.split("\t")[7] for t in shown.all_inner_texts()]
    assert 0 < len(signal) < total and set(signal) == {"active"}
    # Sort: by series, numbers in order, then reversed on a second click.
    header = page.locator("table.families th", has_text="series")
    header.click()
    column = "rs => rs.map(r => Number(r.cells[6].textContent))"
    series = page.eval_on_selector_all("table.families tbody tr", column)
    assert len(series) == total and series == sorted(series) and header.get_attribute("aria-sort") == "ascending"
    header.click()
    series = page.eval_on_selector_all("table.families tbody tr", column)
    assert series == sorted(series, reverse=True) and series[0] > series[-1]
    assert page.errors == []
    # Swagger UI from the service itself: it renders the API's operations with no internet.
    page.goto(live.served.url + "/docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    assert page.locator(".swagger-ui .opblock").count() >= 10
    page.close()
    outside = [u for u in chromium.requests if not u.startswith(live.served.url) and not u.startswith("data:")]
    assert outside == [], outside
    assert any(u.endswith("/dashboard/static/uPlot.iife.min.js") for u in chromium.requests)


def test_shots(live: Live, chromium: Chromium, tmp_path: Path) -> None:
    """Screenshots of each page for a person to look at (kept in pytest's temporary folder)."""
    shots = {
        "cluster": "/dashboard/",
        "alarm": f"/dashboard/alarms/{live.alarm_id}",
        "node": f"/dashboard/nodes/{FAULTY}",
    }
    shots |= {"spares": "/dashboard/spares", "alarms": "/dashboard/alarms"}
    for name, path in shots.items():
        page = live.page(chromium, path)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        page.close()
    assert (tmp_path / "alarm.png").stat().st_size > 10_000


def test_pages_refresh_when_the_service_evaluates_a_step(live: Live, chromium: Chromium) -> None:
    """At the evaluation step the cluster page reloads itself; the node page only redraws its plots' data
    (its canvases stay). Runs last: it moves the service on by one step."""
    pages = {}
    for name, path in (("cluster", "/dashboard/"), ("node", f"/dashboard/nodes/{FAULTY}")):
        page = chromium.context.new_page()
        page.clock.install()  # the page's timers run when the test says
        page.goto(live.served.url + path)
        page.wait_for_function("document.body.dataset.seen !== undefined")
        page.evaluate("window.stillHere = true")
        pages[name] = page
    node = pages["node"]
    _loaded(node)
    node.evaluate("document.querySelectorAll('.plot canvas').forEach(c => c.dataset.kept = '1')")
    asked: list[str] = []
    node.on("request", lambda r: asked.append(r.url))
    at = live.step()
    for page in pages.values():
        page.clock.run_for(int(1000 * STEP) + 1000)
    cluster = pages["cluster"]
    cluster.wait_for_function("window.stillHere === undefined")  # reloaded
    cluster.wait_for_load_state()
    clock = datetime.fromtimestamp(at, UTC).strftime("%H:%M:%SZ")
    assert clock in cluster.locator("header .status").inner_text()
    node.wait_for_function(f"document.querySelector('header .status').textContent.includes('{clock}')")
    plots = node.locator(".plot").count()
    deadline = time.monotonic() + 20
    while sum("/peers?" in u for u in asked) < plots:  # each plot's data asked for again
        assert time.monotonic() < deadline, asked
        node.wait_for_timeout(100)
    assert node.evaluate("window.stillHere") is True  # not reloaded
    assert node.locator(".plot canvas[data-kept]").count() == node.locator(".plot canvas").count() > 0
    assert not any(u.endswith(f"/dashboard/nodes/{FAULTY}") for u in asked)
    for page in pages.values():
        page.close()
