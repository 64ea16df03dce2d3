"""The HTTP API (FastAPI, OpenAPI at ``/docs`` and ``/openapi.json``): thin views over the service.

Reads need nothing; anything that changes state needs ``Authorization: Bearer <token>``, and is
refused outright when no token is configured. Every error is a :class:`ServiceError` rendered by
one handler as ``{"error": ..., "status": ...}``.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Annotated, Any, Literal

import orjson
from anyio import to_thread
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from peerwatch import __version__
from peerwatch.alarms import spares
from peerwatch.alarms.errors import BadRequest, NotFound, ServiceError
from peerwatch.alarms.remediation import Remediator
from peerwatch.alarms.rendered import Rendered
from peerwatch.alarms.store import node_risk
from peerwatch.alarms.views import node_views
from peerwatch.service import metrics
from peerwatch.service.errors import Forbidden, Unauthorized
from peerwatch.service.runner import Service
from peerwatch.web import DashboardSettings, dashboard_router, docs_router
from peerwatch.web.paths import node_in_path

API_THREADS = 2  # requests handled at once; the rest wait their turn without taking the evaluation's time


class Change(BaseModel):
    """Who acknowledges or resolves an alarm, and why."""

    model_config = ConfigDict(extra="forbid")
    by: str = Field(default="api", min_length=1, max_length=200)
    note: str = Field(default="", max_length=2000)


class Remediate(BaseModel):
    """What to do about an alarm's node, who asks and why (the reason defaults to the alarm's diagnosis)."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["drain", "swap", "undrain"]
    by: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, min_length=1, max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$")


def fast_json(body: Any) -> Response:
    """``body`` as JSON by orjson, skipping FastAPI's encoder: a thousand alarms took 85 ms of the
    interpreter's lock through it, 2 ms this way (NaN is written as null, as ``as_json`` does)."""
    return Response(_json_bytes(body), media_type="application/json")


