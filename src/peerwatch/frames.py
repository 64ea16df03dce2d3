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


def declared_kind(name: str, declared_type: str | None, values: FloatArray | None = None) -> Kind:
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
    """Growable aligned storage of one metric: values and the sample's offset within its step.

    Blocks wait in ``pending`` and are written in batches, so the per-block cost is a few list
    appends and the numpy work is done once per batch for many series at a time.
    """

    k0: int | None = None
    vals: FloatArray = field(default_factory=lambda: np.full((0, 0), np.nan))
    offs: npt.NDArray[np.float32] = field(default_factory=lambda: np.full((0, 0), np.nan, dtype=np.float32))
    last: list[float] = field(default_factory=list)
    index: dict[SeriesKey, int] = field(default_factory=dict)
    declared: str | None = None
    pending: list[tuple[int, FloatArray, FloatArray]] = field(default_factory=list)

    def row(self, key: SeriesKey) -> int:
        r = self.index.get(key)
        if r is None:
            r = self.index[key] = len(self.index)
            self.last.append(-np.inf)
        return r

    def reserve(self, kmin: int, kmax: int) -> None:
        """Room for every row and for steps ``kmin..kmax``, at least doubling what grows."""
        rows, width = self.vals.shape
        lo, hi = (kmin, kmax + 1) if self.k0 is None else (self.k0, self.k0 + width)
        if kmin < lo:
            lo = min(kmin, lo - width)
        if kmax >= hi:
            hi = max(kmax + 1, hi + width)
        nrows = max(rows, 8) if len(self.index) <= rows else max(len(self.index), 2 * rows)
        if (lo, hi, nrows) == (self.k0, self.k0 + width if self.k0 is not None else None, rows):
            return
        vals = np.full((nrows, hi - lo), np.nan)
        offs = np.full((nrows, hi - lo), np.nan, dtype=np.float32)
        if self.k0 is not None:
            vals[:rows, self.k0 - lo : self.k0 - lo + width] = self.vals
            offs[:rows, self.k0 - lo : self.k0 - lo + width] = self.offs
        self.k0, self.vals, self.offs = lo, vals, offs


