"""Prometheus text exposition (0.0.4) with timestamps, for recordings that want text rather than JSON."""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO

import numpy as np

from peerwatch.model import SeriesBlock, SeriesKey


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def series_text(key: SeriesKey) -> str:
    """``name{a="1",b="2"}`` with label values escaped as the text format requires."""
    if not key.labels:
        return key.name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in key.labels)
    return f"{key.name}{{{inner}}}"


def format_value(v: float) -> str:
    """Shortest text that reads back as the same float; NaN and infinities as Prometheus spells them."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() or abs(v) >= 1e16 else str(int(v))


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
