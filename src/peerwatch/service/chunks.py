"""The live service's frames: the samples of the steps not yet judged, with rows in a fixed order.

The streamed engine (detect/stream.py) needs each frame's rows in the order of the chunks before,
new series appended, and every series seen once present from then on (NaN when silent, which is
what the presence detector reads). Counters become rates across chunks: each row's last sample is
carried to the next chunk. A family whose type its values must show (an untyped counter) waits,
unjudged, until its last ``HELD`` steps show a counter or a gauge; the rest are decided at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from peerwatch.catalog.classify import observed_kind
from peerwatch.detect.stream import grow
from peerwatch.frames import EARLIEST_TS, FUTURE_SLACK, Frame, Kind, counter_rates
from peerwatch.model import FloatArray, ProblemLog, SeriesKey, node_of
from peerwatch.service.buffer import SampleBuffer

IntArray = npt.NDArray[np.int64]

HELD = 20  # steps of raw values kept for a family whose type is not yet known
# What a counter, a gauge and a constant look like: a family whose kind differs between them waits.
BEHAVIOURS = (np.array([[0.0, 1.0, 2.0]]), np.array([[1.0, 0.8, 1.0]]), np.array([[1.0, 1.0, 1.0]]))


@dataclass
class _Family:
    kind: Kind | None  # None: its values have not yet shown whether it is a counter
    declared: str | None
    index: int
    keys: list[SeriesKey] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    last_v: FloatArray = field(default_factory=lambda: np.zeros(0))  # counters: each row's last sample
    last_t: FloatArray = field(default_factory=lambda: np.zeros(0))
    last_seen: FloatArray = field(default_factory=lambda: np.zeros(0))
    held_v: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))  # undecided: the last steps' samples
    held_t: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    frame_keys: tuple[SeriesKey, ...] = ()  # keys and nodes as frames carry them, rebuilt when rows are added
    frame_nodes: tuple[str, ...] = ()

    def add(self, key: SeriesKey, node: str) -> int:
        """A new series' row (``grow`` makes room for its sample memory)."""
        self.keys.append(key)
        self.nodes.append(node)
        return len(self.keys) - 1

    def grow(self) -> None:
        new = len(self.keys) - self.last_v.size
        if new:
            self.last_v = np.r_[self.last_v, np.full(new, np.nan)]
            self.last_t = np.r_[self.last_t, np.full(new, np.nan)]
            self.last_seen = np.r_[self.last_seen, np.full(new, -np.inf)]
            self.frame_keys, self.frame_nodes = tuple(self.keys), tuple(self.nodes)


