"""The dashboard: HTML pages over the live service (cluster heat map, alarms, nodes, catalogue, spares)."""

from peerwatch.web.routes import PREFIX, dashboard_router

__all__ = ["PREFIX", "dashboard_router"]
