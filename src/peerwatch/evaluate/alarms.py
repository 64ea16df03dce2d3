"""Alarms as the scorer sees them: from the engine's :class:`Alarm` or an ``analyze`` JSON line.

Only the four fields the matching rule reads are kept; an alarm that lacks one of them is an
error naming where it came from (file and line), never silently skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from peerwatch.model import Alarm


class AlarmsError(ValueError):
    """An alarm that cannot be scored, with where it came from."""


@dataclass(frozen=True, slots=True)
class AlarmPoint:
    """The scored part of an alarm (GUIDE 3.1): when it was raised, where, and what it said."""

    ts: float
    node: str
    component: str
    diagnosis: str


AlarmLike = Alarm | Mapping[str, Any] | AlarmPoint


def as_point(alarm: AlarmLike, where: str = "alarm") -> AlarmPoint:
    """The :class:`AlarmPoint` of an engine alarm or a decoded ``analyze`` line."""
    if isinstance(alarm, AlarmPoint):
        return alarm
    if isinstance(alarm, Alarm):  # scored as its analyze line: the view it opened with
        first = alarm.opened
        return AlarmPoint(float(alarm.ts), alarm.node, first.component, first.diagnosis)
    if not isinstance(alarm, Mapping):
        raise AlarmsError(f"{where}: expected an object, got {type(alarm).__name__}")
    ts = alarm.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise AlarmsError(f"{where}: ts: expected epoch seconds, got {ts!r}")
    fields = []
    for key in ("node", "component", "diagnosis"):
        value = alarm.get(key)
        if not isinstance(value, str) or not value:
            raise AlarmsError(f"{where}: {key}: expected a non-empty string, got {value!r}")
        fields.append(value)
    return AlarmPoint(float(ts), *fields)


def as_points(alarms: Iterable[AlarmLike], source: str = "alarms") -> list[AlarmPoint]:
    """Every alarm as a point; the error of a bad one names its position."""
    return [as_point(a, f"{source}[{i}]") for i, a in enumerate(alarms)]


def read_alarms(path: Path) -> list[AlarmPoint]:
    """Alarms of a ``peerwatch analyze --out`` file (one JSON object per line; blank lines allowed)."""
    points: list[AlarmPoint] = []
    try:
        with path.open("rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    doc = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise AlarmsError(f"{path}:{lineno}: not JSON: {exc}") from None
                points.append(as_point(doc, f"{path}:{lineno}"))
    except OSError as exc:
        raise AlarmsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return points
