"""Benign oddities of real exporters and schedulers that are not faults of the node.

- A GPU's exporter reporting an impossible value for a while (a PCIe link width of 32 lanes, read
  from a register mid-retrain or by a buggy driver build): a data problem, not a downgrade of
  every other link.
- Exporters that run as containers of the job's pods (or restart with them) going away during a
  job restart, each node's at its own moment, for a minute or a few.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from peerwatch.simulate.cluster import Layout
from peerwatch.simulate.events import Event
from peerwatch.simulate.fault_kit import Down
from peerwatch.simulate.signals import AnyArray
from peerwatch.simulate.targets import EXPORTER_INDEX, EXPORTERS, Grid

GLITCH_WIDTH = 32.0


def glitch(arrays: dict[str, AnyArray], events: Sequence[Event], layout: Layout, grid: Grid) -> None:
    """Write each ``pcie_glitch`` event's impossible width into the GPU arrays (in place)."""
    for ev in events:
        if ev.kind != "pcie_glitch" or ev.node is None or ev.detail is None:
            continue
        gpu = int(ev.detail.split(":")[0].removeprefix("gpu/"))
        on = (grid.times >= ev.start_ts) & (grid.times < ev.end_ts)
        arrays["pcie_width"][layout.index(ev.node), gpu, on] = GLITCH_WIDTH


def restarted_exporters(
    events: Sequence[Event], names: tuple[str, ...], grid: Grid, share: float, seed: int
) -> tuple[tuple[Down, ...], tuple[Event, ...]]:
    """Exporters restarted with the job's containers after each job restart, and their events."""
    if share <= 0:
        return (), ()
    rng = np.random.default_rng([seed, 12])
    downs, labelled = [], []
    for ev in events:
        if ev.kind != "restart":
            continue
        for node in np.flatnonzero(rng.random(len(names)) < share):
            for exporter in ("dcgm", "allsmi"):
                x = EXPORTER_INDEX[exporter]
                start = ev.start_ts + float(rng.uniform(0.0, ev.end_ts - ev.start_ts + 120.0))
                end = start + float(rng.uniform(60.0, 240.0))
                downs.append(Down(int(node), x, grid.index(start), grid.index(end)))
                labelled.append(Event("exporter_restart", start, end, node=names[node], detail=EXPORTERS[x].job))
    return tuple(downs), tuple(labelled)
