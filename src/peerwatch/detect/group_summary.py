"""Who was compared with whom: each node's peer group over a run, in words for logs and pages."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from peerwatch.detect.context import IntArray
from peerwatch.detect.groups import IDLE, LONE, MAIN, OTHER

NAMES = {
    MAIN: "main job",
    OTHER: "second job",
    IDLE: "idle",
    LONE: "not compared (shares its work with no node)",
}
ORDER = (MAIN, OTHER, IDLE, LONE)


def tally(groups: IntArray) -> IntArray:
    """(nodes, len(ORDER)) how many steps each node spent in each group: summed over a streamed
    run's chunks (new nodes padded with zeros), it is the run's."""
    return np.stack([(groups == code).sum(axis=1) for code in ORDER], axis=1).astype(np.int64)


def standing(counts: IntArray) -> IntArray:
    """Each node's most frequent group (``tally``; ties: the lower code)."""
    out: IntArray = np.asarray(ORDER, dtype=np.int64)[np.argmax(counts, axis=1)]
    return out


def members(nodes: Sequence[str], counts: IntArray) -> dict[int, list[str]]:
    """The nodes of each group present, by their standing over the run (``tally``)."""
    where = standing(counts) if counts.any() else np.full(len(nodes), MAIN)
    out = {code: [n for n, g in zip(nodes, where, strict=True) if g == code] for code in ORDER}
    return {code: names for code, names in out.items() if names}


def _names(nodes: list[str], most: int) -> str:
    shown = ", ".join(nodes[:most])
    return shown + (f", … {len(nodes) - most} more" if len(nodes) > most else "")


def summary(nodes: Sequence[str], counts: IntArray, most: int = 12) -> str:
    """One line: how many nodes each group held for most of the run (``tally``), naming all but the
    main job's."""
    parts = []
    for code, names in members(nodes, counts).items():
        listed = "" if code == MAIN else f" ({_names(names, most)})"
        parts.append(f"{NAMES[code]}: {len(names)} node{'s' if len(names) != 1 else ''}{listed}")
    return "peer groups (most of the run): " + "; ".join(parts)
