"""The dashboard's routes: thin views over the service's store, health and judged frames.

``app.include_router(dashboard_router(service, settings))`` mounts the pages under ``/dashboard`` and one
JSON endpoint, ``GET /api/v1/nodes/{node}/peers``: a node's series against its peers' band.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from importlib import resources
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from peerwatch.alarms.errors import BadRequest, NotFound
from peerwatch.alarms.rendered import Rendered
from peerwatch.alarms.views import node_views
from peerwatch.web.alarms import render_alarm, render_alarm_list
from peerwatch.web.catalog_page import CatalogCache, render_catalog
from peerwatch.web.cluster import render_cluster
from peerwatch.web.format import clock
from peerwatch.web.node_page import render_node
from peerwatch.web.page import PLOTS, esc, shell
from peerwatch.web.paths import node_in_path
from peerwatch.web.peers import BandCache, PeerBand, peer_band
from peerwatch.web.spares import recommend, render_spares, sizing
from peerwatch.web.standing import standings
from peerwatch.web.state import Dashboarded, DashboardSettings

PREFIX = "/dashboard"
CSS, JS = "text/css; charset=utf-8", "text/javascript; charset=utf-8"
STATIC = {  # vendored files: static/VENDORED.md
    "dashboard.css": CSS,
    "dashboard.js": JS,
    "catalog.js": JS,
    "uPlot.iife.min.js": JS,
    "uPlot.min.css": CSS,
    "swagger-ui-bundle.js": JS,
    "swagger-ui.css": CSS,
}
ALL = 100_000


def _static() -> dict[str, bytes]:
    folder = resources.files("peerwatch.web").joinpath("static")
    return {name: folder.joinpath(name).read_bytes() for name in STATIC}


def dashboard_router(service: Dashboarded, settings: DashboardSettings, prefix: str = PREFIX) -> APIRouter:
    """The dashboard over ``service``: cluster, alarms, nodes, catalogue, spares."""
    router = APIRouter()
    hidden: dict[str, Any] = {"include_in_schema": False, "response_class": HTMLResponse}  # pages, not API
    static = _static()
    bands, catalogs, alarm_lists = BandCache(), CatalogCache(), Rendered[str]()

    def status_line() -> str:
        s = service.status()
        text = f"{s['status']} · data until {clock(s['evaluated_until'])}"  # type: ignore[arg-type]
        return f'<span class="badge {esc(s["status"])}">{esc(text)}</span>'

    def page(
        title: str, body: str, active: str = "", code: int = 200, refresh: str = "", extra: Sequence[str] = ()
    ) -> HTMLResponse:
        status, every = status_line(), settings.step
        html = shell(prefix, title, body, active=active, status=status, refresh=refresh, every=every, extra=extra)
        return HTMLResponse(html, status_code=code)

    def now() -> float:
        return service.evaluated_until if service.evaluated_until is not None else service.now()

    def band(
        node: str, metric: str, labels: str | None, component: str | None, start: float | None, end: float | None
    ) -> PeerBand | None:
        wanted: dict[str, str] | None = None
        if labels:
            try:
                parsed = orjson.loads(labels)
            except orjson.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
                raise BadRequest('labels: must be a JSON object of strings, e.g. {"gpu": "3"}')
            wanted = parsed
        history = service.history
        newest = history.newest
        if newest is None:
            return None
        hi = newest if end is None else min(end, newest)
        lo = max(newest - settings.window, start if start is not None else -float("inf"))
        if hi <= lo:
            return None
        frame = bands.frame(history, metric, lo, hi)
        if frame is None:
            return None
        spares = {n.node for n in service.store.nodes() if n.spare is not None}
        return peer_band(frame, node, labels=wanted, component=component, exclude=spares)

    @router.get(prefix, **hidden)
    @router.get(prefix + "/", **hidden)
    def cluster() -> HTMLResponse:
        views = node_views(service)
        open_components: dict[str, set[str]] = defaultdict(set)
        for s in service.store.alarms(open_only=True, limit=ALL):
            open_components[s.alarm.node].add(s.alarm.component)
        body = render_cluster(prefix, views, service.scores, open_components)
        return page("Cluster", body, "cluster", refresh="page")

    @router.get(prefix + "/alarms", **hidden)
    def alarms(status: Literal["open", "all"] = "all") -> HTMLResponse:
        rows = service.store.alarms(open_only=status == "open", limit=ALL)
        at, open_only = now(), status == "open"
        body = alarm_lists.get((open_only, at), rows, lambda: render_alarm_list(prefix, rows, at, open_only))
        return page("Alarms", body, "alarms", refresh="page")

    @router.get(prefix + "/alarms/{alarm_id}", **hidden)
    def alarm(alarm_id: str) -> HTMLResponse:
        s = service.store.alarm(alarm_id)
        if s is None:
            return page("No such alarm", f"<p>no alarm with id {esc(alarm_id)}</p>", "alarms", 404)
        a = s.alarm
        runbook = settings.runbook_url(a.diagnosis)
        body = render_alarm(prefix, s, service.store.actions(alarm_id), settings.changes_allowed, runbook)
        return page(f"{a.node} {a.component}: {a.diagnosis}", body, "alarms", refresh="plots", extra=PLOTS)

    # {node:node}: a node's own "/" arrives decoded; node_in_path reads the node from the raw path.
    @router.get(prefix + "/nodes/{node:node}", **hidden)
    def node(request: Request) -> HTMLResponse:
        node = node_in_path(request, prefix + "/nodes/")
        views = node_views(service)
        view = next((v for v in views if v["node"] == node), None)
        rows = service.store.alarms(node=node, limit=200)
        if view is None and not rows:
            return page("No such node", f"<p>no node {esc(node)} seen or listed as a spare</p>", "cluster", 404)
        body = render_node(prefix, view, node, rows, service.scores, standings(views).get(node))
        return page(f"Node {node}", body, "cluster", refresh="plots", extra=PLOTS)

    @router.get(prefix + "/catalog", **hidden)
    def catalog() -> HTMLResponse:
        report = catalogs.report(service.history, settings.window)
        return page("Catalogue", render_catalog(report), "catalog", extra=("catalog.js",))

    @router.get(prefix + "/spares", **hidden)
    def spares() -> HTMLResponse:
        views = node_views(service)
        everything = service.store.alarms(limit=ALL)
        swaps = recommend([s for s in everything if s.open], views)
        body = render_spares(prefix, swaps, views, sizing(everything, len(views)))
        return page("Spares", body, "spares", refresh="page")

    @router.get(prefix + "/static/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in static:
            raise NotFound(f"no static file {name!r}")
        return Response(static[name], media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})

    @router.get("/api/v1/nodes/{node:node}/peers", tags=["dashboard"])
    def peers(
        request: Request,
        node: str,
        metric: Annotated[str, Query(min_length=1)],
        labels: Annotated[str | None, Query(description="JSON object: the series' labels to match")] = None,
        component: str | None = None,
        start: float | None = None,
        end: float | None = None,
        mark: Annotated[float | None, Query(description="an alarm's opening, returned in marks")] = None,
    ) -> dict[str, Any]:
        """A node's series of ``metric`` against its peers' median and 10th–90th percentile, per step,
        over ``[start, end]`` within the service's window (spares are not peers), with its unit; what
        the dashboard's plots draw. A ``/`` in the node's name is written ``%2F``."""
        node = node_in_path(request, "/api/v1/nodes/", "/peers")
        b = band(node, metric, labels, component, start, end)
        if b is None:
            raise NotFound(f"no series of {metric!r} on {node!r} in the service's window")
        return b.as_json() | {"marks": [{"ts": mark, "label": "alarm opened"}] if mark is not None else []}

    return router
