"""Slow sinking within runs and recovery at restarts: the garbage-collection stall test.

The smoothed series is cut into runs at restarts (a gap in running samples after which the level
comes back up, or a sudden climb), each run is fitted from its peak past any warm-up ramp, and
one straight line per run with a common slope is fitted. A sinking curve has a negative slope that
explains much of the within-run variance, and a line fits it better than a single level shift
does (a shift is a link or host failing at one moment, not a drift).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.training.features import Prepared, best_split
from peerwatch.training.shapes import Thresholds


@dataclass(frozen=True, slots=True)
class Trend:
    """Within-segment trend. Levels are fractions of expected."""

    decline: float  # fall over a typical segment (positive = sinking)
    r2: float  # share of within-segment variance the common-slope lines explain
    step_ratio: float  # SSE of the best single shift per segment / SSE of the lines (>1: gradual)
    segments: int  # segments long enough to judge
    recoveries: int  # restarts after which the level came back up
    start_level: float  # median level at the start of the segments
    end_level: float  # median level at the end of the segments
    hours: float  # typical segment length


NO_TREND = Trend(0.0, 0.0, 0.0, 0, 0, float("nan"), float("nan"), 0.0)


def find_trend(p: Prepared, th: Thresholds) -> Trend:
    """Fit the common within-segment slope and count recoveries after restarts."""
    idx = np.flatnonzero(np.isfinite(p.smooth))
    if idx.size < th.min_points:
        return NO_TREND
    t, x = p.ts[idx], p.smooth[idx]
    climbs = np.concatenate([[0], np.cumsum(np.diff(x) >= th.recovery_min_gain)])
    seg = p.segment[idx] * (idx.size + 1) + climbs  # restart gaps and sudden climbs both cut
    cuts = np.flatnonzero(np.diff(seg) != 0) + 1
    bounds = list(zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [idx.size]]), strict=True))
    total = max(float(t[-1] - t[0]), p.dt)
    keep = [
        (a, b)
        for a, b in bounds
        if b - a >= max(10, p.window) and (t[b - 1] - t[a]) >= th.trend_min_segment_frac * total
    ]
    if not keep:
        return NO_TREND
    # A restarted job warms up (compilation, data loaders) before it runs at speed: each run is
    # fitted from its peak within the first quarter, so the ramp does not hide the sinking.
    runs = [(a + int(np.argmax(x[a : a + max(1, (b - a) // 4)])), b) for a, b in _merge_without_recovery(x, keep, th)]

    tc_parts, xc_parts, sse_step, heads, tails, lengths = [], [], 0.0, [], [], []
    for a, b in runs:
        ts, xs = t[a:b], x[a:b]
        tc_parts.append(ts - ts.mean())
        xc_parts.append(xs - xs.mean())
        _, gain = best_split(xs)
        sse_step += float(np.sum((xs - xs.mean()) ** 2)) * (1 - gain)
        heads.append(_edge(xs, head=True))
        tails.append(_edge(xs, head=False))
        lengths.append(float(ts[-1] - ts[0]))
    tc, xc = np.concatenate(tc_parts), np.concatenate(xc_parts)
    sst = float(np.sum(xc**2))
    stt = float(np.sum(tc**2))
    slope = float(np.sum(tc * xc) / stt) if stt > 0 else 0.0
    sse_line = float(np.sum((xc - slope * tc) ** 2))
    typical = float(np.median(lengths))
    recoveries = sum(1 for i in range(len(runs) - 1) if heads[i + 1] - tails[i] >= th.recovery_min_gain)
    return Trend(
        decline=-slope * typical,
        r2=1 - sse_line / sst if sst > 1e-12 else 0.0,
        step_ratio=sse_step / sse_line if sse_line > 1e-12 else float("inf"),
        segments=len(runs),
        recoveries=recoveries,
        start_level=float(np.median(heads)),
        end_level=float(np.median(tails)),
        hours=typical / 3600,
    )


def _edge(xs: np.ndarray, head: bool) -> float:
    """Median of the first (or last) tenth of a run."""
    edge = max(1, xs.size // 10)
    return float(np.median(xs[:edge] if head else xs[-edge:]))


def _merge_without_recovery(x: np.ndarray, keep: list[tuple[int, int]], th: Thresholds) -> list[tuple[int, int]]:
    """Join neighbouring segments when the level did not come back up between them.

    A checkpoint or a few missing samples split a run without restarting it: the sinking goes on
    after the gap, and cutting there would halve the decline of each piece. A restart shows as the
    level after the gap (the top of its first quarter, past any warm-up ramp) well above the level
    before it. Short segments between joined ones become part of the run.
    """
    runs = [keep[0]]
    for a, b in keep[1:]:
        last_a, last_b = runs[-1]
        after = float(np.quantile(x[a : a + max(1, (b - a) // 4)], 0.9))
        if after - _edge(x[last_a:last_b], head=False) < th.recovery_min_gain:
            runs[-1] = (last_a, b)
        else:
            runs.append((a, b))
    return runs
