"""Frames: samples aligned to a step grid, one (series × steps) array per metric.

Step ``k`` stands for time ``k * step`` and holds the last sample in ``(k*step - step, k*step]``,
so every exporter's own scrape phase and millisecond jitter land on the same grid without joining
on exact timestamps. A step with no sample is NaN, never 0. Counters become per-second rates
between consecutive samples, with resets (a drop) counted as a restart from zero.
The builder keeps only the aligned arrays, in blocks where samples are, so memory follows the
data, not the input size nor its time span.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import numpy as np
import numpy.typing as npt

from peerwatch.frames.frame_store import Cells, Rows, Span, spans_of
from peerwatch.model import FloatArray, ProblemLog, SeriesBlock, SeriesKey
from peerwatch.series_budget import UNLIMITED, SeriesBudget

Kind = Literal["gauge", "rate"]
EARLIEST_TS = 946_684_800.0  # 2000-01-01: anything older is a unit mistake, not data
FUTURE_SLACK = 86_400.0  # accept clocks up to a day ahead of ours
SPLIT_GAP = 600.0  # no sample at all for longer: the recording stopped; what follows is judged apart
MIN_SPAN_STEPS = 20  # a stretch shorter than this beside a longer one is a stray, not a run to judge


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


def plausible(ts: FloatArray, vals: FloatArray, latest: float) -> npt.NDArray[np.bool_]:
    """Samples worth placing: a finite value (NaN is a staleness marker or a gap) at a time between
    2000 and ``latest`` (anything else is a unit mistake or a wrong clock)."""
    ok: npt.NDArray[np.bool_] = (ts >= EARLIEST_TS) & (ts <= latest) & np.isfinite(vals)
    return ok


def step_of(ts: FloatArray, step: float) -> npt.NDArray[np.int64]:
    """The grid step each sample belongs to: step ``k`` holds ``(k*step - step, k*step]``."""
    return np.ceil(ts / step).astype(np.int64)


def latest_in_cells(
    cell: npt.NDArray[np.int64], ts: FloatArray, vals: FloatArray
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The one rule for several samples of a series in one step: the latest wins, whatever the
    arrival order, and of equal times the last read. Returns the winners' indices (in cell order)
    and each conflict (same time, other value) with its winner."""
    # Stable sort keeps arrival order within a cell; runs of sorted blocks make it near-linear.
    order = np.argsort(cell, kind="stable")
    c = cell[order]
    last = np.ones(c.size, dtype=np.bool_)
    np.not_equal(c[1:], c[:-1], out=last[:-1])
    if last.all():
        return order, order[:0], order[:0]
    winners, losers, won = _latest_in_runs(c, ts[order], vals[order])
    return order[winners], order[losers], order[won]


@dataclass(frozen=True, eq=False)
class Part:
    """What one builder read of a part of a file (a child process's, frames/parts.py): each metric's
    rows, the samples placed, the (metric, row) pairs whose conflict was noted, its problems, and
    whether a series budget left any series out."""

    rows: dict[str, Rows]
    samples: int
    conflicted: frozenset[tuple[str, int]]
    problems: ProblemLog
    dropped: bool


