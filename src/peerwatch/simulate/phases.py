"""What each node is doing at each step: job membership, phase, container epoch.

Cluster events (checkpoint, eval, stall, restart) apply to the nodes in the main job at that
moment. A restart swaps failed nodes out and spares in, and gives every container a new network
interface (a new ``veth`` name per epoch), as a real job restart does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray
from peerwatch.simulate.events import Event
from peerwatch.simulate.targets import BoolArray, Grid

IntArray = npt.NDArray[np.int64]


class Phase(IntEnum):
    COMPUTE = 0
    CHECKPOINT = 1
    EVAL = 2
    IDLE = 3  # spare, or everyone during a restart
    LOADING = 4  # reloading model and data after a restart
    STALL = 5  # a rank hangs; every rank waits in NCCL
    LIGHT = 6  # the lighter second job


@dataclass(frozen=True, slots=True)
class Membership:
    """Changes to the main job: ``(node, ts)`` pairs at which a node leaves or joins."""

    leaves: tuple[tuple[int, float], ...] = ()
    joins: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Activity:
    """Per node and step: phase, main-job membership, container presence and epoch, rank-0 flag."""

    phase: npt.NDArray[np.int8]  # (N, T) Phase values
    member: BoolArray  # (N, T) in the main job
    container: BoolArray  # (N, T) a job container (and its veth) exists
    epoch: IntArray  # (T,) number of job restarts so far
    restarts: tuple[float, ...]  # start times of job restarts
    rank0: int  # node that lingers in checkpoints
    load: FloatArray | None = None  # (N, T) share of full load on side work (side_jobs), NaN elsewhere


def build_activity(
    grid: Grid,
    training: int,
    events: Sequence[Event],
    membership: Membership,
    seed: int,
    names: tuple[str, ...],
    side_load: FloatArray | None = None,
) -> Activity:
    """Phase of every node at every step from the cluster events and membership changes; nodes with
    a ``side_load`` (side_jobs) are on work of their own there (phase LIGHT at that load)."""
    rng = np.random.default_rng([seed, 4])
    n, t = len(names), grid.steps
    times = grid.times
    member = np.zeros((n, t), dtype=bool)
    member[:training] = True
    for node, ts in membership.leaves:
        member[node, times >= ts] = False
    for node, ts in membership.joins:
        member[node, times >= ts] = True
    phase = np.full((n, t), Phase.IDLE, dtype=np.int8)
    phase[member] = Phase.COMPUTE
    container = member.copy()
    if side_load is not None:
        side = ~np.isnan(side_load) & ~member
        phase[side] = Phase.LIGHT
        container |= side
    rank0 = 0
    restarts = sorted(e.start_ts for e in events if e.kind == "restart")
    epoch = np.searchsorted(np.asarray(restarts, dtype=np.float64), times, side="right").astype(np.int64)

    def span(s: float, e: float) -> BoolArray:
        return (times >= s) & (times < e)

    for ev in sorted(events, key=lambda e: _PRIORITY.get(e.kind, 0)):
        if ev.kind == "light_job" and ev.node is not None:
            node = names.index(ev.node)
            on = span(ev.start_ts, ev.end_ts) & ~member[node]
            phase[node, on] = Phase.LIGHT
            container[node, on] = True
            continue
        code = _CLUSTER_PHASE.get(ev.kind)
        if code is None:
            continue
        win = span(ev.start_ts, ev.end_ts)[None, :] & member
        phase[win] = code
        if ev.kind == "checkpoint":  # rank 0 writes the consolidated state and lingers
            extra = span(ev.end_ts, ev.end_ts + 90.0 * float(rng.uniform(0.7, 1.4))) & member[rank0]
            phase[rank0, extra] = Phase.CHECKPOINT
        elif ev.kind == "restart":
            container[:, span(ev.start_ts, ev.end_ts)] = False
            shift = rng.uniform(0.0, 120.0, n)  # nodes reload at slightly different moments
            load = rng.uniform(150.0, 240.0)
            for i in np.flatnonzero(member[:, min(grid.index(ev.end_ts), t - 1)]):
                idle = span(ev.end_ts, ev.end_ts + shift[i]) & member[i]
                phase[i, idle] = Phase.IDLE
                container[i, idle] = False
                reload = span(ev.end_ts + shift[i], ev.end_ts + shift[i] + load) & member[i]
                phase[i, reload] = Phase.LOADING
    return Activity(phase, member, container, epoch, tuple(restarts), rank0, side_load)


_CLUSTER_PHASE = {"checkpoint": Phase.CHECKPOINT, "eval": Phase.EVAL, "stall": Phase.STALL, "restart": Phase.IDLE}
_PRIORITY = {"eval": 1, "checkpoint": 2, "stall": 3, "restart": 4}  # later ones win where they overlap
