"""Workload groups of nodes, from the data: the training job, idle spares, nodes on another job.

Healthy peers look alike only when they do the same work, so peer comparison happens inside a
group. A node's group follows its GPU activity, asymmetrically: taking up work shows within a few
minutes (a spare that joins the job or starts a lighter one moves at once), while dropping work
takes half an hour to count (a causal rolling median), so a node that fails suddenly stays among
its busy peers long enough to stand out. A spare that has idled all along, or a node on a
lighter job, forms its own group and is never a suspect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from peerwatch.detect.context import IntArray, Series
from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.model import FloatArray

# GPU activity families in order of preference (percent, or a 0-1 ratio scaled to percent).
ACTIVITY = (("DCGM_FI_DEV_GPU_UTIL", 1.0), ("all_smi_gpu_utilization", 1.0), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100.0))
IDLE, MAIN, OTHER, UNKNOWN = 0, 1, 2, -1


def node_activity(series: Mapping[str, Series], n_nodes: int, steps: int) -> FloatArray | None:
    """Mean GPU activity per node and step (percent), NaN where unknown; None without GPU data."""
    for name, scale in ACTIVITY:
        s = series.get(name)
        if s is None:
            continue
        ok = s.node_index >= 0
        total = np.zeros((n_nodes, steps))
        count = np.zeros((n_nodes, steps))
        vals = s.values[ok] * scale
        present = ~np.isnan(vals)
        np.add.at(total, s.node_index[ok], np.where(present, vals, 0.0))
        np.add.at(count, s.node_index[ok], present)
        with np.errstate(invalid="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return None


def rolling_median(x: FloatArray, window: int) -> FloatArray:
    """Causal median of the last ``window`` steps (those present), per row."""
    padded = np.concatenate([np.full((x.shape[0], window - 1), np.nan), x], axis=1)
    view = sliding_window_view(padded, window, axis=1)
    out = np.full(x.shape, np.nan)
    have = ~np.all(np.isnan(view), axis=2)
    if have.any():
        out[have] = np.nanmedian(view[have], axis=1)
    return out


@dataclass
class GroupState:
    """What the next chunk needs: each node's activity over the last ``window - 1`` steps and its
    last known level."""

    activity: FloatArray
    level: FloatArray


def workload_groups(
    activity: FloatArray | None,
    n_nodes: int,
    steps: int,
    state: GroupState | None = None,
    *,
    window: int = 60,
    fast: int = 6,
    idle_below: float = 10.0,
    other_beyond: float = 30.0,
) -> tuple[IntArray, GroupState | None]:
    """Group of each node at each step: IDLE, MAIN (the majority of busy nodes) or OTHER."""
    if activity is None:
        return np.full((n_nodes, steps), MAIN, dtype=np.int64), state
    full = with_tail(None if state is None else state.activity, activity, np.nan)
    lead = full.shape[1] - steps
    level = np.fmax(rolling_median(full, window), rolling_median(full, fast))[:, lead:]
    # A node whose GPUs went silent keeps the group it had (it is judged by what else it reports).
    before = np.full(n_nodes, np.nan) if state is None else grow(state.level, n_nodes, np.nan)
    level = np.concatenate([before[:, None], level], axis=1)
    idx = np.where(~np.isnan(level), np.arange(steps + 1), -1)
    np.maximum.accumulate(idx, axis=1, out=idx)
    level = np.where(idx >= 0, np.take_along_axis(level, np.maximum(idx, 0), axis=1), np.nan)
    after = GroupState(keep_tail(full, window - 1), level[:, -1].copy())
    level = level[:, 1:]
    groups = np.full((n_nodes, steps), MAIN, dtype=np.int64)
    groups[level < idle_below] = IDLE
    busy = np.where(level >= idle_below, level, np.nan)
    with np.errstate(all="ignore"):
        main = np.nanmedian(busy, axis=0) if n_nodes else np.zeros(steps)
    other = np.abs(busy - main) > other_beyond
    groups[other] = OTHER
    return groups, after


def settled(groups: IntArray, steps: int) -> IntArray:
    """``groups`` with UNKNOWN for the first ``steps`` steps after a node changed group.

    A node that just changed what it does (a spare joining the job and still loading, a light job
    ending, a node swept into another group by a restart) is not yet comparable to its new peers.
    """
    n, t = groups.shape
    change = np.zeros((n, t), dtype=np.bool_)
    change[:, 1:] = groups[:, 1:] != groups[:, :-1]
    last = np.maximum.accumulate(np.where(change, np.arange(t), -steps), axis=1)
    out: IntArray = np.where(np.arange(t) - last < steps, UNKNOWN, groups)
    return out


def groups_of(
    series: Sequence[Series], n_nodes: int, steps: int, state: GroupState | None = None
) -> tuple[IntArray, GroupState | None]:
    """Workload groups from whichever GPU activity family the data has, after ``state``'s steps."""
    by_name = {s.frame.name: s for s in series}
    return workload_groups(node_activity(by_name, n_nodes, steps), n_nodes, steps, state)
