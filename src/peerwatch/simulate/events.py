"""Benign cluster events: what healthy synchronous training does to every node at once.

Checkpoints (all nodes write; rank 0 lingers), evaluation phases, job restarts (everyone idle,
then nodes reload at slightly different moments), storage-side slowdowns, scheduler-agent
restarts (its counters reset), NFS remounts (mountstats reset), a lighter job on a spare, and
in the variants drop counters ticking on every interface and rare NFS operations (count_noise.py).
None of these is a fault; a detector must stay quiet through all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.simulate.targets import Grid


@dataclass(frozen=True, slots=True)
class Event:
    """One labelled event (GUIDE 3.2 ``events``); ``node`` is None for cluster-wide events."""

    kind: str
    start_ts: float
    end_ts: float
    node: str | None = None
    detail: str | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "start_ts": self.start_ts, "end_ts": self.end_ts}
        if self.node is not None:
            out["node"] = self.node
        if self.detail is not None:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True, slots=True)
class Benign:
    """How often benign events happen; counts are per run, periods in minutes."""

    checkpoint_every_min: float = 45.0
    checkpoint_min: float = 3.0
    rank0_linger_s: float = 90.0
    eval_every_min: float = 120.0
    eval_min: float = 6.0
    restarts: int = 0  # job restarts with no fault behind them
    restart_idle_min: float = 8.0
    storage_slowdowns_per_hour: float = 0.15
    agent_restarts: int = 0
    remounts: int = 0
    light_job: bool = True
    stalls: int = 0  # a rank hiccups and every rank waits in NCCL for 1-5 min, then the job goes on
    # share of nodes whose exporters (dcgm-exporter, all-smi) restart with the job's containers,
    # each down 1-4 min at its own moment after the restart
    restart_exporters: float = 0.0
    pcie_glitches: int = 0  # a GPU's exporter reports an impossible PCIe link width (32) for a while
    noisy_drops: bool = False  # drop counters ticking on every interface (count_noise.py)
    rare_nfs_ops: bool = False  # integer NFS op counts, a few a step on the home mount (count_noise.py)


QUIET = Benign(
    checkpoint_every_min=1e9, eval_every_min=1e9, storage_slowdowns_per_hour=0.0, light_job=False
)  # for tests that need a flat baseline


def plan_benign(
    grid: Grid, names: tuple[str, ...], light_nodes: tuple[int, ...], benign: Benign, seed: int
) -> list[Event]:
    """Draw the benign events of a run; cluster-wide events never overlap one another."""
    rng = np.random.default_rng([seed, 3])
    t0, t1 = grid.start, grid.end
    events: list[Event] = []
    busy: list[tuple[float, float]] = []

    def free(s: float, e: float) -> bool:
        return all(e <= bs or s >= be for bs, be in busy)

    hours = (t1 - t0) / 3600.0
    for frac in sorted(rng.uniform(0.25, 0.85, benign.restarts)):
        s = t0 + float(frac) * (t1 - t0)
        e = s + 60.0 * benign.restart_idle_min * float(rng.uniform(0.8, 1.3))
        if e < t1 and free(s, e + 600):
            events.append(Event("restart", s, e))
            busy.append((s - 300, e + 600))
    for kind, every, dur in (
        ("checkpoint", benign.checkpoint_every_min, benign.checkpoint_min),
        ("eval", benign.eval_every_min, benign.eval_min),
    ):
        s = t0 + 60.0 * every * float(rng.uniform(0.3, 1.0))
        while s < t1:
            e = s + 60.0 * dur * float(rng.uniform(0.8, 1.25))
            if e < t1 and free(s, e):
                events.append(Event(kind, s, e))
                busy.append((s, e + benign.rank0_linger_s))
            s += 60.0 * every * float(rng.uniform(0.95, 1.05))
    for frac in sorted(rng.uniform(0.15, 0.9, benign.stalls)):
        s = t0 + float(frac) * (t1 - t0)
        e = s + 60.0 * float(rng.uniform(1.0, 5.0))
        if e < t1 and free(s, e + 120):
            events.append(Event("stall", s, e, detail="a rank hiccuped; every rank waited in NCCL"))
            busy.append((s, e + 120))
    for _ in range(benign.pcie_glitches):
        s = t0 + float(rng.uniform(0.0, 0.8)) * (t1 - t0)
        e = min(t1, s + 60.0 * float(rng.uniform(10, 120)))
        node = names[int(rng.integers(len(names)))]
        events.append(Event("pcie_glitch", s, e, node=node, detail=f"gpu/{int(rng.integers(8))}: width 32"))
    for _ in range(int(rng.poisson(benign.storage_slowdowns_per_hour * hours))):
        s = t0 + float(rng.uniform(0, t1 - t0))
        e = min(t1, s + 60.0 * float(rng.uniform(5, 15)))
        events.append(Event("storage_slowdown", s, e, detail="all mounts, server side"))
    for kind, count, dur in (("agent_restart", benign.agent_restarts, 40.0), ("remount", benign.remounts, 5.0)):
        for _ in range(count):
            s = t0 + float(rng.uniform(0.1, 0.9)) * (t1 - t0)
            events.append(Event(kind, s, s + dur, node=names[int(rng.integers(len(names)))]))
    if benign.light_job:
        for n in light_nodes:
            s = t0 + float(rng.uniform(0.1, 0.35)) * (t1 - t0)
            e = t0 + float(rng.uniform(0.6, 0.9)) * (t1 - t0)
            events.append(Event("light_job", s, e, node=names[n]))
    for kind, on, what in (
        ("noisy_drops", benign.noisy_drops, "drop counters tick on every interface"),
        ("rare_nfs_ops", benign.rare_nfs_ops, "a few NFS calls a step on the home mount"),
    ):
        if on:
            events.append(Event(kind, t0, t1, detail=what))
    events.sort(key=lambda ev: (ev.start_ts, ev.kind))
    return events
