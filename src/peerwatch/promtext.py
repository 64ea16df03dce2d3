"""Writing the Prometheus text format (0.0.4): label values, HELP text, sample values, series.

Every place that renders exposition (``/metrics``, the write-back, the agent, the simulator's
exporters and recordings) goes through these, so none can drift from the format. Reading the
format is ``peerwatch.sources.exposition``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

_EXACT_INT = 2.0**53  # below this every integer-valued float prints exactly as an int


def escape_label_value(value: str) -> str:
    """A label value as the text format and PromQL selectors write it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(value: str) -> str:
    """HELP text: only backslash and newline are escaped there."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value as Prometheus reads it: the shortest text that reads back as the same float.

    Any real number is accepted (a numpy scalar's own ``repr`` is ``np.float64(1.5)``, which
    Prometheus rejects along with the whole scrape); NaN and infinities as Prometheus spells them.
    """
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if v.is_integer() and abs(v) < _EXACT_INT else repr(v)


def series_text(name: str, labels: Iterable[tuple[str, str]]) -> str:
    """``name{a="1",b="2"}`` (labels in the order given), or ``name`` without labels."""
    inner = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels)
    return f"{name}{{{inner}}}" if inner else name


def sample_line(name: str, labels: Iterable[tuple[str, str]], value: float, timestamp_ms: int | None = None) -> str:
    """One sample line, optionally with a millisecond timestamp."""
    line = f"{series_text(name, labels)} {format_value(value)}"
    return line if timestamp_ms is None else f"{line} {timestamp_ms}"
