"""Frames: samples aligned to a step grid, one (series × steps) array per metric.

Step ``k`` stands for time ``k * step`` and holds the last sample in ``(k*step - step, k*step]``,
so every exporter's own scrape phase and millisecond jitter land on the same grid without joining
on exact timestamps. A step with no sample is NaN, never 0. Counters become per-second rates
between consecutive samples, with resets (a drop) counted as a restart from zero.
The builder keeps only the aligned arrays, so memory follows the frames, not the input size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray, ProblemLog, SeriesBlock, SeriesKey, node_of

Kind = Literal["gauge", "rate"]
EARLIEST_TS = 946_684_800.0  # 2000-01-01: anything older is a unit mistake, not data
FUTURE_SLACK = 86_400.0  # accept clocks up to a day ahead of ours


def declared_kind(name: str, declared_type: str | None) -> Kind:
    """Default rule: declared counters and histogram/summary parts become rates."""
    if declared_type == "counter":
        return "rate"
    if declared_type in ("histogram", "summary", "gaugehistogram") and name.endswith(("_bucket", "_sum", "_count")):
        return "rate" if declared_type != "gaugehistogram" else "gauge"
    return "gauge"


@dataclass(frozen=True, eq=False)
class Frame:
    """One metric on the step grid: ``values[i, j]`` is series ``keys[i]`` at ``timestamps[j]``."""

    name: str
    kind: Kind
    start: float  # time of the first step
    step: float
    keys: tuple[SeriesKey, ...]
    nodes: tuple[str, ...]
    values: FloatArray  # (series, steps); NaN = no sample
    last_seen: FloatArray  # (series,) time of the newest raw sample
    declared_type: str | None = None

    @property
    def steps(self) -> int:
        return int(self.values.shape[1])

    @property
    def timestamps(self) -> FloatArray:
        return self.start + self.step * np.arange(self.steps, dtype=np.float64)

    def stale(self, at: float, after: float = 300.0) -> npt.NDArray[np.bool_]:
        """Series with no sample in the ``after`` seconds up to ``at`` (Prometheus' 5-minute rule)."""
        return ~(self.last_seen > at - after)


@dataclass
class _Rows:
    """Growable aligned storage of one metric: values and the sample's offset within its step."""

    k0: int
    vals: FloatArray
    offs: npt.NDArray[np.float32]  # sample time minus step time, in (-step, 0]; NaN = empty cell
    last: list[float] = field(default_factory=list)
    index: dict[SeriesKey, int] = field(default_factory=dict)
    declared: str | None = None

    def row(self, key: SeriesKey) -> int:
        r = self.index.get(key)
        if r is None:
            r = self.index[key] = len(self.index)
            self.last.append(-np.inf)
            if r >= self.vals.shape[0]:
                self._resize(rows=max(8, 2 * self.vals.shape[0]))
        return r

    def cover(self, kmin: int, kmax: int) -> None:
        """Make room for steps ``kmin..kmax``, at least doubling on the side that grows."""
        width = self.vals.shape[1]
        lo, hi = self.k0, self.k0 + width
        if kmin < lo:
            lo = min(kmin, lo - width)
        if kmax >= hi:
            hi = max(kmax + 1, hi + width)
        if (lo, hi) != (self.k0, self.k0 + width):
            self._resize(cols=(lo, hi))

    def _resize(self, rows: int | None = None, cols: tuple[int, int] | None = None) -> None:
        nrows = rows or self.vals.shape[0]
        lo, hi = cols or (self.k0, self.k0 + self.vals.shape[1])
        vals = np.full((nrows, hi - lo), np.nan)
        offs = np.full((nrows, hi - lo), np.nan, dtype=np.float32)
        r, c = self.vals.shape
        vals[:r, self.k0 - lo : self.k0 - lo + c] = self.vals
        offs[:r, self.k0 - lo : self.k0 - lo + c] = self.offs
        self.k0, self.vals, self.offs = lo, vals, offs


class FrameBuilder:
    """Accumulates series blocks into aligned frames.

    ``kind_of(name, declared_type)`` decides which metrics are counters (default: the declared
    type; the catalogue knows better). ``max_steps`` bounds the grid so that a far-future or
    ancient timestamp cannot blow up memory; such samples are reported and dropped.
    """

    def __init__(
        self,
        step: float = 30.0,
        *,
        problems: ProblemLog | None = None,
        kind_of: Callable[[str, str | None], Kind] = declared_kind,
        node_labels: tuple[str, ...] = ("node", "hostname", "Hostname"),
        node_labels_for: Callable[[str, tuple[str, ...]], tuple[str, ...]] | None = None,
        max_steps: int = 200_000,
        now: float | None = None,
    ) -> None:
        self.step = float(step)
        self.problems = problems if problems is not None else ProblemLog()
        self.kind_of = kind_of
        self.node_labels = node_labels
        # Some families use a node label for something else (node_exporter's NUMA ``node``): the catalogue knows.
        self.node_labels_for = node_labels_for or (lambda _name, labels: labels)
        self.max_steps = max_steps
        self.latest = (time.time() if now is None else now) + FUTURE_SLACK
        self.samples = 0
        self._metrics: dict[str, _Rows] = {}
        self._kmin: int | None = None
        self._kmax: int | None = None

    def add_all(self, blocks: Iterable[SeriesBlock]) -> FrameBuilder:
        for block in blocks:
            self.add(block)
        return self

    def add(self, block: SeriesBlock) -> None:
        ts, vals = block.timestamps, block.values
        if ts.size == 0:
            return
        ok = (ts >= EARLIEST_TS) & (ts <= self.latest)  # False for NaN too
        finite = np.isfinite(vals)
        if not (ok.all() and finite.all()):
            ts, vals = self._clean(block.key, ts, vals, ok, finite)
            if ts.size == 0:
                return
        k = np.ceil(ts / self.step).astype(np.int64)
        k, ts, vals = self._within_span(block.key, k, ts, vals)
        if k.size > 1:
            if not (ts[1:] >= ts[:-1]).all():
                order = np.lexsort((ts, k))
                k, ts, vals = k[order], ts[order], vals[order]
            last = np.ones(k.size, dtype=np.bool_)  # the last sample of each step wins
            np.not_equal(k[1:], k[:-1], out=last[:-1])
            if not last.all():
                k, ts, vals = k[last], ts[last], vals[last]
        if k.size:
            self._write(block, k, ts, vals)

    def _clean(
        self, key: SeriesKey, ts: FloatArray, vals: FloatArray, ok: npt.NDArray[np.bool_], finite: npt.NDArray[np.bool_]
    ) -> tuple[FloatArray, FloatArray]:
        if not ok.all():
            self.problems.add(str(key), f"{int((~ok).sum())} samples with impossible timestamps dropped")
        infinite = int(np.isinf(vals).sum())
        if infinite:
            self.problems.add(str(key), f"{infinite} infinite values kept as missing")
        keep = ok & finite  # NaN values are staleness markers or gaps: missing, not data
        return ts[keep], vals[keep]

    def _within_span(
        self, key: SeriesKey, k: npt.NDArray[np.int64], ts: FloatArray, vals: FloatArray
    ) -> tuple[npt.NDArray[np.int64], FloatArray, FloatArray]:
        lo = int(k.min()) if self._kmin is None else min(self._kmin, int(k.min()))
        hi = int(k.max()) if self._kmax is None else max(self._kmax, int(k.max()))
        if hi - lo < self.max_steps:
            self._kmin, self._kmax = lo, hi
            return k, ts, vals
        # Keep the samples that fit next to what is already there; the grid starts at the first data seen.
        base = int(k.min()) if self._kmin is None else self._kmin
        fits = (k >= base) & (k < base + self.max_steps)
        if self._kmax is not None:
            fits &= k > self._kmax - self.max_steps
        self.problems.add(str(key), f"{int((~fits).sum())} samples outside a {self.max_steps}-step window dropped")
        k, ts, vals = k[fits], ts[fits], vals[fits]
        if k.size:
            self._kmin = min(base, int(k.min()))
            self._kmax = max(self._kmax if self._kmax is not None else int(k.max()), int(k.max()))
        return k, ts, vals

    def _write(self, block: SeriesBlock, k: npt.NDArray[np.int64], ts: FloatArray, vals: FloatArray) -> None:
        rows = self._metrics.get(block.key.name)
        if rows is None:
            width = max(16, int(k[-1] - k[0]) + 1)
            rows = self._metrics[block.key.name] = _Rows(
                int(k[0]), np.full((8, width), np.nan), np.full((8, width), np.nan, dtype=np.float32)
            )
        if rows.declared is None and block.mtype:
            rows.declared = block.mtype
        r = rows.row(block.key)
        rows.cover(int(k[0]), int(k[-1]))
        offs = (ts - k * self.step).astype(np.float32)
        a, b = int(k[0]) - rows.k0, int(k[-1]) - rows.k0 + 1
        # Blocks usually cover consecutive steps: slices are much cheaper than fancy indexing.
        cols: slice | npt.NDArray[np.int64] = slice(a, b) if b - a == k.size else k - rows.k0
        held = rows.offs[r, cols]
        newer = np.isnan(held) | (offs >= held)  # out-of-order input: the later sample still wins
        if newer.all():
            rows.vals[r, cols], rows.offs[r, cols] = vals, offs
        else:
            at = (np.arange(a, b) if isinstance(cols, slice) else cols)[newer]
            rows.vals[r, at], rows.offs[r, at] = vals[newer], offs[newer]
        rows.last[r] = max(rows.last[r], float(ts[-1]))
        self.samples += int(ts.size)

    def build(self) -> dict[str, Frame]:
        """Frames of everything added, all on one grid from the first to the last step seen."""
        if self._kmin is None or self._kmax is None:
            return {}
        lo, n = self._kmin, self._kmax - self._kmin + 1
        frames: dict[str, Frame] = {}
        for name, rows in self._metrics.items():
            nrows = len(rows.index)
            vals = np.full((nrows, n), np.nan)
            offs = np.full((nrows, n), np.nan, dtype=np.float32)
            c0 = rows.k0 - lo
            a, b = max(0, c0), min(n, c0 + rows.vals.shape[1])
            vals[:, a:b] = rows.vals[:nrows, a - c0 : b - c0]
            offs[:, a:b] = rows.offs[:nrows, a - c0 : b - c0]
            kind = self.kind_of(name, rows.declared)
            if kind == "rate":
                times = (lo + np.arange(n, dtype=np.float64)) * self.step + offs.astype(np.float64)
                vals = counter_rates(vals, times)
            keys = tuple(rows.index)
            node_labels = self.node_labels_for(name, self.node_labels)
            frames[name] = Frame(
                name=name,
                kind=kind,
                start=lo * self.step,
                step=self.step,
                keys=keys,
                nodes=tuple(node_of(dict(key.labels), node_labels) for key in keys),
                values=vals,
                last_seen=np.array(rows.last, dtype=np.float64),
                declared_type=rows.declared,
            )
        return frames


def counter_rates(values: FloatArray, times: FloatArray, max_gap: float = 600.0) -> FloatArray:
    """Per-second increase between each sample and the previous one of its row (NaN where unknown).

    A drop means the counter restarted from zero, so the increase is the new value (Prometheus'
    ``rate`` rule). Over a gap longer than ``max_gap`` seconds the rate is unknown.
    """
    n = values.shape[1]
    valid = ~np.isnan(values)
    last_valid = np.maximum.accumulate(np.where(valid, np.arange(n), -1), axis=1)
    prev = np.full_like(last_valid, -1)
    prev[:, 1:] = last_valid[:, :-1]
    has_prev = valid & (prev >= 0)
    rows = np.nonzero(has_prev)
    cur_v, cur_t = values[rows], times[rows]
    prev_v, prev_t = values[rows[0], prev[rows]], times[rows[0], prev[rows]]
    delta = cur_v - prev_v
    delta = np.where(delta < 0, cur_v, delta)
    dt = cur_t - prev_t
    rate = np.where((dt > 0) & (dt <= max_gap), delta / np.where(dt > 0, dt, 1.0), np.nan)
    out = np.full(values.shape, np.nan)
    out[rows] = rate
    return out