class FrameBuilder:
    """Accumulates series blocks into aligned frames.

    ``kind_of(name, declared_type, raw_values)`` decides which metrics are counters (default: the
    declared type; the catalogue and the values' behaviour know better). The grid is stored in
    blocks where samples are (frame_store.py), so memory follows the data, not its time span; where
    no sample at all comes for more than ``split_gap`` seconds the data splits into stretches
    (``spans``) that are built apart. A gap in the recording is a gap, not an outage. Series beyond
    ``budget`` (default: none) are left out and reported per family.
    """

    def __init__(
        self,
        step: float = 30.0,
        *,
        problems: ProblemLog | None = None,
        kind_of: Callable[[str, str | None, FloatArray], Kind] = declared_kind,
        node_labels: tuple[str, ...] = ("node", "hostname", "Hostname"),
        node_labels_for: Callable[[str, tuple[str, ...]], tuple[str, ...]] | None = None,
        split_gap: float | None = SPLIT_GAP,
        budget: SeriesBudget | None = None,
        now: float | None = None,
        batch: int = 1 << 20,
    ) -> None:
        self.step = float(step)
        self.problems = problems if problems is not None else ProblemLog()
        self.kind_of = kind_of
        self.node_labels = node_labels
        # Some families use a node label for something else (node_exporter's NUMA ``node``): the catalogue knows.
        self.node_labels_for = node_labels_for or (lambda _name, labels: labels)
        self.split_steps = None if split_gap is None else max(1, int(np.ceil(split_gap / self.step)))
        self.latest = (time.time() if now is None else now) + FUTURE_SLACK
        self.batch = batch
        self.budget = budget or UNLIMITED
        self.samples = 0
        self.series = 0
        self._pending = 0
        self._metrics: dict[str, Rows] = {}
        self._over: dict[str, set[int]] = {}  # per family, the hashes of the series left out
        self._conflicted: set[tuple[str, int]] = set()  # (metric, row) already noted

    def add_all(self, blocks: Iterable[SeriesBlock]) -> FrameBuilder:
        for block in blocks:
            self.add(block)
        return self

    def add(self, block: SeriesBlock) -> None:
        if not len(block):
            return
        rows = self._metrics.get(block.key.name)
        if rows is None:
            rows = self._metrics[block.key.name] = Rows()
        if rows.declared is None and block.mtype:
            rows.declared = block.mtype
        if block.key not in rows.index:
            if len(rows.index) >= self.budget.per_family or self.series >= self.budget.total:
                self._over.setdefault(block.key.name, set()).add(hash(block.key))
                return
            self.series += 1
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

    def _report_budget(self) -> None:
        """Each family that went over the series budget, once, with what was kept."""
        for name, over in self._over.items():
            kept = len(self._metrics[name].index)
            which = "per family" if kept >= self.budget.per_family else "of the run"
            self.problems.add(name, self.budget.message(kept, len(over), which))
        self._over.clear()

    def _note_conflict(self, name: str, rows: Rows, row: int, ts: float, was: float, now: float) -> None:
        """Note, once per series, samples at one timestamp with different values (the last read is kept)."""
        if (name, row) in self._conflicted:
            return
        self._conflicted.add((name, row))
        key = next(itertools.islice(rows.index, row, None))
        when = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
        self.problems.add(str(key), f"conflicting samples at {when} UTC ({was:g} and {now:g}): the last read is kept")

    def _write(self, name: str, rows: Rows) -> None:
        row_ids = np.array([r for r, _, _ in rows.pending], dtype=np.int64)
        lengths = np.array([len(t) for _, t, _ in rows.pending], dtype=np.int64)
        ts = np.concatenate([t for _, t, _ in rows.pending])
        vals = np.concatenate([v for _, _, v in rows.pending])
        rows.pending.clear()
        row = np.repeat(row_ids, lengths)
        keep = plausible(ts, vals, self.latest)
        if not keep.all():
            self._report(rows, row, ts, vals)
            row, ts, vals = row[keep], ts[keep], vals[keep]
        if not ts.size:
            return
        k = step_of(ts, self.step)
        col = rows.columns(k)
        width = rows.vals.shape[1]
        cell = row * width + col
        if not (cell[1:] > cell[:-1]).all():  # else each sample has a cell of its own, in order: the usual batch
            won, losers, winners = latest_in_cells(cell, ts, vals)
            for i, w in zip(losers.tolist(), winners.tolist(), strict=True):
                self._note_conflict(name, rows, int(cell[i] // width), float(ts[i]), float(vals[i]), float(vals[w]))
            cell, ts, vals, k = cell[won], ts[won], vals[won], k[won]
        offs = (ts - k * self.step).astype(np.float32)
        flat_offs, flat_vals = rows.offs.reshape(-1), rows.vals.reshape(-1)
        held = flat_offs[cell]
        same = np.flatnonzero(offs == held)  # at a time an earlier batch filled
        for i in same[flat_vals[cell[same]] != vals[same]].tolist():
            self._note_conflict(
                name, rows, int(cell[i] // width), float(ts[i]), float(flat_vals[cell[i]]), float(vals[i])
            )
        newer = ~(offs < held)  # a sample older than the one held loses; any beats none (NaN)
        if not newer.all():
            cell, vals, offs = cell[newer], vals[newer], offs[newer]
        flat_vals[cell] = vals
        flat_offs[cell] = offs
        self.samples += int(ts.size)

    def part(self) -> Part:
        """What this builder read, for the builder of the whole file (``absorb``)."""
        self.flush()
        rows = {name: r.trimmed() for name, r in self._metrics.items()}
        return Part(rows, self.samples, frozenset(self._conflicted), self.problems, bool(self._over))

    def absorb(self, part: Part, kept: set[int]) -> bool:
        """Take in a later part of the input that another builder read, as if read here after what
        was: the same grid, series, conflicts and problems. ``kept``: the hashes of the input's series
        so far (sources/inputs.InputBudget), grown by the part's. False, with nothing changed, where
        a series budget would have left out some of the part's series: the part must be read here."""
        if part.dropped or self._over:
            return False
        self.flush()
        hashes = {hash(k) for rows in part.rows.values() for k in rows.index}
        held = {name: self._metrics[name].index if name in self._metrics else {} for name in part.rows}
        new = {name: sum(k not in held[name] for k in rows.index) for name, rows in part.rows.items()}
        if (
            any(len(held[name]) + n > self.budget.per_family for name, n in new.items())
            or self.series + sum(new.values()) > self.budget.total
            or len(kept | hashes) > self.budget.per_input
        ):
            return False
        for p in part.problems:  # first: they were met reading, conflicts when the grids meet
            self.problems.add(p.where, p.message)
        self.problems.dropped += part.problems.dropped
        for name, other in part.rows.items():
            rows = self._metrics.setdefault(name, Rows())
            rowmap, clashes = rows.absorb(other)
            self._conflicted.update((name, int(rowmap[r])) for n, r in part.conflicted if n == name)
            for row, k, off, was, now in clashes:
                self._note_conflict(name, rows, row, k * self.step + off, was, now)
        self.series += sum(new.values())
        self.samples += part.samples
        kept |= hashes
        return True

    def _report(self, rows: Rows, row: npt.NDArray[np.int64], ts: FloatArray, vals: FloatArray) -> None:
        keys = list(rows.index)
        for what, bad in (
            ("samples with impossible timestamps dropped", ~((ts >= EARLIEST_TS) & (ts <= self.latest))),
            ("infinite values kept as missing", np.isinf(vals)),
        ):
            if bad.any():
                ids, counts = np.unique(row[bad], return_counts=True)
                for r, n in zip(ids.tolist(), counts.tolist(), strict=True):
                    self.problems.add(str(keys[r]), f"{n} {what}")

    def spans(self) -> list[Span]:
        """The stretches of steps that hold data, in time order."""
        self.flush()
        self._report_budget()
        parts = [rows.occupied() for rows in self._metrics.values()]
        if not parts:
            return []
        steps, inverse = np.unique(np.concatenate([s for s, _ in parts]), return_inverse=True)
        counts = np.bincount(inverse.reshape(-1), weights=np.concatenate([c for _, c in parts]), minlength=steps.size)
        return spans_of(steps, counts.astype(np.int64), self.split_steps)

    def build(self) -> dict[str, Frame]:
        """Frames of the stretch of data holding the most samples; any other is reported and set aside."""
        spans = self.spans()
        if not spans:
            return {}
        main = max(spans, key=lambda s: s.samples)
        self._set_aside([s for s in spans if s is not main], main, "outside the main stretch of data")
        return self.frames(main)

    def segments(self, min_steps: int = MIN_SPAN_STEPS) -> list[Span]:
        """The stretches worth judging apart: the one with the most samples and every other of at
        least ``min_steps`` steps. The rest (a stray sample far from the bulk) are reported and set
        aside, and each gap between the stretches kept is reported."""
        spans = self.spans()
        if not spans:
            return []
        main = max(spans, key=lambda s: s.samples)
        kept = [s for s in spans if s is main or s.steps >= min_steps]
        self._set_aside([s for s in spans if s not in kept], main, f"under {min_steps} steps, too short to judge")
        for a, b in itertools.pairwise(kept):
            self.problems.add(
                "input",
                f"no data for {_duration((b.lo - a.hi) * self.step)} from {self._iso(a.hi)} to {self._iso(b.lo)} UTC: "
                "the stretches either side are judged apart",
            )
        return kept

    def _set_aside(self, spans: list[Span], main: Span, why: str, named: int = 10) -> None:
        """Report stretches set aside: the first ``named`` one by one with their series, the rest in one line."""
        if len(spans) > named:
            rest = spans[named:]
            self.problems.add(
                "input",
                f"{len(rest)} more stretches ({sum(s.samples for s in rest)} samples) from {self._iso(rest[0].lo)} "
                f"to {self._iso(rest[-1].hi)} UTC set aside: {why}",
            )
        for s in spans[:named]:
            away = (main.lo - s.hi if s.hi < main.lo else s.lo - main.hi) * self.step
            side = "before" if s.hi < main.lo else "after"
            keys = [k for f in self.frames(s, rates=False).values() for k in f.keys] if s.samples <= 1000 else []
            where = str(keys[0]) + (f" and {len(keys) - 1} more series" if len(keys) > 1 else "") if keys else "input"
            self.problems.add(
                where,
                f"{s.samples} samples from {self._iso(s.lo)} to {self._iso(s.hi)} UTC, {_duration(away)} {side} "
                f"the main stretch of data, set aside: {why}",
            )

    def _iso(self, k: int) -> str:
        return datetime.fromtimestamp(k * self.step, UTC).strftime("%Y-%m-%d %H:%M:%S")

    def cells(self, span: Span) -> dict[str, Cells]:
        """Each metric's samples on the steps of ``span``: the series with one there, by row."""
        self.flush()
        out: dict[str, Cells] = {}
        for name, rows in self._metrics.items():
            got = rows.cut(span)
            if got is None:
                continue
            vals, offs = got
            has = np.flatnonzero(~np.isnan(vals).all(axis=1))
            if not has.size:
                continue
            if has.size < vals.shape[0]:  # cut's arrays are fresh: kept whole when every row has a sample
                vals, offs = vals[has], offs[has]
            grid = (span.lo + np.arange(span.steps, dtype=np.float64)) * self.step
            out[name] = Cells(
                ids=has,
                values=vals,
                times=grid + offs.astype(np.float64),
                declared=rows.declared,
                key_of=rows.keys().__getitem__,
            )
        return out

    def frames(self, span: Span, *, rates: bool = True) -> dict[str, Frame]:
        """Frames of everything added on the steps of ``span``: each metric and series that has a
        sample there, framed as the engine judges them (framer.py: counters as rates, a family whose
        kind its values have not shown yet left out); without ``rates``, every metric's raw values."""
        from peerwatch.frames.framer import Framer  # the framer builds on this module's frames

        framer = Framer(
            self.step,
            kind_of=self.kind_of if rates else _raw,
            node_labels=self.node_labels,
            node_labels_for=self.node_labels_for,
        )
        return framer.frames(span.lo, span.steps, self.cells(span))


def _raw(_name: str, _declared: str | None, _values: FloatArray) -> Kind:
    return "gauge"


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86_400:
        return f"{seconds / 86_400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


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
        d = np.sort(d[d > 0])  # np.median's value, without its 30 us of checks per series (5,000 of them)
        if d.size:
            mid = d.size // 2
            intervals.append(float(d[mid] if d.size % 2 else (d[mid - 1] + d[mid]) / 2))
    if not intervals:
        return least
    return max(least, float(np.ceil(np.percentile(intervals, 75, method="nearest") - 0.5)))


def _latest_in_runs(
    cell: npt.NDArray[np.int64], ts: FloatArray, vals: FloatArray
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Index of the sample with the largest timestamp in each run of equal cells (the last such);
    and each sample with that timestamp too but another value (a conflict) with its run's winner."""
    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    run = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, cell.size]))
    best = ts == np.maximum.reduceat(ts, starts)[run]
    cand = np.flatnonzero(best)
    lasts = np.r_[run[cand][1:] != run[cand][:-1], True]
    kept = np.repeat(cand[lasts], np.diff(np.r_[0, np.flatnonzero(lasts) + 1]))  # each candidate's winner
    clash = vals[cand] != vals[kept]
    return cand[lasts], cand[clash], kept[clash]


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
    at = np.maximum(prev, 0)
    # Over every cell at once (the grid is mostly full): cells with no previous sample are masked.
    with np.errstate(invalid="ignore"):
        delta = values - np.take_along_axis(values, at, axis=1)
        delta = np.where(delta < 0, values, delta)
        dt = times - np.take_along_axis(times, at, axis=1)
        ok = valid & (prev >= 0) & (dt > 0) & (dt <= max_gap)
        out: FloatArray = np.where(ok, delta / np.where(dt > 0, dt, 1.0), np.nan)
    return out
