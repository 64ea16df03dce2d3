"""Whether a node's GPU activity moves with a reference: the co-movement test behind peer groups.

Nodes of one synchronous job share their step rhythm, checkpoints, evaluations and stalls, so
their activity (smoothed over a couple of minutes, which averages out the moment of the step each
node's own scrape phase catches) follows the job's median in level AND in its moves. A node on
its own work does not: a different level, or the same level with dips and rises at other
moments. Over a window, the level is the mean offset from the reference (noise averages out);
the moves are the mean distance, against the distance the job's typical node keeps.

Membership is asymmetric: a node joins once it tracked over a short window (a spare that joins
the job is compared within minutes), and stays for a long while after it last tracked over a long
window (a node that fails suddenly stays among its peers long enough to stand out). A node that
tracked only briefly (a lone job that happened to sit still) leaves as soon as it moves alone.
Every step depends on a fixed number of earlier steps only, carried in ``TrackState``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.model import BoolArray, FloatArray


def rolling_mean(full: FloatArray, window: int, steps: int, least: int = 1) -> FloatArray:
    """Mean of the values present among the last ``window`` columns, for the last ``steps`` columns
    of ``full`` (NaN where fewer than ``least`` are present)."""
    t = full.shape[1]
    present = ~np.isnan(full)
    csum = np.zeros((full.shape[0], t + 1))
    ccount = np.zeros((full.shape[0], t + 1))
    np.cumsum(np.where(present, full, 0.0), axis=1, out=csum[:, 1:])
    np.cumsum(present, axis=1, out=ccount[:, 1:])
    end = np.arange(t - steps, t) + 1
    begin = np.maximum(end - window, 0)
    total = csum[:, end] - csum[:, begin]
    count = ccount[:, end] - ccount[:, begin]
    out: FloatArray = np.where(count >= max(least, 1), total / np.maximum(count, 1.0), np.nan)
    return out


def column_median(x: FloatArray, use: BoolArray) -> FloatArray:
    """Median of each column over the cells ``use`` marks and that are present (NaN if none).

    One sort per call: numpy's nanmedian goes column by column for arrays with NaNs."""
    v = np.sort(np.where(use, x, np.nan), axis=0)  # NaN sorts last
    n = np.sum(~np.isnan(v), axis=0)
    cols = np.arange(x.shape[1])
    lo, hi = np.maximum(n - 1, 0) // 2, np.maximum(n, 1) // 2
    hi = np.where(n % 2 == 0, hi, lo)
    out: FloatArray = np.where(n > 0, 0.5 * (v[lo, cols] + v[hi, cols]), np.nan)
    return out


def reference(smooth: FloatArray, among: BoolArray, tolerance: float | FloatArray, rounds: int = 2) -> FloatArray:
    """The level the largest bunch of ``among`` sits at in each column: their median, then the median
    of those within ``tolerance`` of it, ``rounds`` times (a mode-seeking median: nodes on other work
    at scattered levels do not pull it). The plain median where the refinement leaves nobody."""
    ref = column_median(smooth, among)
    for _ in range(rounds):
        near = among & (np.abs(smooth - ref) <= tolerance)
        ref = np.where(near.any(axis=0), column_median(smooth, near), ref)
    return ref


@dataclass
class TrackState:
    """One co-movement test's past: the offsets and distances over the long window, the last known
    tracking errors (carried through silence) and whether the node tracked over the long window lately."""

    offset: FloatArray
    dist: FloatArray
    short: FloatArray
    long: FloatArray
    tracked: BoolArray


def tracks(
    offset: FloatArray,
    dist: FloatArray,
    state: TrackState | None,
    *,
    join: int,
    hold: int,
    quick: bool = True,
    undecided: bool = False,
) -> tuple[BoolArray, TrackState]:
    """Whether each node belongs with its reference at each step. ``offset`` is (activity - reference)
    in units of the level tolerance, ``dist`` |activity - reference| in units of the distance the
    job's typical node keeps (both NaN where unknown or not a candidate). A window tracks when both
    its mean offset (level: scrape noise averages out) and its mean distance (moves: a dip of its
    own, or a shared checkpoint missed) are at most 1. A node belongs when the last ``join`` steps
    track (if ``quick``), or ``hold`` steps ending at some step of the last ``hold`` did; a node with
    no verdict yet (too few samples since it appeared) belongs if ``undecided``."""
    steps = dist.shape[1]
    off = with_tail(None if state is None else state.offset, offset, np.nan)
    past = with_tail(None if state is None else state.dist, dist, np.nan)

    def error(window: int) -> FloatArray:
        # A verdict needs a third of the window: one lucky sample is no track record.
        level = np.abs(rolling_mean(off, window, steps, window // 3))
        out: FloatArray = np.fmax(level, rolling_mean(past, window, steps, window // 3))
        return out

    short = _carried(error(join), None if state is None else state.short)
    long = _carried(error(hold), None if state is None else state.long)
    steady = long <= 1.0
    was = with_tail(None if state is None else state.tracked, steady, False)
    lately = rolling_mean(was.astype(np.float64), hold, steps) > 0
    member: BoolArray = (quick & (short <= 1.0)) | lately | (undecided & np.isnan(short))
    after = TrackState(
        keep_tail(off, hold - 1),
        keep_tail(past, hold - 1),
        short[:, -1].copy(),
        long[:, -1].copy(),
        keep_tail(was, hold - 1),
    )
    return member, after


def _carried(x: FloatArray, before: FloatArray | None) -> FloatArray:
    """``x`` with each NaN replaced by the last value before it in its row (``before`` at the start):
    a node whose GPUs went silent keeps the standing it had."""
    n, steps = x.shape
    first = np.full(n, np.nan) if before is None else grow(before, n, np.nan)
    full = np.concatenate([first[:, None], x], axis=1)
    idx = np.where(~np.isnan(full), np.arange(steps + 1), 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    out: FloatArray = np.take_along_axis(full, idx, axis=1)[:, 1:]
    return out
