"""A node's series against its peers' band over time: what the evidence plots draw.

The series are the frames the engine judged, kept over the window (``frames/history.py``: every
other step at 30 s, counters as rates); peers are found with the engine's own peer keys
(``detect.context.prepare``): the same metric and variant labels on other entities. Spares are
left out of the peers (an idle spare is not what a busy node should look like).
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from peerwatch.catalog.load import Catalog
from peerwatch.catalog.units import unit_rules
from peerwatch.detect.context import prepare
from peerwatch.frames import Frame
from peerwatch.model import FloatArray
from peerwatch.web.state import FrameWindow

LOW, HIGH = 10.0, 90.0  # the band: 10th to 90th percentile of the peers at each step


@dataclass(frozen=True, slots=True)
class PeerBand:
    """One entity's series and its peers' median and band, on the step grid (NaN: no data)."""

    node: str
    metric: str
    component: str
    timestamps: FloatArray
    value: FloatArray
    median: FloatArray
    low: FloatArray
    high: FloatArray
    peers: int  # series compared with (other nodes' entities; per node when averaged)
    unit: str = ""  # of the values as drawn (counters as rates: "B/s"); "" when nothing says

    def as_json(self) -> dict[str, object]:
        def clean(a: FloatArray) -> list[float | None]:
            return [None if math.isnan(x) else round(x, 6) for x in a.tolist()]

        return {
            "node": self.node,
            "metric": self.metric,
            "component": self.component,
            "unit": self.unit,
            "band": [LOW, HIGH],
            "peers": self.peers,
            "timestamps": self.timestamps.tolist(),
            "value": clean(self.value),
            "median": clean(self.median),
            "low": clean(self.low),
            "high": clean(self.high),
        }


def peer_band(
    frame: Frame,
    node: str,
    *,
    labels: Mapping[str, str] | None = None,
    component: str | None = None,
    exclude: Collection[str] = (),
) -> PeerBand | None:
    """``node``'s series of ``frame`` (the one with ``labels``, or the mean of those of ``component``,
    or of the whole node) against its peers on other nodes; None when the node has no such series."""
    (series,), _ = prepare({frame.name: frame}, Catalog.default())
    keys = frame.keys
    mine = [
        i
        for i, n in enumerate(frame.nodes)
        if n == node
        and (labels is None or all(keys[i].get(k) == v for k, v in labels.items()))
        and (component is None or series.components[i] == component)
    ]
    if not mine:
        return None
    values = frame.values
    comp = series.components[mine[0]] if len({series.components[i] for i in mine}) == 1 else "node"
    peer_keys = set(series.peer_key[mine].tolist())
    others = np.array(
        [
            i
            for i, n in enumerate(frame.nodes)
            if n != node and n not in exclude and int(series.peer_key[i]) in peer_keys
        ],
        dtype=np.int64,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN steps stay NaN
        if len(mine) == 1:
            own = values[mine[0]]
            peers = values[others] if others.size else np.full((0, frame.steps), np.nan)
            # peers of the same node count too (the other GPUs), as in the engine
            same = [i for i, n in enumerate(frame.nodes) if n == node and i != mine[0]]
            same = [i for i in same if int(series.peer_key[i]) in peer_keys]
            if same:
                peers = np.vstack([peers, values[same]])
        else:  # several entities of one node (a node-level view): compare node means
            own = np.nanmean(values[mine], axis=0)
            peers = _per_node_mean(values, others, frame.nodes)
        if peers.shape[0]:
            low, median, high = np.nanpercentile(peers, [LOW, 50.0, HIGH], axis=0)
        else:
            low = median = high = np.full(frame.steps, np.nan)
    unit = unit_rules().unit(frame.name, frame.kind == "rate")
    return PeerBand(node, frame.name, comp, frame.timestamps, own, median, low, high, int(peers.shape[0]), unit)


def _per_node_mean(values: FloatArray, rows: np.ndarray, nodes: tuple[str, ...]) -> FloatArray:
    by_node: dict[str, list[int]] = {}
    for i in rows.tolist():
        by_node.setdefault(nodes[i], []).append(i)
    if not by_node:
        return np.full((0, values.shape[1]), np.nan)
    return np.vstack([np.nanmean(values[idx], axis=0) for idx in by_node.values()])


class BandCache:
    """Frames of the metrics recently plotted, per history state: a page of plots reads each metric once."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._frames: dict[tuple[str, float, float, float | None], Frame | None] = {}

    def frame(self, history: FrameWindow, metric: str, start: float, end: float) -> Frame | None:
        key = (metric, start, end, history.newest)
        with self._lock:
            if key in self._frames:
                return self._frames[key]
        frame = history.frame(metric, start, end)
        with self._lock:
            if len(self._frames) >= self.size:
                self._frames.pop(next(iter(self._frames)))
            self._frames[key] = frame
        return frame