class FrameBuilder:
    """Accumulates series blocks into aligned frames.

    ``kind_of(name, declared_type, raw_values)`` decides which metrics are counters (default: the
    declared type; the catalogue and the values' behaviour know better). ``max_steps`` bounds the
    grid so that an ancient timestamp cannot blow up memory; such samples are reported and dropped.
    """

    def __init__(
        self,
        step: float = 30.0,
        *,
        problems: ProblemLog | None = None,
        kind_of: Callable[[str, str | None, FloatArray], Kind] = declared_kind,
        node_labels: tuple[str, ...] = ("node", "hostname", "Hostname"),
        node_labels_for: Callable[[str, tuple[str, ...]], tuple[str, ...]] | None = None,
        max_steps: int = 200_000,
        now: float | None = None,
        batch: int = 1 << 20,
    ) -> None:
        self.step = float(step)
        self.problems = problems if problems is not None else ProblemLog()
        self.kind_of = kind_of
        self.node_labels = node_labels
        # Some families use a node label for something else (node_exporter's NUMA ``node``): the catalogue knows.
        self.node_labels_for = node_labels_for or (lambda _name, labels: labels)
        self.max_steps = max_steps
        self.latest = (time.time() if now is None else now) + FUTURE_SLACK
        self.batch = batch
        self.samples = 0
        self._pending = 0
        self._metrics: dict[str, _Rows] = {}
        self._kmin: int | None = None
        self._kmax: int | None = None

    def add_all(self, blocks: Iterable[SeriesBlock]) -> FrameBuilder:
        for block in blocks:
            self.add(block)
        return self

    def add(self, block: SeriesBlock) -> None:
        if not len(block):
            return
        rows = self._metrics.get(block.key.name)
        if rows is None:
            rows = self._metrics[block.key.name] = _Rows()
        if rows.declared is None and block.mtype:
            rows.declared = block.mtype
        rows.pending.append((rows.row(block.key), block.timestamps, block.values))
        self._pending += len(block)
        if self._pending >= self.batch:
            self.flush()

    def flush(self) -> None:
        """Write every pending block onto the grid."""
        for name, rows in self._metrics.items():
            if rows.pending:
                self._write(name, rows)
        self._pending = 0

    def _write(self, name: str, rows: _Rows) -> None:
        row_ids = np.array([r for r, _, _ in rows.pending], dtype=np.int64)
        lengths = np.array([len(t) for _, t, _ in rows.pending], dtype=np.int64)
        ts = np.concatenate([t for _, t, _ in rows.pending])
        vals = np.concatenate([v for _, _, v in rows.pending])
        rows.pending.clear()
        row = np.repeat(row_ids, lengths)
        keep = (ts >= EARLIEST_TS) & (ts <= self.latest) & np.isfinite(vals)  # NaN: staleness marker or gap
        if not keep.all():
            self._report(rows, row, ts, vals)
            row, ts, vals = row[keep], ts[keep], vals[keep]
        k = np.ceil(ts / self.step).astype(np.int64)
        fits = self._span(k)
        if not fits.all():
            bad = np.unique(row[~fits])
            self.problems.add(
                f"{name} ({len(bad)} series)",
                f"{int((~fits).sum())} samples outside a {self.max_steps}-step window dropped",
            )
            row, ts, vals, k = row[fits], ts[fits], vals[fits], k[fits]
        if not k.size:
            return
        rows.reserve(int(k.min()), int(k.max()))
        assert rows.k0 is not None
        width = rows.vals.shape[1]
        cell = row * width + (k - rows.k0)
        # Stable sort keeps arrival order within a cell; runs of sorted blocks make it near-linear.
        order = np.argsort(cell, kind="stable")
        cell, ts, vals = cell[order], ts[order], vals[order]
        last = np.ones(cell.size, dtype=np.bool_)
        np.not_equal(cell[1:], cell[:-1], out=last[:-1])
        if not last.all():  # several samples in one step: the latest wins, whatever the arrival order
            last = _latest_in_runs(cell, ts)
            cell, ts, vals = cell[last], ts[last], vals[last]
        offs = (ts - (cell % width + rows.k0) * self.step).astype(np.float32)
        flat_offs, flat_vals = rows.offs.reshape(-1), rows.vals.reshape(-1)
        held = flat_offs[cell]
        newer = np.isnan(held) | (offs >= held)  # a sample older than the one held loses
        flat_vals[cell[newer]] = vals[newer]
        flat_offs[cell[newer]] = offs[newer]
        # The newest sample of each row is the last of its run of cells.
        row_of = cell // width
        ends = np.ones(row_of.size, dtype=np.bool_)
        np.not_equal(row_of[1:], row_of[:-1], out=ends[:-1])
        for r, t in zip(row_of[ends].tolist(), ts[ends].tolist(), strict=True):
            rows.last[r] = max(rows.last[r], t)
        self.samples += int(ts.size)

    def _report(self, rows: _Rows, row: npt.NDArray[np.int64], ts: FloatArray, vals: FloatArray) -> None:
        keys = list(rows.index)
        for what, bad in (
            ("samples with impossible timestamps dropped", ~((ts >= EARLIEST_TS) & (ts <= self.latest))),
            ("infinite values kept as missing", np.isinf(vals)),
        ):
            if bad.any():
                ids, counts = np.unique(row[bad], return_counts=True)
                for r, n in zip(ids.tolist(), counts.tolist(), strict=True):
                    self.problems.add(str(keys[r]), f"{n} {what}")

    def _span(self, k: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which steps fit in ``max_steps`` next to the grid so far; the grid grows to hold them."""
        lo = int(k.min()) if self._kmin is None else min(self._kmin, int(k.min()))
        hi = int(k.max()) if self._kmax is None else max(self._kmax, int(k.max()))
        if hi - lo < self.max_steps:
            self._kmin, self._kmax = lo, hi
            return np.ones(k.size, dtype=np.bool_)
        # Keep the max_steps-wide window holding the most samples (and all of the grid so far).
        ks = np.sort(k)
        if self._kmin is None or self._kmax is None:
            starts = np.unique(ks)
        else:
            starts = np.unique(np.clip(ks, self._kmax - self.max_steps + 1, self._kmin))
        counts = np.searchsorted(ks, starts + self.max_steps) - np.searchsorted(ks, starts)
        first = int(starts[int(np.argmax(counts))])
        fits = (k >= first) & (k < first + self.max_steps)
        if fits.any():
            kept = k[fits]
            self._kmin = int(kept.min()) if self._kmin is None else min(self._kmin, int(kept.min()))
            self._kmax = int(kept.max()) if self._kmax is None else max(self._kmax, int(kept.max()))
        return fits

    def build(self) -> dict[str, Frame]:
        """Frames of everything added, all on one grid from the first to the last step seen."""
        self.flush()
        if self._kmin is None or self._kmax is None:
            return {}
        lo, n = self._kmin, self._kmax - self._kmin + 1
        frames: dict[str, Frame] = {}
        for name, rows in self._metrics.items():
            if rows.k0 is None:  # every sample was dropped
                continue
            nrows = len(rows.index)
            vals = np.full((nrows, n), np.nan)
            offs = np.full((nrows, n), np.nan, dtype=np.float32)
            c0 = rows.k0 - lo
            a, b = max(0, c0), min(n, c0 + rows.vals.shape[1])
            vals[:, a:b] = rows.vals[:nrows, a - c0 : b - c0]
            offs[:, a:b] = rows.offs[:nrows, a - c0 : b - c0]
            kind = self.kind_of(name, rows.declared, vals)
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


MIN_STEP = 30.0  # the detectors' step counts (continuity, warm-up) are set for steps of 30 s or more


def infer_step(blocks: Iterable[SeriesBlock], least: float = MIN_STEP) -> float:
    """The grid step for these samples: the scrape interval most series keep (the upper quartile of
    each series' median interval, so that a slower exporter is not half missing), at least ``least``,
    rounded to whole seconds. ``least`` when no series has two samples."""
    times: dict[SeriesKey, list[FloatArray]] = {}
    for block in blocks:
        times.setdefault(block.key, []).append(block.timestamps)
    intervals = []
    for parts in times.values():
        d = np.diff(np.sort(np.concatenate(parts)))
        d = d[d > 0]
        if d.size:
            intervals.append(float(np.median(d)))
    if not intervals:
        return least
    return max(least, float(np.ceil(np.percentile(intervals, 75, method="nearest") - 0.5)))


def _latest_in_runs(cell: npt.NDArray[np.int64], ts: FloatArray) -> npt.NDArray[np.int64]:
    """Index of the sample with the largest timestamp in each run of equal cells (the last such)."""
    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    run = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, cell.size]))
    best = ts == np.maximum.reduceat(ts, starts)[run]
    cand = np.flatnonzero(best)
    lasts = np.r_[run[cand][1:] != run[cand][:-1], True]
    return cand[lasts]


def previous_index(valid: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """For each cell, the column of the last valid cell before it in its row (-1 if none)."""
    n = valid.shape[1]
    last = np.maximum.accumulate(np.where(valid, np.arange(n), -1), axis=1)
    prev = np.full_like(last, -1)
    prev[:, 1:] = last[:, :-1]
    return prev


def previous_values(values: FloatArray) -> FloatArray:
    """The last present value before each step (NaN where none): missed scrapes are bridged."""
    prev = previous_index(~np.isnan(values))
    out: FloatArray = np.where(prev >= 0, np.take_along_axis(values, np.maximum(prev, 0), axis=1), np.nan)
    return out


def counter_rates(
    values: FloatArray, times: FloatArray, max_gap: float = 600.0, before: tuple[FloatArray, FloatArray] | None = None
) -> FloatArray:
    """Per-second increase between each sample and the previous one of its row (NaN where unknown).

    A drop means the counter restarted from zero, so the increase is the new value (Prometheus'
    ``rate`` rule). Over a gap longer than ``max_gap`` seconds the rate is unknown. ``before``: each
    row's last sample before these steps (value, time; NaN where none), as a stream carries it.
    """
    if before is not None:
        values = np.concatenate([before[0][:, None], values], axis=1)
        times = np.concatenate([before[1][:, None], times], axis=1)
        return counter_rates(values, times, max_gap)[:, 1:]
    valid = ~np.isnan(values)
    prev = previous_index(valid)
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
