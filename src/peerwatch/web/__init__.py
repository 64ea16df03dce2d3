"""The dashboard: HTML pages over the live service (cluster heat map, alarms, nodes, catalogue, spares)."""

from peerwatch.web.apidocs import docs_router
from peerwatch.web.routes import PREFIX, dashboard_router

__all__ = ["PREFIX", "dashboard_router", "docs_router"]
