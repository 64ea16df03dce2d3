"""Rules for metric families the catalogue does not know, and checks of observed behaviour.

The rules are data (``rules.toml``): an ordered table whose rows match on the family name (a
regex searched in it), label names that must all be present, and the declared type. Each field
of the made-up :class:`Family` comes from the FIRST matching rule that sets it, so rules about
what the values mean (name suffixes) and rules about which entity they belong to (labels)
combine without listing every pairing. The last rule must match anything and set every field.

Declared types lie (GUIDE 7), so when values are given the behaviour seen wins:
:func:`observed_kind` tells a counter from a gauge, :func:`looks_like_state` spots a few small
integers.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from peerwatch.catalog.schema import Category, Direction, Family, Unit

Kind = Literal["counter", "gauge", "constant", "empty"]

# OpenMetrics types beyond the text format's four, as the mtype a Family carries.
_TYPE_ALIASES = {
    "": "untyped",
    "unknown": "untyped",
    "info": "gauge",
    "stateset": "gauge",
    "gaugehistogram": "histogram",
}
_RULE_KEYS = frozenset({"id", "name", "labels", "type", "exporter", "category", "unit", "entity_labels", "bad", "weak"})
_FIELDS = ("exporter", "category", "unit", "entity_labels", "bad")
_STATE_MAX_DISTINCT = 8  # "few" distinct values
_STATE_MAX_ABS = 255  # "small" integers: link states, PCIe width, XID codes


class RuleError(ValueError):
    """A rules file that cannot be used; the message names the file and the rule."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the rules table: conditions, then the fields it decides (None = not decided)."""

    id: str
    name: re.Pattern[str] | None = None
    labels: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()
    exporter: str | None = None
    category: Category | None = None
    unit: Unit | None = None
    entity_labels: tuple[str, ...] | None = None
    bad: Direction | None = None
    weak: bool = False  # the category is a guess that observed behaviour may overrule

    @property
    def unconditional(self) -> bool:
        return self.name is None and not self.labels and not self.types

    def matches(self, name: str, label_names: frozenset[str], declared_type: str) -> bool:
        """Whether every condition of the rule holds for this family."""
        if self.name is not None and self.name.search(name) is None:
            return False
        if self.types and declared_type not in self.types:
            return False
        return self.labels <= label_names


