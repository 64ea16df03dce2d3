"""What the dashboard plots and the catalogue page reads: the frames the engine judged, kept over the window.

The engine keeps only its own running state, and the sample buffer forgets what is judged; the
node page still plots each deviating metric against its peers over the window. So each judged
frame is kept here as float32, at most ``points`` steps over the window (every fourth step at 30 s
over 2 h, a point every 2 minutes): a plot needs no finer grid, and at 1,000 nodes the full grid
would take a gigabyte.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from peerwatch.frames import Frame


@dataclass
class _Kept:
    frame: Frame  # the newest chunk's frame: keys, nodes, kind (its values are not used)
    values: npt.NDArray[np.float32]  # (rows, capacity) ring of kept steps


class FrameHistory:
    """The last ``window`` seconds of judged frames on a grid of ``step`` x stride; thread-safe."""

    def __init__(self, step: float, window: float, points: int = 60) -> None:
        self.step = step
        self.stride = max(1, math.ceil(window / step / points))
        self.capacity = max(1, math.ceil(window / step / self.stride))
        self._slots = np.full(self.capacity, -1, dtype=np.int64)  # the step each slot holds
        self._kept: dict[str, _Kept] = {}
        self._lock = threading.Lock()

    @property
    def newest(self) -> float | None:
        with self._lock:
            k = int(self._slots.max())
        return None if k < 0 else k * self.step

    def add(self, frames: Mapping[str, Frame]) -> None:
        """Keep the steps of these frames (one chunk) that fall on the history's grid."""
        if not frames:
            return
        any_frame = next(iter(frames.values()))
        first = round(any_frame.start / self.step)
        cols = [j for j in range(any_frame.steps) if (first + j) % self.stride == 0]
        with self._lock:
            for name, frame in frames.items():
                kept = self._kept.get(name)
                if kept is None:
                    kept = self._kept[name] = _Kept(frame, np.full((0, self.capacity), np.nan, dtype=np.float32))
                kept.frame = frame
                if kept.values.shape[0] < len(frame.keys):
                    grown = np.full((len(frame.keys), self.capacity), np.nan, dtype=np.float32)
                    grown[: kept.values.shape[0]] = kept.values
                    kept.values = grown
            for j in cols:
                k = first + j
                slot = (k // self.stride) % self.capacity
                self._slots[slot] = k
                for name, kept in self._kept.items():
                    kept.values[:, slot] = np.nan
                    if name in frames:
                        kept.values[: len(frames[name].keys), slot] = frames[name].values[:, j]

    def frame(self, name: str, start: float, end: float) -> Frame | None:
        """The kept steps of one frame in ``[start, end]`` on the history's grid (None if none)."""
        with self._lock:
            kept = self._kept.get(name)
            if kept is None:
                return None
            return self._frame(kept, start, end)

    def frames(self, start: float, end: float) -> dict[str, Frame]:
        with self._lock:
            out = {name: self._frame(kept, start, end) for name, kept in self._kept.items()}
        return {name: f for name, f in out.items() if f is not None}

    def _frame(self, kept: _Kept, start: float, end: float) -> Frame | None:
        times = self._slots * self.step
        held = np.flatnonzero((self._slots >= 0) & (times >= start) & (times <= end))
        if not held.size:
            return None
        ks = self._slots[held]
        lo, hi = int(ks.min()), int(ks.max())
        values = np.full((kept.values.shape[0], (hi - lo) // self.stride + 1), np.nan)
        values[:, (ks - lo) // self.stride] = kept.values[:, held]
        return replace(kept.frame, start=lo * self.step, step=self.step * self.stride, values=values)
