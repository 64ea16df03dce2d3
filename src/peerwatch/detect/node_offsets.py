"""A node's offset from its peers, pooled over its GPUs (or IB ports): what fail-slow is judged on.

Each series is compared with the same peer key (same GPU index or port on other nodes, as the peer
detector does) on the other nodes of the main job at each step: its relative offset is
``value / peer median - 1``. A node's pooled offset for a family of signals is the median of its
series' offsets: one GPU's noise hardly moves it, while a node whose every GPU runs a few per cent
slower moves it by that much. Several exporters' families of one signal (dcgm-exporter's
utilisation and all-smi's, an older exporter's GR engine activity beside a newer one's SM
activity) pool together, each against its own peers, so nodes on different exporter versions are
judged alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from peerwatch.detect.context import IntArray, Series
from peerwatch.detect.grouped import fold_into
from peerwatch.detect.peer import column_quantile
from peerwatch.model import BoolArray, FloatArray

CHUNK_CELLS = 2_000_000  # series x steps pooled at once (16 MB of float64; the sort doubles it)


def node_median(x: FloatArray, node_index: IntArray, n_nodes: int) -> FloatArray:
    """(nodes, steps): the median over each node's rows of ``x`` at each step, NaN where none is known."""
    ok = np.flatnonzero(node_index >= 0)
    if ok.size == 0:
        return np.full((n_nodes, x.shape[1]), np.nan)
    nodes = node_index[ok]
    order = np.argsort(nodes, kind="stable")
    nodes, rows = nodes[order], ok[order]
    first = np.searchsorted(nodes, nodes, side="left")
    slot = np.arange(nodes.size) - first  # position of each row among its node's rows
    cube = np.full((int(slot.max()) + 1, n_nodes, x.shape[1]), np.nan)
    cube[slot, nodes] = x[rows]
    med: FloatArray = column_quantile(cube.reshape(cube.shape[0], -1), 0.5).reshape(n_nodes, x.shape[1])
    return med


def offsets(s: Series, peers: BoolArray, min_peers: int, relative: bool = True) -> FloatArray:
    """(rows, steps): each series' value over its peer key's median on the ``peers`` nodes, minus 1
    (``relative``), or minus that median (temperatures: degrees, not shares).

    NaN where the series is unknown, its node unknown, fewer than ``min_peers`` peers report, or (relative)
    the peer median is not positive: an idle family says nothing in relative terms."""
    v = s.values
    node_ok = s.node_index >= 0
    on_peer = np.zeros(v.shape, dtype=bool)
    on_peer[node_ok] = peers[s.node_index[node_ok]]
    out = np.full(v.shape, np.nan)
    for key in np.unique(s.peer_key[s.peer_key >= 0]):
        rows = np.flatnonzero((s.peer_key == key) & node_ok)
        x = np.where(on_peer[rows], v[rows], np.nan)
        n = np.sum(~np.isnan(x), axis=0)
        med = column_quantile(x, 0.5)
        if relative:
            good = (n >= min_peers) & (med > 0)
            with np.errstate(all="ignore"):
                out[rows] = np.where(good, v[rows] / np.where(good, med, 1.0) - 1.0, np.nan)
        else:
            out[rows] = np.where(n >= min_peers, v[rows] - med, np.nan)
    return out


def pooled(
    by_name: Mapping[str, Series],
    names: Sequence[str],
    peers: BoolArray,
    min_peers: int,
    relative: bool = True,
) -> FloatArray | None:
    """(nodes, steps): each node's median offset over every series of the families ``names`` it
    reports; None when the data has none of them."""
    found = [by_name[n] for n in names if n in by_name]
    if not found:
        return None
    idx = np.concatenate([s.node_index for s in found])
    steps = peers.shape[1]
    out = np.full((peers.shape[0], steps), np.nan)
    block = max(1, CHUNK_CELLS // max(1, idx.size))  # steps are independent: a long run goes in blocks
    for a in range(0, steps, block):
        b = min(steps, a + block)
        part = [replace(s, frame=replace(s.frame, values=s.values[:, a:b])) for s in found]
        x = np.concatenate([offsets(s, peers[:, a:b], min_peers, relative) for s in part], axis=0)
        out[:, a:b] = node_median(x, idx, peers.shape[0])
    return out


def node_share(s: Series, flag: BoolArray, n_nodes: int) -> FloatArray:
    """(nodes, steps): the share of each node's reporting series with ``flag`` set (NaN: none report)."""
    ok = s.node_index >= 0
    known = ~np.isnan(s.values[ok])
    total = np.zeros((n_nodes, s.values.shape[1]))
    count = np.zeros_like(total)
    fold_into(np.add, total, s.node_index[ok], flag[ok] & known)
    fold_into(np.add, count, s.node_index[ok], known)
    with np.errstate(all="ignore"):
        share: FloatArray = np.where(count > 0, total / np.maximum(count, 1.0), np.nan)
    return share


def group_level(s: Series, peers: BoolArray) -> FloatArray:
    """(steps,): the family's median over the peers' series at each step (NaN where none report)."""
    node_ok = s.node_index >= 0
    on = np.zeros(s.values.shape, dtype=bool)
    on[node_ok] = peers[s.node_index[node_ok]]
    return column_quantile(np.where(on, s.values, np.nan), 0.5)
