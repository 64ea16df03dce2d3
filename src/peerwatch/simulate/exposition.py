"""Prometheus text exposition (0.0.4) with timestamps, for recordings that want text rather than JSON."""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO

import numpy as np

from peerwatch import promtext
from peerwatch.model import SeriesBlock, SeriesKey
from peerwatch.promtext import format_value


def series_text(key: SeriesKey) -> str:
    """``name{a="1",b="2"}`` with label values escaped as the text format requires."""
    return promtext.series_text(key.name, key.labels)


def write_prom_text(blocks: Iterable[SeriesBlock], out: BinaryIO) -> int:
    """Write blocks as text lines ``series value timestamp_ms``, with HELP-less TYPE lines once per
    family (the first time it appears); returns the number of sample lines."""
    typed: set[str] = set()
    lines = 0
    for block in blocks:
        name = block.key.name
        if name not in typed:
            typed.add(name)
            out.write(f"# TYPE {name} {block.mtype or 'untyped'}\n".encode())
        head = series_text(block.key)
        ms = np.rint(block.timestamps * 1000.0).astype(np.int64).tolist()
        text = "".join(f"{head} {format_value(v)} {t}\n" for v, t in zip(block.values.tolist(), ms, strict=True))
        out.write(text.encode())
        lines += len(ms)
    return lines
