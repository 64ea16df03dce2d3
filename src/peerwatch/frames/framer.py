"""The one framer: each chunk of steps' aligned samples into frames the streamed engine judges.

``peerwatch analyze`` (a recording's stretch cut in chunks, engine.analyze_segments) and the live
service (each new step, service/evaluation.py) both feed it the latest sample of every series in
each step (``Cells``), and it decides alike whatever the chunking:

- rows: a family's series in the order they first had a sample (ties: the source's own order), a
  row once seen kept (NaN when silent), as the streamed engine needs (detect/stream.py);
- node identity: ``node_of`` with the catalogue's node labels for the family;
- counter or gauge: at once when the declared type (or the catalogue's) leaves no doubt, else
  the family is held back, unjudged, until a step where a series' value differs from its earlier
  one within the last ``HELD`` steps; those steps' values then decide (``kind_of``), and from that
  step on it is judged. A series that never moved has shown nothing either way;
- counters become per-second rates, each row's last sample carried from one chunk to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from peerwatch.frames import Frame, Kind, counter_rates, previous_index
from peerwatch.frames.frame_store import Cells, grow
from peerwatch.model import FloatArray, SeriesKey, node_of

IntArray = npt.NDArray[np.int64]
HELD = 20  # steps of raw values kept for a family whose kind is not yet known
# What a counter, a gauge and a constant look like: a family whose kind differs between them waits.
BEHAVIOURS = (np.array([[0.0, 1.0, 2.0]]), np.array([[1.0, 0.8, 1.0]]), np.array([[1.0, 1.0, 1.0]]))


@dataclass
class _Family:
    kind: Kind | None  # None: its values have not yet shown whether it is a counter
    declared: str | None
    row_of: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # source id -> row (-1: none)
    keys: list[SeriesKey] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    last_v: FloatArray = field(default_factory=lambda: np.zeros(0))  # counters: each row's last sample
    last_t: FloatArray = field(default_factory=lambda: np.zeros(0))
    last_seen: FloatArray = field(default_factory=lambda: np.zeros(0))
    held_v: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))  # undecided: the last HELD-1 steps
    held_t: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    frame_keys: tuple[SeriesKey, ...] = ()
    frame_nodes: tuple[str, ...] = ()


class Framer:
    """Turns consecutive chunks of ``Cells`` into frames with stable rows (see the module)."""

    def __init__(
        self,
        step: float,
        *,
        kind_of: Callable[[str, str | None, FloatArray], Kind],
        node_labels: tuple[str, ...] = ("node", "hostname", "Hostname"),
        node_labels_for: Callable[[str, tuple[str, ...]], tuple[str, ...]] | None = None,
        held: int = HELD,
    ) -> None:
        self.step = step
        self.kind_of = kind_of
        self.node_labels = node_labels
        self.node_labels_for = node_labels_for or (lambda _name, labels: labels)
        self.held = held
        self._families: dict[str, _Family] = {}
        self._nodes: dict[str, str] = {}

    @property
    def series(self) -> int:
        return sum(len(f.keys) for f in self._families.values())

    def frames(self, first: int, steps: int, cells: Mapping[str, Cells]) -> dict[str, Frame]:
        """Frames of every family judged so far on steps ``first..first+steps-1``."""
        placed: dict[str, tuple[FloatArray, FloatArray]] = {}
        for name, c in cells.items():
            fam = self._families.get(name)
            if fam is None:
                fam = self._families[name] = _Family(self._kind_at_once(name, c.declared), c.declared)
            fam.declared = fam.declared or c.declared
            placed[name] = self._place(name, fam, c, steps)
        out: dict[str, Frame] = {}
        for name, fam in self._families.items():
            n = len(fam.keys)
            values, times = placed.get(name) or (np.full((n, steps), np.nan), np.full((n, steps), np.nan))
            if fam.kind is None:
                at = self._decide(name, fam, values, times)
                if at is None:
                    continue
                values, times = values.copy(), times.copy()
                values[:, :at] = np.nan
                times[:, :at] = np.nan
            seen = ~np.isnan(times)
            if seen.any():
                fam.last_seen = np.maximum(fam.last_seen, np.max(np.where(seen, times, -np.inf), axis=1))
            if fam.kind == "rate":
                rates = counter_rates(values, times, before=(fam.last_v, fam.last_t))
                _carry(fam, values, times)
                values = rates
            assert fam.kind is not None
            out[name] = Frame(
                name=name,
                kind=fam.kind,
                start=first * self.step,
                step=self.step,
                keys=fam.frame_keys,
                nodes=fam.frame_nodes,
                values=values,
                last_seen=fam.last_seen.copy(),
                declared_type=fam.declared,
            )
        return out

    def _place(self, name: str, fam: _Family, c: Cells, steps: int) -> tuple[FloatArray, FloatArray]:
        """The chunk's values and times on the family's rows, new series appended first."""
        if c.ids.size and int(c.ids.max()) >= fam.row_of.size:
            fam.row_of = grow(fam.row_of, max(int(c.ids.max()) + 1, 2 * fam.row_of.size), -1)
        unknown = np.flatnonzero(fam.row_of[c.ids] < 0)  # as a rule none after a family's first chunk
        seen = ~np.isnan(c.values[unknown])
        has = seen.any(axis=1)
        new = unknown[has]
        if new.size:
            # In the order of their first sample, ties in the source's order: a chunk adds rows as
            # its steps one by one would.
            new = new[np.lexsort((c.ids[new], np.argmax(seen[has], axis=1)))]
            labels = self.node_labels_for(name, self.node_labels)
            keys = [c.key_of(i) for i in c.ids[new].tolist()]
            fam.row_of[c.ids[new]] = np.arange(len(fam.keys), len(fam.keys) + len(keys))
            fam.keys.extend(keys)
            nodes = (node_of(dict(key.labels), labels) for key in keys)
            fam.nodes.extend(self._nodes.setdefault(n, n) for n in nodes)  # one string per node, not per series
            n = len(fam.keys)
            fam.last_v, fam.last_t = grow(fam.last_v, n, np.nan), grow(fam.last_t, n, np.nan)
            fam.last_seen = grow(fam.last_seen, n, -np.inf)
            fam.frame_keys, fam.frame_nodes = tuple(fam.keys), tuple(fam.nodes)
        rows = fam.row_of[c.ids]
        if rows.size == len(fam.keys) and (rows == np.arange(rows.size)).all():
            return c.values, c.times  # every row, in order (the usual chunk): nothing to move
        ok = rows >= 0
        values = np.full((len(fam.keys), steps), np.nan)
        times = np.full((len(fam.keys), steps), np.nan)
        values[rows[ok]] = c.values[ok]
        times[rows[ok]] = c.times[ok]
        return values, times

    def _kind_at_once(self, name: str, declared: str | None) -> Kind | None:
        """The family's kind if its values cannot change it, else None."""
        kinds = {self.kind_of(name, declared, values) for values in BEHAVIOURS}
        return kinds.pop() if len(kinds) == 1 else None

    def _decide(self, name: str, fam: _Family, values: FloatArray, times: FloatArray) -> int | None:
        """The chunk's step at which an undecided family's kind is decided (None: still held).

        Decided at the first step where a series' value differs from its last one within the
        ``held`` steps up to it, by ``kind_of`` over those steps; the earlier samples in them are
        carried, so the first rate judged is right."""
        n, steps = values.shape
        window_v = np.concatenate([grow(fam.held_v, n, np.nan), values], axis=1)
        window_t = np.concatenate([grow(fam.held_t, n, np.nan), times], axis=1)
        h = window_v.shape[1] - steps
        prev = previous_index(~np.isnan(window_v))
        col = np.arange(window_v.shape[1])
        recent = (prev >= 0) & (prev > col - self.held)
        before = np.take_along_axis(window_v, np.maximum(prev, 0), axis=1)
        moved = (recent & (window_v != before) & ~np.isnan(window_v)).any(axis=0)
        moved[:h] = False
        hits = np.flatnonzero(moved)
        if not hits.size:
            fam.held_v = window_v[:, -(self.held - 1) :] if self.held > 1 else window_v[:, :0]
            fam.held_t = window_t[:, -(self.held - 1) :] if self.held > 1 else window_t[:, :0]
            return None
        c = int(hits[0])
        lo = max(0, c - self.held + 1)
        fam.kind = self.kind_of(name, fam.declared, window_v[:, lo : c + 1])
        _carry(fam, window_v[:, lo:c], window_t[:, lo:c])
        fam.held_v = fam.held_t = np.zeros((0, 0))
        return c - int(h)


def _carry(fam: _Family, values: FloatArray, times: FloatArray) -> None:
    """Each row's last sample in ``values`` becomes the one the next rate starts from."""
    if values.shape[1] == 0:
        return
    seen = ~np.isnan(values)
    at = values.shape[1] - 1 - np.argmax(seen[:, ::-1], axis=1)
    have = np.flatnonzero(seen.any(axis=1))
    fam.last_v[have], fam.last_t[have] = values[have, at[have]], times[have, at[have]]
