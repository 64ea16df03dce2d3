"""What the dashboard reads of the running service: read-only Protocols and the configuration values
it needs, so that web imports nothing from ``service`` (the service mounts web, not the reverse).

``service.runner.Service`` implements :class:`Dashboarded`; ``service/app.py`` fills
:class:`DashboardSettings` from the service's configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from peerwatch.alarms.state import LiveState
from peerwatch.frames import Frame


class FrameWindow(Protocol):
    """The judged frames kept over the window, on a grid of ``step`` (``frames/history.py``)."""

    @property
    def step(self) -> float: ...

    @property
    def newest(self) -> float | None:
        """Data time of the newest kept step (None before the first)."""
        ...

    def frame(self, name: str, start: float, end: float) -> Frame | None:
        """One frame's kept steps in ``[start, end]`` (None if none)."""
        ...

    def frames(self, start: float, end: float) -> dict[str, Frame]:
        """Every frame's kept steps in ``[start, end]``."""
        ...


class Dashboarded(LiveState, Protocol):
    """The node views' part of the service, and the judged frames, the last evaluated step, the status."""

    @property
    def history(self) -> FrameWindow: ...

    @property
    def evaluated_until(self) -> float | None: ...

    def status(self) -> dict[str, object]:
        """What ``/healthz`` answers: ``status`` and ``evaluated_until`` among others."""
        ...


def _no_runbook(diagnosis: str) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """The configuration values the dashboard obeys or shows."""

    step: float  # seconds between evaluations: pages refresh at this pace
    window: float  # seconds of judged frames the plots can reach
    changes_allowed: bool = False  # a token is configured: the alarm page offers acknowledge/resolve
    runbook_url: Callable[[str], str | None] = _no_runbook  # a diagnosis' runbook (alertmanager.runbook_base)
