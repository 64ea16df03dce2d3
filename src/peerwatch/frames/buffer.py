"""The samples fetched and not yet judged (at most the last ``span`` seconds), read back as one block per series.

Series keys are interned to integer ids, so a fetch is stored as three flat arrays (ids, times,
values) however many series it holds; reading the window regroups them per series with one stable
sort. A sample no newer than the newest already held for its series is dropped, so overlapping
fetches (a TSDB read that re-reads the last steps) never double a sample.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray, SeriesBlock, SeriesKey

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Chunk:
    ids: IntArray
    ts: FloatArray
    values: FloatArray
    newest: float


class SampleBuffer:
    """Samples of the last ``span`` seconds (data time); thread-safe."""

    def __init__(self, span: float) -> None:
        self.span = span
        self._lock = threading.Lock()
        self._ids: dict[SeriesKey, int] = {}
        self._keys: list[SeriesKey] = []
        self._pool: dict[object, Any] = {}  # one copy of each label string and pair (see _shared)
        self._mtypes: list[str | None] = []
        self._last: FloatArray = np.full(0, -np.inf)
        self._chunks: deque[_Chunk] = deque()
        self.newest: float | None = None  # time of the newest sample held

    def add(self, blocks: Iterable[SeriesBlock]) -> int:
        """Add the samples of ``blocks`` (those newer than what the buffer holds); returns how many."""
        ids: list[int] = []
        lengths: list[int] = []
        ts: list[FloatArray] = []
        vals: list[FloatArray] = []
        with self._lock:
            for block in blocks:
                if not len(block):
                    continue
                ids.append(self._intern(block))
                lengths.append(len(block))
                ts.append(block.timestamps)
                vals.append(block.values)
            if not ids:
                return 0
            return self._store(
                np.repeat(np.array(ids, dtype=np.int64), lengths), np.concatenate(ts), np.concatenate(vals)
            )

    def add_ids(self, ids: IntArray, ts: FloatArray, values: FloatArray) -> int:
        """Add samples of series already held, given by id (:meth:`ids_of`); returns how many were new."""
        with self._lock:
            return self._store(ids, ts, values) if ids.size else 0

    def ids_of(self, keys: Iterable[SeriesKey]) -> IntArray:
        """The ids of series already added."""
        with self._lock:
            return np.array([self._ids[k] for k in keys], dtype=np.int64)

    def _store(self, id_arr: IntArray, ts_arr: FloatArray, val_arr: FloatArray) -> int:
        if len(self._last) < len(self._keys):  # grown by doubling: one round adds to it target by target
            self._last = np.r_[
                self._last, np.full(max(len(self._keys), 2 * len(self._last)) - len(self._last), -np.inf)
            ]
        keep = ts_arr > self._last[id_arr]
        if not keep.all():
            id_arr, ts_arr, val_arr = id_arr[keep], ts_arr[keep], val_arr[keep]
        if not id_arr.size:
            return 0
        np.maximum.at(self._last, id_arr, ts_arr)
        newest = float(ts_arr.max())
        self._chunks.append(_Chunk(id_arr, ts_arr, val_arr, newest))
        self.newest = newest if self.newest is None else max(self.newest, newest)
        self._trim(self.newest - self.span)
        return int(id_arr.size)

    def _intern(self, block: SeriesBlock) -> int:
        i = self._ids.get(block.key)
        if i is None:
            key = self._shared(block.key)
            i = self._ids[key] = len(self._keys)
            self._keys.append(key)
            self._mtypes.append(block.mtype)
        elif self._mtypes[i] is None and block.mtype:
            self._mtypes[i] = block.mtype
        return i

    def _shared(self, key: SeriesKey) -> SeriesKey:
        """``key`` built from one copy of each name, label value and label pair: a source makes new
        strings for every series it reads, and a million series' keys would otherwise hold
        hundreds of copies of each node name, GPU model and label name (about 360 bytes a series)."""
        pool = self._pool
        labels = []
        for name, value in key.labels:
            pair = (pool.setdefault(name, name), pool.setdefault(value, value))
            labels.append(pool.setdefault(pair, pair))
        return SeriesKey(pool.setdefault(key.name, key.name), tuple(labels))

    def release(self, until: float) -> None:
        """Forget the fetches whose samples are all at or before ``until`` (judged: not needed again)."""
        with self._lock:
            while self._chunks and self._chunks[0].newest <= until:
                self._chunks.popleft()

    def _trim(self, before: float) -> None:
        while self._chunks and self._chunks[0].newest < before:
            self._chunks.popleft()

    def blocks(self, start: float, end: float) -> Iterator[SeriesBlock]:
        """One block per series with its samples in ``(start, end]``, in time order."""
        ids, ts, vals = self.between(start, end)
        if not ids.size:
            return
        with self._lock:
            keys, mtypes = list(self._keys), list(self._mtypes)
        order = np.lexsort((ts, ids))
        ids, ts, vals = ids[order], ts[order], vals[order]
        bounds = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1], True])
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            i = int(ids[a])
            yield SeriesBlock(keys[i], ts[a:b], vals[a:b], mtypes[i])

    def between(self, start: float, end: float) -> tuple[IntArray, FloatArray, FloatArray]:
        """The samples in ``(start, end]`` as flat arrays (series id, time, value), in no particular order."""
        with self._lock:
            chunks = [c for c in self._chunks if c.newest > start]
        # Each fetch filtered before they are joined: a backlog read is judged a part at a time, and
        # joining whole fetches first would copy all of it for every part.
        parts = [(c.ids[m], c.ts[m], c.values[m]) for c in chunks for m in [(c.ts > start) & (c.ts <= end)]]
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
        ids, ts, vals = (np.concatenate(x) for x in zip(*parts, strict=True))
        return ids, ts, vals

    def series_of(self, first: int, stop: int) -> list[tuple[SeriesKey, str | None]]:
        """Key and declared type of the series with ids ``first..stop-1``."""
        with self._lock:
            return list(zip(self._keys[first:stop], self._mtypes[first:stop], strict=True))

    @property
    def series(self) -> int:
        return len(self._keys)

    @property
    def samples(self) -> int:
        with self._lock:
            return sum(int(c.ids.size) for c in self._chunks)

    def oldest(self) -> float | None:
        """Time of the oldest sample still held (None when empty)."""
        with self._lock:
            return float(min(c.ts.min() for c in self._chunks)) if self._chunks else None
