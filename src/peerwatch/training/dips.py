"""Dips below the local upper level, and whether they repeat (clock throttling) or not (checkpoints).

A dip is a run of running samples below the local upper level by at least ``dip_min_depth`` and
``dip_noise_k`` noise sigmas. Shallow dips (to ~70%) that recur at a regular interval of seconds to
minutes are throttling; deep dips (towards zero) are checkpoints or stalls and are only counted.
Regularity is judged twice: by the spacing of dip starts (robust to a missed dip, which doubles
one interval) and by the autocorrelation of the in-dip indicator at that spacing (near zero for
dips that noise makes at random).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.training.features import BoolArray, IntArray, Prepared
from peerwatch.training.shapes import Thresholds


@dataclass(frozen=True, slots=True, eq=False)
class Dips:
    """Dips of one series. Levels are fractions of expected; times epoch seconds."""

    starts: FloatArray  # shallow (throttle-like) dips
    ends: FloatArray
    minima: FloatArray
    deep: int  # dips below dip_deep_level of the upper level: checkpoints, stalls
    period: float  # median interval between shallow dip starts (NaN below two dips)
    regularity: float  # share of intervals within tolerance of 1-3 periods
    acf: float  # autocorrelation of the in-dip indicator at the period
    duty: float  # share of running samples inside shallow dips
    upper: float  # median local upper level

    @property
    def count(self) -> int:
        return int(self.starts.size)


def local_upper(p: Prepared, th: Thresholds) -> FloatArray:
    """Blockwise 80th percentile of the running ratio: the level the job returns to between dips."""
    x = np.where(p.active, p.ratio, np.nan)
    block = int(np.clip(round(600.0 / p.dt), 20, 500))
    n = x.size
    padded = np.concatenate([x, np.full(-n % block, np.nan)]).reshape(-1, block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        q = np.nanquantile(padded, 0.8, axis=1)
    overall = float(np.nanquantile(x, 0.8))
    q = np.where(np.isfinite(q), q, overall)
    return np.asarray(np.repeat(q, block)[:n], dtype=np.float64)


def find_dips(p: Prepared, th: Thresholds) -> Dips:
    """Find dips and measure how regularly the shallow ones recur.

    Works on running samples only, so a missing sample neither splits a dip nor ends one. A dip
    is a stretch that has not recovered to within half the dip depth of the upper level and that
    goes below the full depth at least once (hysteresis: noise around the threshold, or a slow
    warm-up ramp, makes one long dip rather than many short ones).
    """
    idx = np.flatnonzero(p.active)
    x, t = p.ratio[idx], p.ts[idx]
    upper = local_upper(p, th)[idx]
    depth = np.maximum(th.dip_min_depth, th.dip_noise_k * p.noise / np.maximum(upper, 1e-9))
    unrecovered = x < upper * (1 - depth / 2)
    starts, ends = _runs(unrecovered)
    lengths = ends - starts
    inside = np.flatnonzero(unrecovered)  # the runs, back to back
    if starts.size:
        first = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        rel_min = np.minimum.reduceat(x[inside] / upper[inside], first)
        abs_min = np.minimum.reduceat(x[inside], first)
        reaches = np.minimum.reduceat(x[inside] / (upper[inside] * (1 - depth[inside])), first) < 1
    else:
        rel_min = abs_min = np.zeros(0)
        reaches = np.zeros(0, dtype=bool)
    shallow = reaches & (rel_min >= th.dip_deep_level)
    deep = reaches & (rel_min < th.dip_deep_level)
    s_idx, e_idx = starts[shallow], ends[shallow]
    period, regularity = _spacing(t[s_idx], th)
    in_shallow = np.zeros(p.ts.shape, dtype=bool)
    in_shallow[idx[inside]] = np.repeat(shallow, lengths)
    return Dips(
        starts=t[s_idx],
        ends=t[e_idx - 1] if e_idx.size else np.zeros(0),
        minima=np.asarray(abs_min[shallow], dtype=np.float64),
        deep=int(np.count_nonzero(deep)),
        period=period,
        regularity=regularity,
        acf=_indicator_acf(p, in_shallow, period),
        duty=float(np.count_nonzero(in_shallow) / max(idx.size, 1)),
        upper=float(np.median(upper)) if upper.size else float("nan"),
    )


def _runs(mask: BoolArray) -> tuple[IntArray, IntArray]:
    """Start and end (exclusive) indices of runs of True."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def _spacing(starts: FloatArray, th: Thresholds) -> tuple[float, float]:
    """Median interval between dip starts and the share of intervals close to 1, 2 or 3 of it."""
    if starts.size < 3:
        return float("nan"), 0.0
    intervals = np.diff(starts)
    period = float(np.median(intervals))
    if period <= 0:
        return float("nan"), 0.0
    r = intervals / period
    k = np.clip(np.round(r), 1, 3)
    regular = np.abs(r - k) <= th.dip_interval_tolerance * k
    return period, float(np.mean(regular))


def _indicator_acf(p: Prepared, in_dip: BoolArray, period: float) -> float:
    """Autocorrelation of the in-dip indicator on the sampling grid, best lag within 20% of the period."""
    if not np.isfinite(period) or period <= 0:
        return 0.0
    cells = np.round((p.ts - p.ts[0]) / p.dt).astype(np.int64)
    size = int(cells[-1]) + 1
    if size > 50 * p.ts.size:  # wildly irregular sampling: no grid to speak of
        return 0.0
    grid = np.full(size, np.nan)
    grid[cells[p.active]] = in_dip[p.active].astype(np.float64)
    grid = grid - np.nanmean(grid)
    best = 0.0
    lo, hi = max(1, int(np.floor(0.8 * period / p.dt))), int(np.ceil(1.2 * period / p.dt))
    for lag in range(lo, min(hi, size - 1) + 1):
        a, b = grid[:-lag], grid[lag:]
        ok = np.isfinite(a) & np.isfinite(b)
        denom = np.sqrt(np.sum(a[ok] ** 2) * np.sum(b[ok] ** 2))
        if denom > 0:
            best = max(best, float(np.sum(a[ok] * b[ok]) / denom))
    return best
