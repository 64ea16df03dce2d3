"""Turning score arrays into Finding objects, with the evidence a person reads."""

from __future__ import annotations

import numpy as np

from peerwatch.detect.context import Context, Series
from peerwatch.model import Evidence, Finding, FloatArray


def _fmt(x: float) -> str:
    return f"{x:.4g}" if x == x else "missing"


def emit(
    ctx: Context,
    s: Series,
    score: FloatArray,
    reference: FloatArray | None,
    z: FloatArray | None,
    threshold: float,
    detector: str,
    what: str,
    hint: str | None = None,
) -> list[Finding]:
    """A finding for every cell of ``score`` at or above ``threshold`` (NaN never is)."""
    rows, cols = np.nonzero(score >= threshold)
    on_node = s.node_index[rows] >= 0
    rows, cols = rows[on_node], cols[on_node]
    if rows.size == 0:
        return []
    # Each column of cells taken out at once, as Python numbers (cell by cell cost more than the
    # findings themselves: the peer detector emits ~50 k on the 63-node reference).
    name, keys, components = s.frame.name, s.frame.keys, s.components
    nodes = [ctx.nodes[i] for i in s.node_index[rows].tolist()]
    times = ctx.timestamps[cols].tolist()
    values = s.values[rows, cols].tolist()
    scores = score[rows, cols].tolist()
    refs: list[float] | list[None] = reference[rows, cols].tolist() if reference is not None else [None] * rows.size
    zs: list[float] | list[None] = z[rows, cols].tolist() if z is not None else [None] * rows.size
    out = []
    for r, ts, node, value, ref, zz, sc in zip(rows.tolist(), times, nodes, values, refs, zs, scores, strict=True):
        note = f"{_fmt(value)} {what} {_fmt(ref)}" if ref is not None else f"{_fmt(value)} {what}"
        out.append(
            Finding(
                ts, node, components[r], detector, name, sc, Evidence(name, keys[r].labels, value, ref, zz, note), hint
            )
        )
    return out
