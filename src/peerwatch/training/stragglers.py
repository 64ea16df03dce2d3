"""Per-rank spread: the rank that is consistently slower than its peers.

In a synchronous job every rank does the same work, so each rank's throughput relative to the
median rank at the same step should hover around 1. A straggler sits below it step after step;
a rank that is slowest only now and then is noise.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.training.shapes import Thresholds


@dataclass(frozen=True, slots=True)
class Spread:
    """How far the slowest ranks sit below the median rank."""

    ranks: tuple[int, ...]  # straggler rank ids, slowest first
    slowest: int
    gap: float  # 1 - the slowest rank's median speed relative to the median rank
    z: float  # robust z of the slowest rank among all ranks
    consistency: float  # share of steps at which ``ranks`` sit below the median of the others
    n_ranks: int
    steps: int


def find_spread(per_rank: FloatArray, rank_ids: Sequence[int] | None, th: Thresholds) -> Spread | None:
    """Rank spread of a (ranks x steps) throughput array; None with fewer than two ranks."""
    data = np.asarray(per_rank, dtype=np.float64)
    if data.ndim != 2 or data.shape[0] < 2:
        return None
    ids = list(rank_ids) if rank_ids is not None else list(range(data.shape[0]))
    if len(ids) != data.shape[0]:
        raise ValueError(f"{len(ids)} rank ids for {data.shape[0]} per-rank rows")
    data = np.where(np.isfinite(data) & (data > 0), data, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # steps where every rank is missing
        rel = data / np.nanmedian(data, axis=0)
        speed = np.nanmedian(rel, axis=1)
    if not np.isfinite(speed).any():
        return None
    slowest = int(np.nanargmin(speed))
    centre = float(np.nanmedian(speed))
    mad = float(np.nanmedian(np.abs(speed - centre)))
    scale = max(1.4826 * mad, 0.005)  # a floor: identical ranks must not make any gap infinite
    z_all = (speed - centre) / scale
    order = np.argsort(speed)
    slow = (1 - speed >= th.straggler_min_gap) & (z_all <= -3)
    flagged = order[slow[order]]
    group = flagged if flagged.size else np.array([slowest])
    # Consistency: at how many steps the straggler(s) sit below the median of the other ranks.
    counted = np.count_nonzero(np.isfinite(rel), axis=0) >= 2
    others = np.delete(rel, group, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        below = rel[group] < np.nanmedian(others, axis=0) if others.size else np.zeros_like(rel[group], dtype=bool)
    valid = np.isfinite(rel[group]) & counted
    consistency = float(below[valid].mean()) if valid.any() else 0.0
    return Spread(
        ranks=tuple(int(ids[i]) for i in flagged),
        slowest=int(ids[slowest]),
        gap=float(1 - speed[slowest]),
        z=float(z_all[slowest]),
        consistency=consistency,
        n_ranks=int(data.shape[0]),
        steps=int(np.count_nonzero(counted)),
    )
