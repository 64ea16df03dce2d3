"""The throughput series a file holds, and what its readers share (timestamps, rank alignment).

Readers: :mod:`peerwatch.training.csv_series` (CSV) and :mod:`peerwatch.training.steplog` (step
logs); :func:`peerwatch.training.inputs.load_series` picks one by content.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from peerwatch.model import FloatArray


class InputError(ValueError):
    """A file that cannot be used at all (unreadable, empty, no usable rows)."""


@dataclass(frozen=True, eq=False)
class TrainingSeries:
    """A job's throughput series (higher is better) and, optionally, per-rank rows on the same steps."""

    ts: FloatArray
    values: FloatArray
    expected: float | None = None
    per_rank: FloatArray | None = None  # (ranks, len(ts))
    rank_ids: tuple[int, ...] = ()
    unit: str = "value"
    source: str = ""
    notes: tuple[str, ...] = ()


def parse_ts(text: str) -> float:
    """Epoch seconds from epoch s/ms/us or ISO 8601 (naive times are UTC). Raises ValueError."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00").replace(",", "."))
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()
    if not np.isfinite(value):
        raise ValueError(f"timestamp {text!r} is not finite")
    if value > 1e14:
        return value / 1e6
    return value / 1e3 if value > 1e11 else value


def align_steps(ts: FloatArray, row: np.ndarray) -> tuple[FloatArray, np.ndarray]:
    """Put samples of several ranks on one grid whose cell is the median per-rank sampling interval.

    Ranks log their own clocks, so their timestamps differ by a little; joining on exact times
    would misalign them. Returns the grid times that hold data and each sample's cell.
    """
    order = np.lexsort((ts, row))
    d = np.diff(ts[order])
    same = np.diff(row[order]) == 0
    within = d[same & (d > 0)]
    step = float(np.median(within)) if within.size else 1.0
    t0 = float(ts.min())
    cells = np.round((ts - t0) / step).astype(np.int64)
    used, cell = np.unique(cells, return_inverse=True)
    return np.asarray(t0 + used * step, dtype=np.float64), cell


def job_median(per_rank: FloatArray) -> FloatArray:
    """The job-level series of a (ranks x steps) array: the median rank at each step."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # steps no rank reported
        return np.asarray(np.nanmedian(per_rank, axis=0), dtype=np.float64)
