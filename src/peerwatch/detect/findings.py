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
    rows, cols = np.nonzero(np.nan_to_num(score, nan=0.0) >= threshold)
    if rows.size == 0:
        return []
    times = ctx.timestamps
    values = s.values
    out = []
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        node_i = int(s.node_index[r])
        if node_i < 0:
            continue
        value = float(values[r, c])
        ref = float(reference[r, c]) if reference is not None else None
        zz = float(z[r, c]) if z is not None else None
        note = f"{_fmt(value)} {what} {_fmt(ref)}" if ref is not None else f"{_fmt(value)} {what}"
        out.append(
            Finding(
                ts=float(times[c]),
                node=ctx.nodes[node_i],
                component=s.components[r],
                detector=detector,
                signal=s.frame.name,
                score=float(score[r, c]),
                evidence=Evidence(s.frame.name, s.frame.keys[r].labels, value, ref, zz, note),
                hint=hint,
            )
        )
    return out
