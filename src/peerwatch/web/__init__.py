"""The dashboard: HTML pages over the live service (cluster heat map, alarms, nodes, catalogue, spares)."""

from peerwatch.web.apidocs import docs_router
from peerwatch.web.routes import PREFIX, dashboard_router
from peerwatch.web.state import DashboardSettings

__all__ = ["PREFIX", "DashboardSettings", "dashboard_router", "docs_router"]
