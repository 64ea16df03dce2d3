"""Cluster transitions: the moments the main job moves as one, and the nodes that take part.

A job restart, a stall while one rank hangs, a checkpoint or an evaluation phase drop the whole
job's GPU activity together; nodes then come back at slightly different moments (reloading a
checkpoint, exporters restarted with the containers). While that goes on, soft differences between
nodes (NFS round trips while each reloads, traffic, temperatures) are the transition's, not a
fault's. A node is *held* while the job's median activity is well under its working level and the
node's own activity is down with it (or unknown), and for a settling time after: the policy then
neither builds nor breaks its continuity from soft findings. Idle spares are held too: exporters
are restarted across the cluster in a restart (a DaemonSet rolled with the job), and one of theirs
is news only when it outlasts the transition. A node that stays busy while the others stall is not
held: it is the odd one out, and may be the cause.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from peerwatch.detect.context import IntArray
from peerwatch.detect.groups import MAIN
from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.model import BoolArray, FloatArray

NEVER = 10**9  # steps since a node last took part: never


@dataclass(frozen=True)
class TransitionSettings:
    drop: float = 0.8  # the job's median activity under this share of its working level: a transition
    window: int = 60  # steps over which the working level is the 90th percentile of the job's median
    settle_s: float = 180.0  # a node stays held this long after it is back (nodes reload up to minutes apart)
    min_nodes: int = 4  # a job's median needs this many nodes reporting


@dataclass
class TransitionState:
    """The job's median activity over the last ``window - 1`` steps and, per node, the steps since it
    last took part in a transition (as of the last step)."""

    median: FloatArray
    since: IntArray


def held_nodes(
    activity: FloatArray | None,
    groups: IntArray,
    step: float,
    state: TransitionState | None = None,
    settings: TransitionSettings | None = None,
) -> tuple[BoolArray | None, TransitionState | None]:
    """Whether each node is held at each step of this chunk (None without GPU activity data)."""
    st = settings or TransitionSettings()
    if activity is None:
        return None, state
    n, steps = activity.shape
    main = np.where(groups == MAIN, activity, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step without main-job data
        median = np.nanmedian(main, axis=0) if n else np.full(steps, np.nan)
    median[np.sum(~np.isnan(main), axis=0) < st.min_nodes] = np.nan
    past = None if state is None else state.median[None, :]
    full = with_tail(past, median[None, :], np.nan)[0]
    lead = full.shape[0] - steps
    padded = np.concatenate([np.full(st.window - 1 - lead, np.nan), full]) if lead < st.window - 1 else full
    view = np.lib.stride_tricks.sliding_window_view(padded, st.window)[-steps:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        working = np.nanpercentile(view, 90, axis=1)
    low = st.drop * working
    in_transition = median < low  # NaN compares False: no main job known, no transition
    down = np.isnan(activity) | (activity < low[None, :])
    part = in_transition[None, :] & down
    before = np.full(n, NEVER, dtype=np.int64) if state is None else grow(state.since, n, NEVER)
    idx = np.arange(steps)
    last = np.maximum.accumulate(np.where(part, idx, -1 - np.minimum(before, NEVER)[:, None]), axis=1)
    since = idx[None, :] - last
    held: BoolArray = since <= math.ceil(st.settle_s / step)
    after = TransitionState(keep_tail(full[None, :], st.window - 1)[0], np.minimum(since[:, -1], NEVER))
    return held, after
