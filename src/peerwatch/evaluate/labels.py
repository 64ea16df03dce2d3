"""Scenario ground truth (``labels.json``, GUIDE 3.2): loaded, validated, frozen.

Validation is strict: a scenario with a mistyped field would silently score wrong, so every
problem raises :class:`LabelsError` naming the file and the field (``faults[2].onset_ts``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from peerwatch.model import DIAGNOSES

CLUSTER = "cluster"
"""Node name of cluster-wide faults and alarms (GUIDE 3.1)."""


class LabelsError(ValueError):
    """A ``labels.json`` that cannot be used: says which file and which field."""

    def __init__(self, source: str, field: str, message: str) -> None:
        super().__init__(f"{source}: {field}: {message}")
        self.source, self.field = source, field


@dataclass(frozen=True, slots=True)
class FaultLabel:
    """One injected fault. ``failure_ts`` is None for a pure degradation, which lasts until ``end_ts``."""

    node: str
    component: str
    kind: str
    onset_ts: float
    failure_ts: float | None
    end_ts: float | None
    expected: tuple[str, ...]
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class ScenarioLabels:
    """Everything the scorer needs from ``labels.json``."""

    name: str
    nodes: tuple[str, ...]
    spares: tuple[str, ...]
    faults: tuple[FaultLabel, ...]
    start_ts: float
    end_ts: float
    step: float = 30.0
    source: str = "<labels>"

    @property
    def hours(self) -> float:
        return (self.end_ts - self.start_ts) / 3600.0

    @property
    def node_hours(self) -> float:
        """Nodes (spares included, each counted once) times the recording's length."""
        return len(set(self.nodes) | set(self.spares)) * self.hours


def load_labels(path: Path, name: str | None = None) -> ScenarioLabels:
    """Read and validate one ``labels.json``; ``name`` defaults to its folder's name."""
    source = str(path)
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise LabelsError(source, "(file)", f"cannot read: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise LabelsError(source, "(file)", f"not JSON: {exc}") from None
    return parse_labels(doc, source, name or path.parent.name)


def parse_labels(doc: Any, source: str, name: str) -> ScenarioLabels:
    """Validate a decoded ``labels.json`` object (see :func:`load_labels`)."""
    if not isinstance(doc, Mapping):
        raise LabelsError(source, "(top level)", f"expected an object, got {type(doc).__name__}")
    r = _Reader(source)
    nodes = tuple(r.strings(doc, "nodes", required=True))
    spares = tuple(r.strings(doc, "spares", required=False))
    start, end = r.number(doc, "start_ts"), r.number(doc, "end_ts")
    if not end > start:
        raise LabelsError(source, "end_ts", f"must be after start_ts ({start}), got {end}")
    step = r.number(doc, "step", default=30.0)
    if not step > 0:
        raise LabelsError(source, "step", f"must be positive, got {step}")
    raw_faults = doc.get("faults")
    if not isinstance(raw_faults, list):
        raise LabelsError(source, "faults", f"expected a list, got {_kind(raw_faults)}")
    known = set(nodes) | set(spares) | {CLUSTER}
    faults = tuple(r.fault(f, f"faults[{i}]", known) for i, f in enumerate(raw_faults))
    return ScenarioLabels(name, nodes, spares, faults, start, end, step, source)


def _kind(value: object) -> str:
    return "nothing" if value is None else type(value).__name__


class _Reader:
    """Typed field access that raises :class:`LabelsError` at the first bad field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, field: str, message: str) -> LabelsError:
        return LabelsError(self.source, field, message)

    def number(self, obj: Mapping[str, Any], key: str, prefix: str = "", default: float | None = None) -> float:
        value = obj.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(prefix + key, f"expected a finite number, got {value!r}")
        return float(value)

    def optional_number(self, obj: Mapping[str, Any], key: str, prefix: str) -> float | None:
        return None if obj.get(key) is None else self.number(obj, key, prefix)

    def string(self, obj: Mapping[str, Any], key: str, prefix: str) -> str:
        value = obj.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(prefix + key, f"expected a non-empty string, got {value!r}")
        return value

    def strings(self, obj: Mapping[str, Any], key: str, prefix: str = "", required: bool = True) -> Sequence[str]:
        value = obj.get(key, None if required else [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(prefix + key, f"expected a list of non-empty strings, got {value!r:.120}")
        return value

    def fault(self, obj: Any, where: str, known: set[str]) -> FaultLabel:
        if not isinstance(obj, Mapping):
            raise self.fail(where, f"expected an object, got {_kind(obj)}")
        p = where + "."
        node = self.string(obj, "node", p)
        if node not in known:
            raise self.fail(p + "node", f"{node!r} is neither in nodes/spares nor {CLUSTER!r}")
        onset = self.number(obj, "onset_ts", p)
        failure = self.optional_number(obj, "failure_ts", p)
        end = self.optional_number(obj, "end_ts", p)
        for key, value in (("failure_ts", failure), ("end_ts", end)):
            if value is not None and value < onset:
                raise self.fail(p + key, f"{value} is before onset_ts {onset}")
        expected = tuple(self.strings(obj, "expected", p))
        if not expected:
            raise self.fail(p + "expected", "lists no diagnosis")
        unknown = [d for d in expected if d not in DIAGNOSES]
        if unknown:
            raise self.fail(p + "expected", f"unknown diagnoses {unknown}; known: {', '.join(DIAGNOSES)}")
        xid = obj.get("xid")
        if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int)):
            raise self.fail(p + "xid", f"expected an integer or null, got {xid!r}")
        return FaultLabel(
            node, self.string(obj, "component", p), self.string(obj, "kind", p), onset, failure, end, expected, xid
        )
