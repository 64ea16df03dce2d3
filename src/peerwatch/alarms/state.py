"""What the node views read of the running service: a read-only Protocol the service implements.

The alarms room and the dashboard name this, never ``service.runner.Service``, so they sit below
the service; the service passes itself in (``node_views(service)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from peerwatch.alarms.store import Store
from peerwatch.detect.workload import WorkloadGroup
from peerwatch.model import ScoreKey


class LiveState(Protocol):
    """The store, the last evaluation's scores and workload groups, and data time now."""

    @property
    def store(self) -> Store: ...

    @property
    def scores(self) -> Mapping[ScoreKey, float]:
        """The strongest finding per (node, component, metric) at the last evaluated step."""
        ...

    @property
    def groups(self) -> Mapping[str, WorkloadGroup]:
        """Node -> its workload group at the last evaluated step."""
        ...

    def now(self) -> float:
        """Data time now."""
        ...
