"""How the dashboard writes times, numbers and labels (data time, UTC)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping


def clock(ts: float | None) -> str:
    """Data time as ``2025-11-30 00:13:30Z``; ``-`` when unknown."""
    if ts is None or not math.isfinite(ts):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h``, ``2.1 d``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def number(x: float | None) -> str:
    """Four significant digits; ``-`` for missing."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.4g}"


def count(n: int, word: str, many: str | None = None) -> str:
    """``1 node``, ``3 nodes``, ``0 nodes`` (``many``: an irregular plural)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def labels_text(labels: Mapping[str, str]) -> str:
    """``{gpu="2", device="nvidia2"}`` without the labels that only say where a series came from."""
    shown = {k: v for k, v in labels.items() if k not in _NOISE}
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}" if shown else ""


_NOISE = frozenset({"job", "UUID", "uuid", "gpu_uuid", "pci_bus_id", "modelName", "DCGM_FI_DRIVER_VERSION"})
