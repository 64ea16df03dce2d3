"""Peer groups of nodes, from the data: the main job, a second job, idle spares, nodes on their own.

Healthy nodes look alike only when they do the same work, and they do the same work only when
their activity moves together: one synchronous job's step rhythm, checkpoints, evaluations and
stalls happen on all its nodes at once (``comove``). Nodes whose activity tracks the median of the
busy nodes are the main job; the other busy nodes form a second job only if at least
``min_nodes`` of them track their own median the same way; every other busy node shares its work
with nobody (LONE: dev nodes, small unsynchronised jobs, each with its own load rhythm) and is
never compared with anyone. Idle nodes (below ``idle_below`` over half an hour, or a few minutes
for taking up work) are not compared either. Peer comparison happens inside MAIN or OTHER.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from peerwatch.catalog.roles import Roles
from peerwatch.detect.comove import TrackState, column_median, reference, rolling_mean, tracks
from peerwatch.detect.context import IntArray, Series
from peerwatch.detect.grouped import fold_into
from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.model import FloatArray

IDLE, MAIN, OTHER, LONE, UNKNOWN = 0, 1, 2, 3, -1
COMPARED = (MAIN, OTHER)  # the groups whose nodes are peers of one another


def node_activity(
    series: Mapping[str, Series], n_nodes: int, steps: int, roles: Roles | None = None
) -> FloatArray | None:
    """Mean GPU activity per node and step (percent), NaN where unknown; None without GPU data.

    The first family of the ``activity`` role the data has (catalog/roles.toml), scaled to percent."""
    roles = roles or Roles.default()
    for s in roles.present("activity", series):
        scale = roles.scale(s.frame.name)
        ok = s.node_index >= 0
        total = np.zeros((n_nodes, steps))
        count = np.zeros((n_nodes, steps))
        vals = s.values[ok] * scale
        present = ~np.isnan(vals)
        fold_into(np.add, total, s.node_index[ok], np.where(present, vals, 0.0))
        fold_into(np.add, count, s.node_index[ok], present)
        with np.errstate(invalid="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return None


def rolling_median(x: FloatArray, window: int, steps: int | None = None, cells: int = 1 << 22) -> FloatArray:
    """Causal median of the last ``window`` steps (those present), per row, for the last ``steps``
    columns of ``x`` (all by default); in blocks of columns of about ``cells`` values each, so that a
    long run of many nodes never holds every window at once."""
    steps = x.shape[1] if steps is None else steps
    lead = x.shape[1] - steps
    padded = np.concatenate([np.full((x.shape[0], window - 1), np.nan), x], axis=1)
    view = sliding_window_view(padded, window, axis=1)[:, lead:]
    out = np.full((x.shape[0], steps), np.nan)
    block = max(1, cells // max(1, x.shape[0] * window))
    for a in range(0, steps, block):
        part = view[:, a : a + block]
        have = ~np.all(np.isnan(part), axis=2)
        if have.any():
            sub = out[:, a : a + block]
            sub[have] = np.nanmedian(part[have], axis=1)
    return out


@dataclass(frozen=True)
class GroupSettings:
    """How nodes are put into peer groups (durations in seconds, turned into steps of the grid)."""

    idle_below: float = 10.0  # [%] activity under which a node does no work worth comparing
    level_s: float = 3600.0  # a node's working level: the median over this long (it falls in half that) ...
    fast_s: float = 180.0  # ... or over this short a time, whichever is higher (taking up work shows at once)
    smooth_s: float = 120.0  # activity averaged over this long (4 scrapes at least) before it is compared
    join_s: float = 600.0  # tracking over this long admits a node to a job
    hold_s: float = 1800.0  # tracking over this long keeps it there for as long again
    # A node tracks its job when, over a window, its mean offset from the job's median is at most
    # `tolerance` points and its mean distance at most `spread` times the job's typical node's (and
    # at least `floor` points).
    tolerance: float = 12.0
    spread: float = 2.0  # times the job's typical node's mean distance to its median
    floor: float = 4.0  # [%] the least distance allowed, however tight the job
    min_nodes: int = 4  # a second job is real only with this many nodes tracking its median ...
    second_strict: float = 0.5  # ... this much closer in their moves (no majority anchors it)


def steps_of(seconds: float, step: float, least: int = 2) -> int:
    return max(least, round(seconds / step))


@dataclass
class GroupState:
    """What the next chunk needs: each node's activity over the last ``level`` steps, its last known
    level, the past of the two co-movement tests and of the typical distance."""

    activity: FloatArray
    level: FloatArray
    main: TrackState | None = None
    second: TrackState | None = None
    spread: FloatArray | None = None  # (1, hold - 1) the busy nodes' typical distance to the job median


def workload_groups(
    activity: FloatArray | None,
    n_nodes: int,
    steps: int,
    state: GroupState | None = None,
    *,
    step: float = 30.0,
    settings: GroupSettings | None = None,
) -> tuple[IntArray, GroupState | None]:
    """Group of each node at each step: IDLE, MAIN (the main job), OTHER (a second synchronous job),
    LONE (busy with work no other node shares). A node never seen with GPU activity is MAIN."""
    if activity is None:
        return np.full((n_nodes, steps), MAIN, dtype=np.int64), state
    st = settings or GroupSettings()
    window, fast = steps_of(st.level_s, step), steps_of(st.fast_s, step)
    smooth, join, hold = steps_of(st.smooth_s, step, 4), steps_of(st.join_s, step), steps_of(st.hold_s, step)
    full = with_tail(None if state is None else state.activity, activity, np.nan)
    level = np.fmax(rolling_median(full, window, steps), rolling_median(full, fast, steps))
    # A node whose GPUs went silent keeps the group it had (it is judged by what else it reports).
    before = np.full(n_nodes, np.nan) if state is None else grow(state.level, n_nodes, np.nan)
    level = np.concatenate([before[:, None], level], axis=1)
    idx = np.where(~np.isnan(level), np.arange(steps + 1), -1)
    np.maximum.accumulate(idx, axis=1, out=idx)
    level = np.where(idx >= 0, np.take_along_axis(level, np.maximum(idx, 0), axis=1), np.nan)
    busy = level[:, 1:] >= st.idle_below
    smoothed = rolling_mean(full, smooth, steps)
    # The main job: nodes that track the median of the busy nodes' tight bunch, in level and about as
    # closely as its typical node does (scrape phases catching the step rhythm spread a real job more).
    ref = reference(smoothed, busy, 2 * st.tolerance)
    # The typical busy node is the main job's; its usual distance over the last half hour, so that a
    # restart's staggered reload or a checkpoint (minutes of wide spread) does not loosen the test.
    spread = column_median(np.abs(smoothed - ref), busy)[None, :]
    spread = with_tail(None if state is None else state.spread, spread, np.nan)
    usual = rolling_median(spread, hold, steps)[0]
    scale = np.fmax(st.spread * np.nan_to_num(usual), st.floor)
    main, main_state = tracks(
        np.where(busy, (smoothed - ref) / st.tolerance, np.nan),
        np.where(busy, np.abs(smoothed - ref) / scale, np.nan),
        None if state is None else state.main,
        join=join,
        hold=hold,
        undecided=True,  # as a node of unknown work always was; a new member waits for its offset anyway
    )
    main &= busy
    # A second job: the rest of the busy nodes, if enough of them track their own median as closely
    # for half an hour.
    # Only nodes at work lately (its own checkpoint is no break): nodes whose own jobs ended (idle,
    # but not yet for half an hour) all sit at zero, alike.
    rest = busy & ~main
    candidates = rest & (rolling_mean(full, join, steps) >= st.idle_below)
    ref2 = reference(smoothed, candidates, np.fmin(scale, st.tolerance))
    second, second_state = tracks(
        np.where(candidates, (smoothed - ref2) / st.tolerance, np.nan),
        np.where(candidates, np.abs(smoothed - ref2) / (st.second_strict * scale), np.nan),
        None if state is None else state.second,
        join=join,
        hold=hold,
        quick=False,  # no majority anchors a second job: its nodes must show it over half an hour
    )
    second &= candidates
    second &= second.sum(axis=0) >= st.min_nodes
    after = GroupState(
        keep_tail(full, max(window, smooth, join) - 1),
        level[:, -1].copy(),
        main_state,
        second_state,
        keep_tail(spread, hold - 1),
    )
    groups = np.full((n_nodes, steps), MAIN, dtype=np.int64)
    groups[level[:, 1:] < st.idle_below] = IDLE
    groups[rest] = LONE
    groups[second] = OTHER
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


def move_keys(groups: IntArray) -> IntArray:
    """Which nodes can make a move together (the policy's shared-move test): those of one group,
    except that a LONE node shares its moves with nobody and gets a key of its own (negative)."""
    out: IntArray = np.where(groups == LONE, -2 - np.arange(groups.shape[0]), groups)
    return out
