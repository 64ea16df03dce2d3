"""Renderings kept while their inputs are the same objects: the alarm list as JSON or HTML.

The store decodes an unchanged alarm row once and hands out the same immutable object each time
(alarms/sql_store.py), so "the same rows" is a check of identities, far cheaper than rendering
a thousand alarms with their evidence again for each of 50 clients.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

V = TypeVar("V")


class Rendered(Generic[V]):
    """The last rendering per key (``size`` keys kept), reused while it was made from the same rows."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._kept: dict[Hashable, tuple[Sequence[object], V]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, rows: Sequence[object], make: Callable[[], V]) -> V:
        """``make()``, or what it returned for ``key`` from the very same ``rows`` before."""
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and len(kept[0]) == len(rows) and all(a is b for a, b in zip(kept[0], rows, strict=True)):
            return kept[1]
        value = make()
        with self._lock:
            if key not in self._kept and len(self._kept) >= self.size:
                self._kept.pop(next(iter(self._kept)))
            self._kept[key] = (rows, value)
        return value
