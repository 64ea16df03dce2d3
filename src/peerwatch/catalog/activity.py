"""Which families can carry fault signal over a window, and why the others are set aside.

A real cluster exports hundreds of families of which fewer than half move (751 -> 305 active on
the reference cluster, GUIDE 2): exporter runtime internals, ZFS and the scraper's bookkeeping
are set aside by name or category (``[[set_aside]]`` in ``rules.toml``), then families whose
values say nothing (all missing, or no series changed) by a vectorised look at the whole family.
Every family is counted either way; nothing disappears silently.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from peerwatch.catalog.classify import as_matrix
from peerwatch.catalog.schema import Category, Family, Unit


class Reason(StrEnum):
    """Why a family is set aside (the fixed vocabulary of the activity report)."""

    runtime = "runtime"  # Go/Python/process/promhttp internals of an exporter
    zfs = "zfs"
    scrape_internal = "scrape_internal"  # the scraper's and exporter's own bookkeeping
    constant = "constant"  # no series changed over the window
    empty = "empty"  # every sample missing


_BY_NAME = frozenset({Reason.runtime, Reason.zfs, Reason.scrape_internal})


@dataclass(frozen=True, slots=True)
class Activity:
    """The verdict on one family over one window; ``reason`` is None when it is active."""

    family: str
    category: Category
    unit: Unit
    reason: Reason | None = None
    series: int = 0
    steps: int = 0

    @property
    def active(self) -> bool:
        return self.reason is None


@dataclass(frozen=True, slots=True)
class SetAsideRule:
    """Set a family aside by name (regex searched) and/or category, before any values are read."""

    reason: Reason
    name: re.Pattern[str] | None = None
    category: Category | None = None

    def matches(self, family: Family) -> bool:
        if self.name is not None and self.name.search(family.name) is None:
            return False
        return self.category is None or family.category is self.category


def _set_aside_rules(rows: Sequence[Mapping[str, Any]], where: str) -> tuple[SetAsideRule, ...]:
    out = []
    for i, row in enumerate(rows, 1):
        here = f"{where}: set_aside {i}"
        unknown = set(row) - {"reason", "name", "category"}
        if unknown:
            raise ValueError(f"{here}: unknown key(s) {sorted(unknown)}")
        try:
            reason = Reason(row["reason"])
            rule = SetAsideRule(
                reason=reason,
                name=re.compile(row["name"]) if "name" in row else None,
                category=Category(row["category"]) if "category" in row else None,
            )
        except (KeyError, ValueError, re.error) as exc:
            raise ValueError(f"{here}: {exc}") from exc
        if reason not in _BY_NAME or (rule.name is None and rule.category is None):
            raise ValueError(f"{here}: needs name and/or category, and a reason of {sorted(_BY_NAME)}")
        out.append(rule)
    return tuple(out)


class ActivityFilter:
    """Judges families; ``min_edge_gap``/``edge_fraction`` size the run of missing steps at either
    end of the window that counts as a series appearing or vanishing (a new XID series, a GPU
    gone), which is change even when every value is constant; shorter runs are missed scrapes.
    """

    def __init__(
        self, set_aside: Sequence[SetAsideRule] = (), min_edge_gap: int = 3, edge_fraction: float = 0.1
    ) -> None:
        self.set_aside = tuple(set_aside)
        self.min_edge_gap = min_edge_gap
        self.edge_fraction = edge_fraction

    @classmethod
    def default(cls) -> ActivityFilter:
        """The filter with the ``[[set_aside]]`` table shipped in ``catalog/rules.toml``."""
        return _default_filter()

    @classmethod
    def from_toml(cls, path: str | Path) -> ActivityFilter:
        """A filter with the ``[[set_aside]]`` table of a TOML file."""
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: {exc}") from exc
        return cls(_set_aside_rules(data.get("set_aside", []), str(path)))

    def judge(self, family: Family, values: npt.ArrayLike | None) -> Activity:
        """Active, or set aside with a reason. ``values``: series x steps, NaN = missing; None = not read.

        Constancy needs two samples in some series: a single snapshot stays active.
        """
        rule = next((r for r in self.set_aside if r.matches(family)), None)
        v = None if values is None else as_matrix(values)
        series, steps = (0, 0) if v is None else (int(v.shape[0]), int(v.shape[1]))
        reason = rule.reason if rule is not None else (None if v is None else self._core(v))
        return Activity(family.name, family.category, family.unit, reason, series, steps)

    def _core(self, v: npt.NDArray[np.float64]) -> Reason | None:
        finite = ~np.isnan(v)
        if not finite.any():
            return Reason.empty
        counts = finite.sum(axis=1)
        if counts.max() < 2:
            return None
        low = np.where(finite, v, np.inf).min(axis=1)
        high = np.where(finite, v, -np.inf).max(axis=1)
        if np.any(high > low):
            return None
        steps = v.shape[1]
        edge = max(self.min_edge_gap, math.ceil(self.edge_fraction * steps))
        present = counts > 0
        lead = finite.argmax(axis=1)[present]
        trail = finite[:, ::-1].argmax(axis=1)[present]
        if np.any(lead >= edge) or np.any(trail >= edge):
            return None
        return Reason.constant


def judge(family: Family, values: npt.ArrayLike | None) -> Activity:
    """:meth:`ActivityFilter.judge` with the default filter."""
    return ActivityFilter.default().judge(family, values)


@dataclass(frozen=True, slots=True)
class Tally:
    """Families seen, active, and set aside by reason."""

    seen: int
    active: int
    set_aside: Mapping[Reason, int]


@dataclass(frozen=True, slots=True)
class ActivitySummary:
    """Counts over many families: in total, by category and by unit."""

    total: Tally
    by_category: Mapping[Category, Tally]
    by_unit: Mapping[Unit, Tally]


def _tally(items: list[Activity]) -> Tally:
    reasons = Counter(a.reason for a in items if a.reason is not None)
    ordered = {r: reasons[r] for r in Reason if reasons[r]}
    return Tally(len(items), sum(a.active for a in items), MappingProxyType(ordered))


def summarize(activities: Iterable[Activity]) -> ActivitySummary:
    """Count the verdicts: seen/active/set aside by reason, overall, per category and per unit."""
    items = list(activities)
    by_cat: dict[Category, list[Activity]] = {}
    by_unit: dict[Unit, list[Activity]] = {}
    for a in items:
        by_cat.setdefault(a.category, []).append(a)
        by_unit.setdefault(a.unit, []).append(a)
    return ActivitySummary(
        total=_tally(items),
        by_category=MappingProxyType({c: _tally(by_cat[c]) for c in Category if c in by_cat}),
        by_unit=MappingProxyType({u: _tally(by_unit[u]) for u in Unit if u in by_unit}),
    )


@cache
def _default_filter() -> ActivityFilter:
    text = resources.files("peerwatch.catalog").joinpath("rules.toml").read_text(encoding="utf-8")
    return ActivityFilter(_set_aside_rules(tomllib.loads(text).get("set_aside", []), "rules.toml"))
