"""The live service's cells: from the sample buffer, the latest sample of each series in each step
not yet judged, per family, for the framer (frames/framer.py) that ``peerwatch analyze`` uses too.

The rules are the recording's (frames/__init__.py): ``plausible`` samples only, step ``step_of`` a sample's
time, ``latest_in_cells`` of several, and times kept as the grid step plus a float32 offset, as the
recording's grid stores them, so that rates come out equal to the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from peerwatch.frames import FUTURE_SLACK, latest_in_cells, plausible, step_of
from peerwatch.frames.buffer import SampleBuffer
from peerwatch.frames.frame_store import Cells
from peerwatch.model import ProblemLog, SeriesKey

IntArray = npt.NDArray[np.int64]


@dataclass
class _Family:
    index: int
    declared: str | None
    keys: list[SeriesKey] = field(default_factory=list)  # by the family's own id, in buffer order


class LiveCells:
    """Reads each chunk of steps' cells from the buffer; series keep their family ids for good."""

    def __init__(self, step: float, problems: ProblemLog | None = None) -> None:
        self.step = step
        self.problems = problems if problems is not None else ProblemLog(limit=20)
        self._families: dict[str, _Family] = {}
        self._names: list[str] = []  # family index -> name
        self._family: IntArray = np.zeros(0, dtype=np.int64)  # buffer series id -> family index
        self._local: IntArray = np.zeros(0, dtype=np.int64)  # buffer series id -> id within its family

    def _register(self, buffer: SampleBuffer, stop: int) -> None:
        """Give the buffer's series with ids below ``stop`` not yet placed an id in their family."""
        start = self._family.size
        if stop <= start:
            return
        family, local = np.zeros(stop - start, dtype=np.int64), np.zeros(stop - start, dtype=np.int64)
        for i, (key, mtype) in enumerate(buffer.series_of(start, stop)):
            fam = self._families.get(key.name)
            if fam is None:
                fam = self._families[key.name] = _Family(len(self._names), mtype)
                self._names.append(key.name)
            fam.declared = fam.declared or mtype
            family[i], local[i] = fam.index, len(fam.keys)
            fam.keys.append(key)
        self._family, self._local = np.r_[self._family, family], np.r_[self._local, local]

    def cells(self, buffer: SampleBuffer, first: int, last: int, now: float) -> dict[str, Cells]:
        """The cells of steps ``first..last`` of every family with a sample there."""
        width = last - first + 1
        ids, ts, vals = buffer.between((first - 2) * self.step, (last + 1) * self.step)
        keep = plausible(ts, vals, now + FUTURE_SLACK)
        if not keep.all():
            self.problems.add("samples", f"{int((~keep).sum())} non-finite or impossibly timed samples dropped")
            ids, ts, vals = ids[keep], ts[keep], vals[keep]
        k = step_of(ts, self.step)
        inside = (k >= first) & (k <= last)
        ids, ts, vals, k = ids[inside], ts[inside], vals[inside], k[inside]
        self._register(buffer, int(ids.max(initial=-1)) + 1)
        won, _, _ = latest_in_cells(ids * width + (k - first), ts, vals)
        ids, ts, vals, k = ids[won], ts[won], vals[won], k[won]
        grid = k.astype(np.float64) * self.step
        times = grid + (ts - grid).astype(np.float32).astype(np.float64)
        fam_of = self._family[ids]
        by_family = np.argsort(fam_of, kind="stable")
        bounds = np.flatnonzero(np.diff(fam_of[by_family], prepend=-1, append=-1))
        out: dict[str, Cells] = {}
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            pick = by_family[a:b]
            name = self._names[int(fam_of[pick[0]])]
            fam = self._families[name]
            local = self._local[ids[pick]]
            rows, row = np.unique(local, return_inverse=True)
            values = np.full((rows.size, width), np.nan)
            at = np.full((rows.size, width), np.nan)
            cols = k[pick] - first
            values[row, cols], at[row, cols] = vals[pick], times[pick]
            out[name] = Cells(ids=rows, values=values, times=at, declared=fam.declared, key_of=fam.keys.__getitem__)
        return out
