"""The metric catalogue: one hand-checked row per metric family (``families.csv``), plus rules.

Rows carry names as a TSDB holds them in ``__name__``; a histogram or summary has one row under
its base name, and :meth:`Catalog.lookup` maps its ``_bucket``/``_sum``/``_count``/``_created``
series to it. Families not in the file are classified by :class:`RuleSet` and are never dropped.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TypeVar

import numpy.typing as npt

from peerwatch.catalog.classify import RuleSet
from peerwatch.catalog.roles import Roles
from peerwatch.catalog.schema import Category, Direction, Family, Unit

COLUMNS = ("name", "exporter", "mtype", "category", "unit", "entity_labels", "bad", "help")
MTYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_HISTOGRAM_LIKE = frozenset({"histogram", "summary", "gaugehistogram"})
# Series suffix -> family types whose series carry it (OpenMetrics adds _created, _gsum, _gcount).
_SUFFIXES: tuple[tuple[str, frozenset[str]], ...] = (
    ("_bucket", frozenset({"histogram"})),
    ("_sum", frozenset({"histogram", "summary"})),
    ("_count", frozenset({"histogram", "summary"})),
    ("_created", frozenset({"histogram", "summary", "counter"})),
    ("_gsum", frozenset({"histogram"})),
    ("_gcount", frozenset({"histogram"})),
)


class CatalogError(ValueError):
    """Catalogue data that cannot be used; ``where`` is ``file:line``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


_E = TypeVar("_E", Category, Unit, Direction)


def _vocab(kind: type[_E], value: str, column: str, where: str) -> _E:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise CatalogError(where, f"unknown {column} {value!r} (one of: {allowed})") from None


def _entity_labels(text: str, where: str) -> tuple[str, ...]:
    specs = tuple(s.strip() for s in text.split(";")) if text.strip() else ()
    for spec in specs:
        for alt in spec.split("|"):
            if not _LABEL.match(alt):
                raise CatalogError(where, f"bad label name {alt!r} in entity_labels {text!r}")
    return specs


def _family(row: dict[str | None, str | list[str] | None], where: str) -> Family:
    if None in row or any(v is None for v in row.values()):
        raise CatalogError(where, f"expected {len(COLUMNS)} fields")
    cell = {k: str(v).strip() for k, v in row.items() if k is not None}
    if not _NAME.match(cell["name"]):
        raise CatalogError(where, f"bad metric name {cell['name']!r}")
    if not cell["exporter"]:
        raise CatalogError(where, "empty exporter")
    if cell["mtype"] not in MTYPES:
        raise CatalogError(where, f"unknown mtype {cell['mtype']!r} (one of: {', '.join(sorted(MTYPES))})")
    return Family(
        name=cell["name"],
        exporter=cell["exporter"],
        mtype=cell["mtype"],
        category=_vocab(Category, cell["category"], "category", where),
        unit=_vocab(Unit, cell["unit"], "unit", where),
        entity_labels=_entity_labels(cell["entity_labels"], where),
        bad=_vocab(Direction, cell["bad"], "bad", where),
        help=cell["help"],
    )


def parse_families(text: str, source: str) -> tuple[Family, ...]:
    """Parse catalogue CSV text; errors name ``source`` and the line."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise CatalogError(f"{source}:1", f"header must be {','.join(COLUMNS)}, got {reader.fieldnames}")
    seen: dict[str, int] = {}
    out = []
    for row in reader:
        where = f"{source}:{reader.line_num}"
        family = _family(row, where)
        if family.name in seen:
            raise CatalogError(where, f"duplicate family {family.name!r} (first on line {seen[family.name]})")
        seen[family.name] = reader.line_num
        out.append(family)
    return tuple(out)


class Catalog:
    """Known families by name, rules for the rest, and the roles detectors read them by."""

    def __init__(self, families: Iterable[Family], rules: RuleSet | None = None, roles: Roles | None = None) -> None:
        self._by_name = {f.name: f for f in families}
        self.rules = rules if rules is not None else RuleSet.default()
        self.roles = roles if roles is not None else Roles.default()

    @classmethod
    def default(cls) -> Catalog:
        """The catalogue shipped with peerwatch (``catalog/families.csv`` and ``rules.toml``), loaded once."""
        return _default_catalog()

    @classmethod
    def from_csv(cls, path: str | Path, rules: RuleSet | None = None, roles: Roles | None = None) -> Catalog:
        """Load a catalogue CSV file (columns as :data:`COLUMNS`)."""
        path = Path(path)
        return cls(parse_families(path.read_text(encoding="utf-8"), str(path)), rules, roles)

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[Family]:
        return iter(self._by_name.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.lookup(name) is not None

    def lookup(self, sample_name: str) -> Family | None:
        """The catalogue row of a sample name: exact, then histogram/summary series, then ``_total``."""
        family = self._by_name.get(sample_name)
        if family is not None:
            return family
        for suffix, types in _SUFFIXES:
            if sample_name.endswith(suffix):
                base = sample_name.removesuffix(suffix)
                family = self._by_name.get(base)
                if family is not None and family.mtype in types:
                    return family
                if suffix == "_created":  # a counter X_total's creation time is X_created
                    family = self._counter(base + "_total")
                    if family is not None:
                        return family
        # prometheus_client counters: declared X, exposed X_total (OpenMetrics names the family X)
        if sample_name.endswith("_total"):
            return self._counter(sample_name.removesuffix("_total"))
        return self._counter(sample_name + "_total")

    def _counter(self, name: str) -> Family | None:
        family = self._by_name.get(name)
        return family if family is not None and family.mtype == "counter" else None

    def node_labels(self, sample_name: str, node_labels: tuple[str, ...]) -> tuple[str, ...]:
        """``node_labels`` less those the family uses to name its entity (the NUMA ``node`` of
        ``node_memory_numa_*``), so node identity never comes from an entity label."""
        family = self.lookup(sample_name)
        if family is None:
            return node_labels
        own = {alt for spec in family.entity_labels for alt in spec.split("|")}
        return tuple(label for label in node_labels if label not in own)

    def family_name(self, sample_name: str) -> str:
        """The family a sample belongs to: its catalogue row's name, else the sample name itself."""
        family = self.lookup(sample_name)
        return family.name if family is not None else sample_name

    def classify(
        self,
        sample_name: str,
        label_names: frozenset[str] = frozenset(),
        declared_type: str | None = None,
        values: npt.ArrayLike | None = None,
    ) -> Family:
        """The catalogue row, else a Family made by the rules (``source="rule:<ids>"``).

        ``values`` (series x steps, NaN = missing) only matters for unknown families; for known
        ones use :func:`peerwatch.catalog.observed_kind` to see whether a counter lies.
        """
        family = self.lookup(sample_name)
        if family is not None:
            return family
        name = sample_name
        if (declared_type or "").lower() in _HISTOGRAM_LIKE:
            for suffix, _ in _SUFFIXES:
                if name.endswith(suffix):
                    name = name.removesuffix(suffix)
                    break
        return self.rules.classify(name, label_names, declared_type, values)


@cache
def _default_catalog() -> Catalog:
    text = resources.files("peerwatch.catalog").joinpath("families.csv").read_text(encoding="utf-8")
    return Catalog(parse_families(text, "families.csv"))
