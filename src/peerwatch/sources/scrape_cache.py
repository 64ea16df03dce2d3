"""The scrape cache: a series a target has served before costs a hash lookup, not a parse.

Prometheus keeps one per target for the same reason: an exporter serves the same series every
scrape, and parsing and labelling each line again is most of a scrape's cost (about 7 µs a line
here, against well under 1 µs for the split and lookup). A line's *head*, its text up to the
value, stands for its series. The cache learns a target's heads from a full parse of a body and
takes a later body only when every sample line's head is known; any new, malformed or unusual
line sends the whole body to the full parse again, which reports it and teaches the cache anew.
So the cache changes the cost of a scrape, not its result. A head is kept as its 64-bit hash
(Python's, randomly keyed per process), 16 bytes a series with its id instead of its text: a new
line would be taken for a known one only if its head's hash equalled one of the same target's
(odds of about 1 in 10^16 per new line at a thousand series per target).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray

IntArray = npt.NDArray[np.int64]

# One line: a sample (name, labels up to the last "}", value, optional timestamp), a comment, a
# blank, or anything else (which the cache does not take). A head has no "#", so an OpenMetrics
# exemplar ("# {trace_id=...} 1") never passes for part of one; nor a blank before the labels.
_LINE = re.compile(
    rb"^(?:([^\s{#]+(?:\{[^\n#]*\})?)[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t\r]*|#[^\n]*|[ \t\r]*|([^\n]+))$", re.M
)
_VALUES = re.compile(rb"(?:(?:[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|NaN|[-+]?Inf)\n)*")
_STAMPS = re.compile(rb"(?:(?:[-+]?[0-9]{1,18}(?:\.[0-9]+)?)?\n)*")


@dataclass(frozen=True, slots=True)
class Lines:
    """The sample lines of a body, in order: their heads' hashes, values and timestamps."""

    heads: IntArray
    values: FloatArray
    stamps: FloatArray | None  # epoch seconds, NaN for a line without; None when no line has one


def split_lines(body: bytes) -> Lines | None:
    """The sample lines of ``body``; None if a line is not a plain sample, comment or blank."""
    rows = _LINE.findall(body)
    if any(r[3] for r in rows):
        return None
    rows = [r for r in rows if r[0]]
    if not rows:
        return Lines(np.zeros(0, dtype=np.int64), np.zeros(0), None)
    values = b"\n".join([r[1] for r in rows]) + b"\n"
    stamps = b"\n".join([r[2] for r in rows]) + b"\n"
    has_stamps = len(stamps) > len(rows)
    if _VALUES.fullmatch(values) is None or (has_stamps and _STAMPS.fullmatch(stamps) is None):
        return None
    heads = np.fromiter((hash(r[0]) for r in rows), np.int64, len(rows))
    vals = np.array(values.split(b"\n")[:-1]).astype(np.float64)
    inf = np.isinf(vals)
    if inf.any() and any(rows[i][1][-1:] != b"f" for i in np.flatnonzero(inf).tolist()):
        return None  # an overflowing literal (1e400): an error the full parse reports
    return Lines(heads, vals, _seconds([r[2] for r in rows]) if has_stamps else None)


def _seconds(stamps: list[bytes]) -> FloatArray:
    # As the parser reads them: integer milliseconds, or (lenient) float seconds.
    return np.array([np.nan if not s else (float(s) if b"." in s else int(s) / 1000) for s in stamps], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class _Known:
    heads: IntArray  # sorted
    ids: IntArray  # the buffer id of each head


class ScrapeCache:
    """Per target (any hashable key, e.g. its URL and labels): head -> the id its series has in the buffer."""

    def __init__(self) -> None:
        self._known: dict[object, _Known] = {}

    def ids(self, target: object, lines: Lines) -> IntArray | None:
        """The series id of each line, or None unless every head is known for ``target``."""
        known = self._known.get(target)
        if known is None or not len(known.heads):
            return None
        pos = np.searchsorted(known.heads, lines.heads).clip(max=len(known.heads) - 1)
        if not np.array_equal(known.heads[pos], lines.heads):
            return None
        ids: IntArray = known.ids[pos]
        return ids

    def learn(self, target: object, lines: Lines, ids: IntArray, values: FloatArray) -> bool:
        """Take the heads of ``lines`` as the series ``ids`` that the full parse found, one per line
        with ``values``. Refused (and ``target`` forgotten) unless the parse and the split agree line
        for line, and no two lines share a head."""
        order = np.argsort(lines.heads, kind="stable")
        heads = lines.heads[order]
        agree = len(ids) == len(values) == len(heads) and np.array_equal(values, lines.values, equal_nan=True)
        if not agree or np.any(heads[1:] == heads[:-1]):
            self._known.pop(target, None)
            return False
        self._known[target] = _Known(heads, ids[order])
        return True

    def forget(self, target: object) -> None:
        self._known.pop(target, None)

    def retain(self, targets: Collection[object]) -> None:
        """Forget every target but ``targets``."""
        for gone in self._known.keys() - targets:
            del self._known[gone]

    def __len__(self) -> int:
        return len(self._known)