def _json_bytes(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def create_app(service: Service, *, run: bool = True) -> FastAPI:
    """The API over ``service``; with ``run`` the service's threads start and stop with the app."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Handlers are sync: they run in worker threads, which share the interpreter's lock with the
        # evaluation. With anyio's 40 a burst of requests left it one share in 40 (docs/benchmarks.md).
        to_thread.current_default_thread_limiter().total_tokens = API_THREADS
        if run:
            service.start()
        try:
            yield
        finally:
            if run:
                service.stop()

    # Swagger UI from our own static files (docs_router), not FastAPI's CDN; no ReDoc (CDN only)
    app = FastAPI(title="peerwatch", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    remediator = Remediator(service.config.remediation, service.store)
    alarm_lists = Rendered[bytes]()

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"error": exc.message, "status": exc.status}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return await service_error(_, BadRequest(f"bad request: {where}"))

    def token(authorization: Annotated[str | None, Header()] = None) -> None:
        if service.token is None:
            raise Forbidden("state changes are disabled: no api.token or api.token_file is configured")
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), service.token.encode()):
            raise Unauthorized("this needs the header 'Authorization: Bearer <token>' with the configured token")

    @app.get("/api/v1/alarms")
    def list_alarms(
        status: Literal["open", "all"] = "all",
        node: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> Response:
        """Alarms, newest first; ``status=open`` for the unresolved ones."""
        rows = service.store.alarms(open_only=status == "open", node=node, limit=limit)
        body = alarm_lists.get(
            (status, node, limit), rows, lambda: _json_bytes({"alarms": [r.as_json() for r in rows]})
        )
        return Response(body, media_type="application/json")

    @app.get("/api/v1/alarms/{alarm_id}")
    def get_alarm(alarm_id: str) -> Response:
        """One alarm with its evidence, lifecycle and the actions taken on it."""
        row = service.store.alarm(alarm_id)
        if row is None:
            raise NotFound(f"no alarm with id {alarm_id!r}")
        return fast_json({**row.as_json(), "actions": [a.as_json() for a in service.store.actions(alarm_id)]})

    @app.post("/api/v1/alarms/{alarm_id}/acknowledge", dependencies=[Depends(token)])
    def acknowledge(alarm_id: str, change: Change | None = None) -> dict[str, Any]:
        """Mark an open alarm as seen by someone: it stays open and keeps being sent, and Alertmanager is
        asked at once for a silence of it (by ``by``, comment ``note``) that ends when the alarm resolves."""
        change = change or Change()
        row = service.store.acknowledge(alarm_id, change.by, change.note, time.time())
        service.changed()
        return row.as_json()

    @app.post("/api/v1/alarms/{alarm_id}/resolve", dependencies=[Depends(token)])
    def resolve(alarm_id: str, change: Change | None = None) -> dict[str, Any]:
        """Close an alarm by hand; Alertmanager is told at once. The engine never reopens it."""
        change = change or Change()
        row = service.store.resolve(alarm_id, change.by, change.note, service.clock.now(), time.time())
        service.changed()
        return row.as_json()

    @app.post("/api/v1/alarms/{alarm_id}/remediate", dependencies=[Depends(token)])
    def remediate(alarm_id: str, body: Remediate) -> dict[str, Any]:
        """Drain the alarm's node, swap in the lowest-risk available spare, or undrain: the configured
        commands, only rendered in dry-run mode, run in execute mode; stored as an action either way."""
        views = node_views(service)
        return remediator.remediate(alarm_id, body.action, body.by, body.reason, views, time.time())

    @app.post("/api/v1/spares/{node:node}/release", dependencies=[Depends(token)])
    def release_spare(request: Request, node: str, change: Change | None = None) -> dict[str, Any]:
        """Give an in-use or quarantined spare back to the pool as available (404 if not a spare, 409 if
        available already); stored as a ``release`` action. No command is run."""
        node = node_in_path(request, "/api/v1/spares/", "/release")
        change = change or Change()
        action = spares.release(service.store, node, change.by, change.note, time.time())
        return {**action.as_json(), "spare": node, "state": spares.AVAILABLE}

    @app.post("/api/v1/spares/{node:node}/quarantine", dependencies=[Depends(token)])
    def quarantine_spare(request: Request, node: str, change: Change | None = None) -> dict[str, Any]:
        """Stop offering an available spare for swaps (404 if not a spare, 409 if not available); stored
        as a ``quarantine`` action. ``release`` trusts it again."""
        node = node_in_path(request, "/api/v1/spares/", "/quarantine")
        change = change or Change()
        action = spares.quarantine(service.store, node, change.by, change.note, time.time())
        return {**action.as_json(), "spare": node, "state": spares.QUARANTINED}

    @app.get("/api/v1/actions")
    def list_actions(alarm_id: str | None = None) -> Response:
        """Every action taken (acknowledge, resolve, drain, swap, undrain, release, quarantine), oldest first."""
        return fast_json({"actions": [a.as_json() for a in service.store.actions(alarm_id)]})

    @app.get("/api/v1/nodes")
    def list_nodes() -> Response:
        """Every node seen, its open alarms, latest scores, lemon risk and spare-pool state."""
        return fast_json({"nodes": node_views(service)})

    @app.get("/metrics", response_class=PlainTextResponse)
    def prometheus_metrics() -> PlainTextResponse:
        """Scores, risk, open alarms and peerwatch's own health in the Prometheus text format."""
        open_alarms = service.store.alarms(open_only=True, limit=100_000)
        risk = node_risk(
            service.store.alarms(limit=100_000), (n.node for n in service.store.nodes()), service.clock.now()
        )
        text = metrics.render(service.health, open_alarms, risk)
        return PlainTextResponse(text, media_type=metrics.CONTENT_TYPE)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        """200 while the service runs (blind or not: the blind alarm says so); 503 when a thread died."""
        body = service.status()
        return JSONResponse(body, status_code=200 if body["status"] != "failed" else 503)

    @app.get("/")
    def index() -> dict[str, Any]:
        return {
            "peerwatch": __version__,
            "api": [
                "/api/v1/alarms",
                "/api/v1/alarms/{id}",
                "/api/v1/actions",
                "/api/v1/nodes",
                "/metrics",
                "/healthz",
                "/docs",
            ],
        }

    app.include_router(dashboard_router(service, dashboard_settings(service)))
    app.include_router(docs_router(app.openapi_url or "/openapi.json"))
    return app


def dashboard_settings(service: Service) -> DashboardSettings:
    """The configuration values the dashboard obeys or shows."""
    settings = DashboardSettings(service.config.step, service.config.window, service.token is not None)
    am = service.config.alertmanager
    return settings if am is None else replace(settings, runbook_url=am.runbook_url)
