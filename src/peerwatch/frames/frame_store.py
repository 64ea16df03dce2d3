"""Where a metric's aligned samples wait until frames are built: the grid in blocks of steps.

Storage is allocated one block of ``BLOCK`` steps at a time, only where samples are, so one sample
60 days away from an hour of data costs one block, not 60 days of grid (issue 18). Frames are cut
from the blocks along the stretches of steps that hold data (``Span``), gaps left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray, SeriesKey

IntArray = npt.NDArray[np.int64]
A = TypeVar("A", bound=np.generic)
BLOCK_BITS = 5  # a power of two, so that a step's block and place in it are a shift and a mask
BLOCK = 1 << BLOCK_BITS  # steps per block: small, so a stray sample costs little; large enough to batch numpy work


def grow(a: npt.NDArray[A], rows: int, fill: object) -> npt.NDArray[A]:
    """``a`` with at least ``rows`` rows along axis 0, new ones set to ``fill``."""
    if a.shape[0] >= rows:
        return a
    out = np.empty((rows, *a.shape[1:]), dtype=a.dtype)
    out[: a.shape[0]] = a
    out[a.shape[0] :] = fill
    return out


@dataclass(frozen=True)
class Span:
    """A stretch of grid steps ``lo..hi`` (inclusive) with no gap longer than the split gap in it."""

    lo: int
    hi: int
    samples: int

    @property
    def steps(self) -> int:
        return self.hi - self.lo + 1


def spans_of(steps: IntArray, counts: IntArray, gap: int | None) -> list[Span]:
    """The stretches of the sorted occupied ``steps`` (samples per step in ``counts``) split where
    more than ``gap`` steps separate two of them (never split when ``gap`` is None)."""
    if not steps.size:
        return []
    cuts = np.flatnonzero(np.diff(steps) > gap) + 1 if gap is not None else np.zeros(0, dtype=np.int64)
    bounds = np.r_[0, cuts, steps.size]
    return [
        Span(int(steps[a]), int(steps[b - 1]), int(counts[a:b].sum()))
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
    ]


@dataclass(frozen=True, eq=False)
class Cells:
    """One family's samples on a chunk's steps: per series (the source's stable ``ids``), the latest
    sample of each step (NaN: none) and its time."""

    ids: IntArray  # (rows,)
    values: FloatArray  # (rows, steps)
    times: FloatArray  # (rows, steps)
    declared: str | None
    key_of: Callable[[int], SeriesKey]


@dataclass(frozen=True)
class Clashes:
    """Samples at the time of one already held, with another value: row, step, offset in the step,
    the value held and the value read."""

    rows: IntArray
    steps: IntArray
    offs: npt.NDArray[np.float32]
    held: FloatArray
    read: FloatArray

    def __iter__(self) -> Iterator[tuple[int, int, float, float, float]]:
        return zip(
            self.rows.tolist(), self.steps.tolist(), self.offs.tolist(), self.held.tolist(), self.read.tolist(),
            strict=True,
        )  # fmt: skip

    @staticmethod
    def none() -> Clashes:
        empty = np.zeros(0)
        return Clashes(empty.astype(np.int64), empty.astype(np.int64), empty.astype(np.float32), empty, empty)


@dataclass
class Rows:
    """One metric's samples on the grid: ``vals``/``offs`` hold a block of ``BLOCK`` columns per
    slot, ``blocks[slot]`` the block's number (step // BLOCK); rows are series in arrival order.

    Blocks wait in ``pending`` and are written in batches, so the per-block cost is a few list
    appends and the numpy work is done once per batch for many series at a time.
    """

    vals: FloatArray = field(default_factory=lambda: np.full((0, 0), np.nan))
    offs: npt.NDArray[np.float32] = field(default_factory=lambda: np.full((0, 0), np.nan, dtype=np.float32))
    index: dict[SeriesKey, int] = field(default_factory=dict)
    _keys: list[SeriesKey] = field(default_factory=list)  # by row
    blocks: list[int] = field(default_factory=list)
    slot_of: dict[int, int] = field(default_factory=dict)
    declared: str | None = None
    pending: list[tuple[int, FloatArray, FloatArray]] = field(default_factory=list)

    def row(self, key: SeriesKey) -> int:
        r = self.index.get(key)
        if r is None:
            r = self.index[key] = len(self.index)
            self._keys.append(key)
        return r

    def keys(self) -> list[SeriesKey]:
        """The series' keys by row."""
        return self._keys

    def columns(self, k: IntArray) -> IntArray:
        """The storage column of each step in ``k``, allocating blocks (and room for every row)."""
        block = k >> BLOCK_BITS  # k // BLOCK, 3x faster on int64
        lo, hi = int(block.min()), int(block.max())
        if hi - lo < 1 << 16:  # the usual batch: a table over its blocks, no sort
            seen = np.zeros(hi - lo + 1, dtype=np.bool_)
            seen[block - lo] = True
            uniq = np.flatnonzero(seen) + lo
        else:  # samples far apart in one batch
            uniq = np.unique(block)
        for b in uniq.tolist():
            if b not in self.slot_of:
                self.slot_of[b] = len(self.blocks)
                self.blocks.append(b)
        self._reserve()
        slots = np.array([self.slot_of[b] for b in uniq.tolist()], dtype=np.int64)
        if hi - lo < 1 << 16:
            table = np.zeros(hi - lo + 1, dtype=np.int64)
            table[uniq - lo] = slots
            slot = table[block - lo]
        else:
            slot = slots[np.searchsorted(uniq, block)]
        out: IntArray = (slot << BLOCK_BITS) | (k & (BLOCK - 1))
        return out

    def _reserve(self) -> None:
        """Room for every row and block, at least doubling what grows."""
        rows, width = self.vals.shape
        need_rows, need_width = len(self.index), len(self.blocks) * BLOCK
        if need_rows <= rows and need_width <= width:
            return
        nrows = rows if need_rows <= rows else max(need_rows, 2 * rows, 8)
        nwidth = width if need_width <= width else max(need_width, 2 * width)
        vals = np.full((nrows, nwidth), np.nan)
        offs = np.full((nrows, nwidth), np.nan, dtype=np.float32)
        vals[:rows, :width] = self.vals
        offs[:rows, :width] = self.offs
        self.vals, self.offs = vals, offs

    def trimmed(self) -> Rows:
        """These rows without the room kept for growth (what a child process sends back)."""
        n, width = len(self.index), len(self.blocks) * BLOCK
        return Rows(
            self.vals[:n, :width].copy(), self.offs[:n, :width].copy(), self.index, self._keys, self.blocks,
            self.slot_of, self.declared,
        )  # fmt: skip

    def absorb(self, other: Rows) -> tuple[IntArray, Clashes]:
        """Write ``other``'s samples (read after these: a later part of a file) onto these rows, as
        if read here: the later of two samples in a step wins, and of two at one time, ``other``'s.
        Returns each of ``other``'s rows' row here, and its samples at the time of one held here
        with another value (conflicts, to be noted)."""
        before = len(self.index)
        rowmap = np.array([self.row(k) for k in other.index], dtype=np.int64)
        if self.declared is None:
            self.declared = other.declared
        if not other.blocks or not rowmap.size:
            self._reserve()
            return rowmap, Clashes.none()
        first = np.asarray(other.blocks, dtype=np.int64) * BLOCK
        cols = (self.columns(first)[:, None] + np.arange(BLOCK)).reshape(-1)  # other's columns, here
        ov, oo = other.vals[: rowmap.size, : cols.size], other.offs[: rowmap.size, : cols.size]
        new = rowmap >= before
        # Rows new here hold nothing yet: other's samples are copied as they are (one slice, as a rule).
        if new.all() and (cols == np.arange(cols[0], cols[0] + cols.size)).all():
            at: Any = (slice(before, len(self.index)), slice(cols[0], cols[0] + cols.size))
        else:
            at = np.ix_(rowmap[new], cols)
        self.vals[at] = ov[new]
        self.offs[at] = oo[new]
        if new.all():
            return rowmap, Clashes.none()
        old = ~new
        ov, oo = ov[old], oo[old]
        at = np.ix_(rowmap[old], cols)
        sv, so = self.vals[at], self.offs[at]
        newer = ~np.isnan(oo) & (np.isnan(so) | (oo >= so))
        self.vals[at] = np.where(newer, ov, sv)
        self.offs[at] = np.where(newer, oo, so)
        r, c = np.nonzero((oo == so) & (ov != sv))
        return rowmap, Clashes(rowmap[old][r], first[c // BLOCK] + c % BLOCK, oo[r, c], sv[r, c], ov[r, c])

    def occupied(self) -> tuple[IntArray, IntArray]:
        """The steps holding a sample of this metric, and how many samples each holds."""
        width = len(self.blocks) * BLOCK
        counts = (~np.isnan(self.vals[: len(self.index), :width])).sum(axis=0)
        cols = np.flatnonzero(counts)
        blocks = np.asarray(self.blocks, dtype=np.int64)
        steps: IntArray = blocks[cols // BLOCK] * BLOCK + cols % BLOCK
        return steps, counts[cols].astype(np.int64)

    def cut(self, span: Span) -> tuple[FloatArray, npt.NDArray[np.float32]] | None:
        """Values and offsets of every row on the steps of ``span`` (None if it holds none of this metric)."""
        n = span.steps
        colmap = np.full(n, -1, dtype=np.int64)
        for slot, b in enumerate(self.blocks):
            a, z = max(b * BLOCK, span.lo), min(b * BLOCK + BLOCK - 1, span.hi)
            if a <= z:
                colmap[a - span.lo : z - span.lo + 1] = slot * BLOCK + np.arange(a - b * BLOCK, z - b * BLOCK + 1)
        if (colmap < 0).all():
            return None
        nrows = len(self.index)
        take = np.maximum(colmap, 0)
        vals = self.vals[:nrows, take]
        offs = self.offs[:nrows, take]
        vals[:, colmap < 0] = np.nan
        offs[:, colmap < 0] = np.nan
        return vals, offs