class ChunkFrames:
    """Turns each chunk's samples into frames on steps ``first..last`` with stable rows."""

    def __init__(
        self,
        step: float,
        *,
        kind_of: Callable[[str, str | None, FloatArray], Kind],
        node_labels: tuple[str, ...],
        node_labels_for: Callable[[str, tuple[str, ...]], tuple[str, ...]],
        problems: ProblemLog | None = None,
    ) -> None:
        self.step = step
        self.kind_of = kind_of
        self.node_labels, self.node_labels_for = node_labels, node_labels_for
        self.problems = problems if problems is not None else ProblemLog(limit=20)
        self._families: dict[str, _Family] = {}
        self._names: list[str] = []  # family index -> name
        self._family: IntArray = np.zeros(0, dtype=np.int64)  # buffer series id -> family index
        self._row: IntArray = np.zeros(0, dtype=np.int64)  # buffer series id -> row in its family
        self._nodes: dict[str, str] = {}

    def _register(self, buffer: SampleBuffer, stop: int) -> None:
        """Place the buffer's series with ids up to ``stop`` not yet placed: a row each, in id order."""
        start = self._family.size
        if stop <= start:
            return
        family, row = np.zeros(stop - start, dtype=np.int64), np.zeros(stop - start, dtype=np.int64)
        for i, (key, mtype) in enumerate(buffer.series_of(start, stop)):
            fam = self._families.get(key.name)
            if fam is None:
                fam = self._families[key.name] = _Family(self._kind_at_once(key.name, mtype), mtype, len(self._names))
                self._names.append(key.name)
            fam.declared = fam.declared or mtype
            node = node_of(dict(key.labels), self.node_labels_for(key.name, self.node_labels))
            node = self._nodes.setdefault(node, node)  # one string per node, not per series
            family[i], row[i] = fam.index, fam.add(key, node)
        for fam in self._families.values():
            fam.grow()
        self._family, self._row = np.r_[self._family, family], np.r_[self._row, row]

    @property
    def series(self) -> int:
        return sum(len(f.keys) for f in self._families.values())

    def frames(self, buffer: SampleBuffer, first: int, last: int, now: float) -> dict[str, Frame]:
        """Frames of every family seen so far on steps ``first..last`` from the buffer's samples there
        (step k holds the latest sample in ``((k-1)*step, k*step]``)."""
        width = last - first + 1
        ids, ts, vals = buffer.between((first - 1) * self.step, last * self.step)
        keep = np.isfinite(vals) & (ts >= EARLIEST_TS) & (ts <= now + FUTURE_SLACK)
        if not keep.all():
            self.problems.add("samples", f"{int((~keep).sum())} non-finite or impossibly timed samples dropped")
            ids, ts, vals = ids[keep], ts[keep], vals[keep]
        self._register(buffer, int(ids.max(initial=-1)) + 1)
        col = (np.ceil(ts / self.step - 1e-9) - first).astype(np.int32)
        # The latest sample of each (series, step) wins, whatever the arrival order. Times and
        # values are gathered once, for the winners only: a backlog's slice is millions of samples.
        order = np.lexsort((ts, col, ids))
        ids, col = ids[order], col[order]
        latest = np.ones(ids.size, dtype=bool)
        latest[:-1] = (ids[1:] != ids[:-1]) | (col[1:] != col[:-1])
        won = order[latest]
        ids, col, ts, vals = ids[latest], col[latest], ts[won], vals[won]
        fam_of = self._family[ids]
        by_family = np.argsort(fam_of, kind="stable")
        # Where each family's run starts, and the end (none when the step brought no samples).
        bounds = np.flatnonzero(np.diff(fam_of[by_family], prepend=-1, append=-1))
        placed: dict[str, tuple[FloatArray, FloatArray]] = {}
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            pick = by_family[a:b]
            name = self._names[int(fam_of[pick[0]])]
            fam = self._families[name]
            rows, cols = self._row[ids[pick]], col[pick]
            values = np.full((len(fam.keys), width), np.nan)
            times = np.full((len(fam.keys), width), np.nan)
            values[rows, cols], times[rows, cols] = vals[pick], ts[pick]
            np.maximum.at(fam.last_seen, rows, ts[pick])
            placed[name] = values, times
        out: dict[str, Frame] = {}
        for name, fam in self._families.items():
            n = len(fam.keys)
            values, times = placed.get(name) or (np.full((n, width), np.nan), np.full((n, width), np.nan))
            if fam.kind is None and not self._decide(name, fam, values, times):
                continue
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

    def _kind_at_once(self, name: str, declared: str | None) -> Kind | None:
        """The family's kind if its values cannot change it, else None."""
        kinds = {self.kind_of(name, declared, values) for values in BEHAVIOURS}
        return kinds.pop() if len(kinds) == 1 else None

    def _decide(self, name: str, fam: _Family, values: FloatArray, times: FloatArray) -> bool:
        """Hold an undecided family's samples; decide its kind once they show one (True: decided)."""
        width = values.shape[1]
        held_v = np.concatenate([grow(fam.held_v, len(fam.keys), np.nan), values], axis=1)[:, -HELD - width :]
        held_t = np.concatenate([grow(fam.held_t, len(fam.keys), np.nan), times], axis=1)[:, -HELD - width :]
        if observed_kind(held_v) not in ("counter", "gauge"):
            fam.held_v, fam.held_t = held_v[:, -HELD:], held_t[:, -HELD:]
            return False
        fam.kind = self.kind_of(name, fam.declared, held_v)
        _carry(fam, held_v[:, :-width], held_t[:, :-width])  # so that its first rate is right
        fam.held_v = fam.held_t = np.zeros((0, 0))
        return True


def _carry(fam: _Family, values: FloatArray, times: FloatArray) -> None:
    """Each row's last sample in ``values`` becomes the one the next rate starts from."""
    if values.shape[1] == 0:
        return
    seen = ~np.isnan(values)
    at = values.shape[1] - 1 - np.argmax(seen[:, ::-1], axis=1)
    have = np.flatnonzero(seen.any(axis=1))
    fam.last_v[have], fam.last_t[have] = values[have, at[have]], times[have, at[have]]
