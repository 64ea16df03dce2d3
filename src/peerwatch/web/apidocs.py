"""Swagger UI at ``/docs`` from peerwatch's own static files: FastAPI's default loads it from a CDN,
which leaves the page blank on a cluster without internet."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

from peerwatch.web.routes import PREFIX


def docs_router(openapi_url: str = "/openapi.json", title: str = "peerwatch API", prefix: str = PREFIX) -> APIRouter:
    """``GET /docs``: Swagger UI (vendored: static/VENDORED.md) over ``openapi_url``; mount the app
    with ``docs_url=None``."""
    router = APIRouter()

    @router.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=f"{prefix}/static/swagger-ui-bundle.js",
            swagger_css_url=f"{prefix}/static/swagger-ui.css",
            swagger_favicon_url="data:,",
            # the validator badge would send the spec's URL to validator.swagger.io
            swagger_ui_parameters={"validatorUrl": None},
        )

    return router