def _rule_of(raw: Mapping[str, Any], where: str) -> Rule:
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise RuleError(f"{where}: unknown key(s) {sorted(unknown)}")
    if not isinstance(raw.get("id"), str) or not raw["id"]:
        raise RuleError(f"{where}: every rule needs a string id")
    try:
        entity = raw.get("entity_labels")
        return Rule(
            id=raw["id"],
            name=re.compile(raw["name"]) if "name" in raw else None,
            labels=frozenset(raw.get("labels", ())),
            types=frozenset(t.lower() for t in raw.get("type", ())),
            exporter=raw.get("exporter"),
            category=Category(raw["category"]) if "category" in raw else None,
            unit=Unit(raw["unit"]) if "unit" in raw else None,
            entity_labels=tuple(entity) if entity is not None else None,
            bad=Direction(raw["bad"]) if "bad" in raw else None,
            weak=bool(raw.get("weak", False)),
        )
    except (re.error, ValueError, TypeError) as exc:
        raise RuleError(f"{where}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The ordered rules for unknown families."""

    rules: tuple[Rule, ...]

    @classmethod
    def default(cls) -> RuleSet:
        """The rules shipped with peerwatch (``catalog/rules.toml``), loaded once."""
        return _default_rules()

    @classmethod
    def from_toml(cls, path: str | Path) -> RuleSet:
        """Load the ``[[rule]]`` table of a TOML file."""
        path = Path(path)
        return cls.from_text(path.read_text(encoding="utf-8"), str(path))

    @classmethod
    def from_text(cls, text: str, where: str) -> RuleSet:
        """Parse TOML text; ``where`` names the source in error messages."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise RuleError(f"{where}: {exc}") from exc
        return cls.from_rows(data.get("rule", []), where)

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]], where: str) -> RuleSet:
        """Build from rule mappings; rejects unknown keys, duplicate ids and a missing catch-all."""
        rules = tuple(_rule_of(row, f"{where}: rule {i + 1} ({row.get('id', '?')})") for i, row in enumerate(rows))
        ids = [r.id for r in rules]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise RuleError(f"{where}: duplicate rule id(s) {dup}")
        last = rules[-1] if rules else None
        if last is None or not last.unconditional or any(getattr(last, f) is None for f in _FIELDS):
            raise RuleError(f"{where}: the last rule must have no conditions and set {', '.join(_FIELDS)}")
        return cls(rules)

    def classify(
        self,
        name: str,
        label_names: frozenset[str] = frozenset(),
        declared_type: str | None = None,
        values: npt.ArrayLike | None = None,
    ) -> Family:
        """Make up a Family for an unknown family; ``source`` is ``rule:<ids>`` of the rules used.

        With ``values`` (series x steps, NaN = missing) the observed behaviour overrides the
        declared type, and a weak (guessed) category when the values look like a state.
        """
        declared = (declared_type or "").lower()
        family, weak, ids = _apply(self.rules, name, label_names, declared)
        family = replace(family, mtype=_TYPE_ALIASES.get(declared, declared))
        notes: list[str] = []
        if values is not None and family.mtype not in ("histogram", "summary"):
            kind = observed_kind(values)
            if kind == "counter" and family.mtype != "counter":
                family = replace(family, mtype="counter")
                notes.append("observed:counter")
                if weak:
                    family = replace(family, category=Category.throughput)
            elif kind == "gauge" and family.mtype == "counter":
                family = replace(family, mtype="gauge")
                notes.append("observed:gauge")
            if weak and kind == "gauge" and looks_like_state(values):
                family = replace(family, category=Category.state)
                notes.append("observed:state")
        return replace(family, source="rule:" + "+".join((*ids, *notes)))


@lru_cache(maxsize=8192)
def _apply(
    rules: tuple[Rule, ...], name: str, label_names: frozenset[str], declared: str
) -> tuple[Family, bool, tuple[str, ...]]:
    chosen: dict[str, Any] = {}
    weak = False
    ids: list[str] = []
    for rule in rules:
        if len(chosen) == len(_FIELDS):
            break
        if not rule.matches(name, label_names, declared):
            continue
        decided = [f for f in _FIELDS if f not in chosen and getattr(rule, f) is not None]
        for f in decided:
            chosen[f] = getattr(rule, f)
        if "category" in decided:
            weak = rule.weak
        if decided:
            ids.append(rule.id)
    family = Family(name=name, mtype="untyped", **chosen)
    return family, weak, tuple(ids)


@cache
def _default_rules() -> RuleSet:
    text = resources.files("peerwatch.catalog").joinpath("rules.toml").read_text(encoding="utf-8")
    return RuleSet.from_text(text, "rules.toml")


def as_matrix(values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Values as a (series x steps) float matrix; one series may come as a 1-D array."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[np.newaxis, :]
    if v.ndim != 2:
        raise ValueError(f"values must be series x steps, got shape {v.shape}")
    return v


def _previous_finite(v: npt.NDArray[np.float64], finite: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """For each position, the last non-missing value strictly before it in its series (NaN if none)."""
    steps = v.shape[1]
    last = np.maximum.accumulate(np.where(finite, np.arange(steps), -1), axis=1)
    before = np.empty_like(last)
    before[:, 0] = -1
    before[:, 1:] = last[:, :-1]
    taken = np.take_along_axis(v, np.maximum(before, 0), axis=1)
    return np.where(before >= 0, taken, np.nan)


def observed_kind(values: npt.ArrayLike) -> Kind:
    """How a family behaves over the window (series x steps, NaN = missing, gaps bridged).

    ``counter``: it rises, and every fall is a reset (to under half the value before) that is
    rare (one, or at most one per two rises); ``gauge``: it moves otherwise; ``constant``: no
    series changed (also a single snapshot, which cannot show change); ``empty``: all missing.
    """
    v = as_matrix(values)
    finite = ~np.isnan(v)
    if not finite.any():
        return "empty"
    prev = _previous_finite(v, finite)
    valid = finite & ~np.isnan(prev)
    cur, before = v[valid], prev[valid]
    rises = int(np.count_nonzero(cur > before))
    falls = cur < before
    resets = int(np.count_nonzero(falls & (before > 0) & (cur <= 0.5 * before)))
    other_falls = int(np.count_nonzero(falls)) - resets
    if rises == 0 and other_falls == 0 and resets == 0:
        return "constant"
    if rises > 0 and other_falls == 0 and (resets <= 1 or 2 * resets <= rises):
        return "counter"
    return "gauge"


def looks_like_state(values: npt.ArrayLike) -> bool:
    """Whether the non-missing values are a few distinct small integers (a state, not a measure)."""
    v = as_matrix(values)
    seen = v[~np.isnan(v)]
    if seen.size == 0 or not np.all(np.isfinite(seen)):
        return False
    if not np.all(seen == np.round(seen)) or np.abs(seen).max() > _STATE_MAX_ABS:
        return False
    return int(np.unique(seen).size) <= _STATE_MAX_DISTINCT
