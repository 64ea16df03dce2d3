"""Frames built by hand for detector tests."""

from __future__ import annotations

import numpy as np

from peerwatch.frames import Frame, Kind
from peerwatch.model import FloatArray, SeriesKey


def make_frame(
    name: str, rows: list[dict[str, str]], values: FloatArray, start: float, step: float, kind: Kind = "gauge"
) -> Frame:
    """A frame of ``rows`` (label sets; node from ``Hostname`` or ``instance``) over ``values``."""
    return Frame(
        name=name,
        kind=kind,
        start=start,
        step=step,
        keys=tuple(SeriesKey.of(name, r) for r in rows),
        nodes=tuple(r.get("Hostname") or r["instance"].split(":")[0] for r in rows),
        values=values,
        last_seen=np.full(len(rows), start + step * (values.shape[1] - 1)),
    )
