"""Data time: the time the metrics speak of, which runs faster than wall time in a demo or a replay.

``data = start + (wall - origin) * speed``. The real clock (``speed`` 1, ``start == origin``) is the
identity. A replay or a demo maps wall time onto a recorded or simulated run, so the same service
code judges live data and time-compressed runs alike.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Clock:
    """Maps wall time (epoch seconds) to data time and back."""

    start: float = 0.0
    origin: float = 0.0
    speed: float = 1.0

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError(f"clock speed must be positive, got {self.speed}")

    @property
    def real(self) -> bool:
        """True when data time is wall time."""
        return self.speed == 1.0 and self.start == self.origin

    def now(self) -> float:
        """Data time now."""
        return self.data(time.time())

    def data(self, wall: float) -> float:
        return self.start + (wall - self.origin) * self.speed

    def wall(self, data: float) -> float:
        return self.origin + (data - self.start) / self.speed

    def wait_until(self, data_ts: float, stop: threading.Event) -> bool:
        """Sleep until data time ``data_ts``; False if ``stop`` was set first."""
        while not stop.is_set():
            left = self.wall(data_ts) - time.time()
            if left <= 0:
                return True
            stop.wait(min(left, 1.0))
        return False
