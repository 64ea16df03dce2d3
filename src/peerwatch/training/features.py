"""Preparing a throughput series for the shape tests: expected level, ratio, segments, levels.

Everything here is robust statistics (medians, quantiles) so that noise, missing samples and a
few checkpoint dips move nothing. Missing samples stay NaN; a job that is down (restart, hang)
is "inactive" and splits the series into segments.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray
from peerwatch.training.shapes import Thresholds

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# |difference| of two N(0, s^2) samples has its 25th percentile at this multiple of s; the low
# quantile keeps dip edges (up to ~70% of all differences) out of the noise estimate.
_Q25_ABS_DIFF = 0.4506


class SeriesError(ValueError):
    """The series cannot be classified (too short, all missing, bad shape)."""


@dataclass(frozen=True, eq=False)
class Prepared:
    """A series ready for the tests. Arrays are aligned, sorted by time."""

    ts: FloatArray
    ratio: FloatArray  # value / expected; NaN where missing
    smooth: FloatArray  # rolling median of ratio over active samples; NaN where inactive
    active: BoolArray  # the job runs (finite and above the down level)
    segment: IntArray  # segment id of each active sample, -1 where inactive
    dt: float  # median sampling interval, s
    window: int  # smoothing window, samples
    expected: float
    expected_estimated: bool
    noise: float  # robust sigma of the ratio between neighbouring samples

    @property
    def duration(self) -> float:
        return float(self.ts[-1] - self.ts[0]) if self.ts.size > 1 else 0.0

    @property
    def segments(self) -> int:
        return int(self.segment.max()) + 1 if self.segment.size else 0


@dataclass(frozen=True, slots=True)
class Levels:
    """Where the series sits, as fractions of expected."""

    overall: float  # median of the smoothed active series
    head: float  # median of the first tenth
    current: float  # median since the last level shift, or of the last third
    current_since: float  # epoch seconds where "current" starts
    shifted: bool  # a level shift was found
    upper: float  # 90th percentile of the smoothed series


def rolling_median(x: FloatArray, window: int) -> FloatArray:
    """Centred rolling median ignoring NaN; NaN where a window holds no value."""
    if x.size == 0:
        return x.copy()
    half = window // 2
    padded = np.concatenate([np.full(half, np.nan), x, np.full(half, np.nan)])
    view = np.lib.stride_tricks.sliding_window_view(padded, window)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows
        return np.asarray(np.nanmedian(view, axis=1), dtype=np.float64)


def prepare(ts: FloatArray, values: FloatArray, expected: float | None, th: Thresholds) -> Prepared:
    """Sort, estimate the expected level if needed, compute the ratio, segments and noise."""
    ts = np.asarray(ts, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if ts.ndim != 1 or values.shape != ts.shape:
        raise SeriesError(f"timestamps and values must be 1-D of equal length, got {ts.shape} and {values.shape}")
    keep = np.isfinite(ts)
    order = np.argsort(ts[keep], kind="stable")
    ts, values = ts[keep][order], values[keep][order]
    values = np.where(np.isfinite(values) & (values >= 0), values, np.nan)
    if np.count_nonzero(np.isfinite(values)) < th.min_points:
        raise SeriesError(f"only {np.count_nonzero(np.isfinite(values))} usable samples; need {th.min_points}")
    dt = float(np.median(np.diff(ts))) if ts.size > 1 else 1.0
    dt = dt if dt > 0 else 1.0
    window = int(np.clip(round(th.smooth_s / dt), 5, 201)) | 1  # odd, centred

    estimated = expected is None or not np.isfinite(expected) or expected <= 0
    if estimated:
        # Smooth first so a single spike cannot set the bar; the high quantile is the level the
        # job reached when it ran well.
        running = rolling_median(np.where(values > 0, values, np.nan), window)
        # A job that has not run yet (all zeros) has no level: NaN, without numpy's All-NaN warning.
        expected = float(np.nanquantile(running, th.expected_quantile)) if np.isfinite(running).any() else np.nan
    assert expected is not None
    ratio = values / expected
    active = np.isfinite(ratio) & (ratio >= th.down_level)
    if np.count_nonzero(active) < th.min_points:
        raise SeriesError(f"only {np.count_nonzero(active)} samples show the job running; need {th.min_points}")
    x = np.where(active, ratio, np.nan)
    segment = _segments(ts, active, dt, th)
    smooth = np.where(active, rolling_median(x, window), np.nan)
    return Prepared(ts, ratio, smooth, active, segment, dt, window, expected, estimated, _noise(x, segment))


def _segments(ts: FloatArray, active: BoolArray, dt: float, th: Thresholds) -> IntArray:
    """Segment ids: a new segment after each gap in running samples (restart, hang, missing data)."""
    idx = np.flatnonzero(active)
    segment = np.full(ts.shape, -1, dtype=np.int64)
    if idx.size == 0:
        return segment
    gaps = np.diff(ts[idx]) > max(th.break_gap_factor * dt, th.break_min_s)
    segment[idx] = np.concatenate([[0], np.cumsum(gaps)])
    return segment


def _noise(x: FloatArray, segment: IntArray) -> float:
    """Robust sigma from neighbouring differences within a segment."""
    d = np.diff(x)
    same = (segment[1:] == segment[:-1]) & (segment[1:] >= 0)
    d = np.abs(d[same & np.isfinite(d)])
    if d.size < 4:
        return 0.0
    return float(np.quantile(d, 0.25) / _Q25_ABS_DIFF)


def levels(p: Prepared, th: Thresholds) -> Levels:
    """Overall, starting, current and upper level of the smoothed series."""
    idx = np.flatnonzero(np.isfinite(p.smooth))
    x = p.smooth[idx]
    m = x.size
    head = float(np.median(x[: max(1, m // 10)]))
    tail_start = int(m * (1 - th.tail_frac))
    current, since, shifted = float(np.median(x[tail_start:])), float(p.ts[idx[tail_start]]), False
    k, gain = best_split(x)
    if gain >= th.change_min_gain and min(k, m - k) >= m // 10:
        current, since, shifted = float(np.median(x[k:])), float(p.ts[idx[k]]), True
    return Levels(float(np.median(x)), head, current, since, shifted, float(np.quantile(x, 0.9)))


def best_split(x: FloatArray) -> tuple[int, float]:
    """Index of the best single level shift and the share of variance it explains."""
    m = x.size
    if m < 4:
        return 0, 0.0
    c1, c2 = np.cumsum(x), np.cumsum(x * x)
    k = np.arange(1, m)
    left = c2[k - 1] - c1[k - 1] ** 2 / k
    right = (c2[-1] - c2[k - 1]) - (c1[-1] - c1[k - 1]) ** 2 / (m - k)
    total = c2[-1] - c1[-1] ** 2 / m
    if total <= 1e-12:
        return 0, 0.0
    best = int(np.argmin(left + right))
    return best + 1, float(1 - (left[best] + right[best]) / total)


def active_hours(p: Prepared) -> float:
    """Hours the job ran: time between neighbouring running samples of the same segment."""
    idx = np.flatnonzero(p.active)
    same = p.segment[idx[1:]] == p.segment[idx[:-1]]
    return float(np.diff(p.ts[idx])[same].sum() / 3600)
