"""Fault history of a fleet: events, the files they come from, and which nodes are down.

Two input formats, detected from content:

- the InfiniteHBD trace (a JSON array of ``{"node_id", "event_time" (days), "event_type",
  "fault_type": {"Level", "Class", "Desc"}}``), whose 400-server fleet includes servers that never
  appear in it;
- peerwatch's own history, which the live service appends to: JSON lines
  ``{"ts": 1711756800.0, "node": "gpu068", "kind": "fault_start", "component": "gpu/3", "detail": "xid 79"}``
  or CSV with the header ``ts,node,kind[,component[,detail]]``. ``ts`` is epoch seconds or ISO 8601;
  ``kind`` is ``fault_start`` (node became unavailable), ``fault_end`` (repaired, back in service) or
  ``inventory`` (the node exists; no fault), so nodes that never failed are still counted.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

START = "fault_start"
END = "fault_end"
INVENTORY = "inventory"
KINDS = (START, END, INVENTORY)

INFINITEHBD_ORIGIN = 1711756800.0  # 2024-03-30T00:00:00Z: the trace's day 0 (see its SOURCE.md)
INFINITEHBD_FLEET = 400  # servers sampled for the trace; only those that failed appear in it
DAY = 86400.0
CSV_COLUMNS = ("ts", "node", "kind", "component", "detail")


class HistoryError(ValueError):
    """A history file that cannot be read; the message names the file and line or event."""


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """One change of a node's availability, at epoch seconds ``ts``.

    ``component`` is where the fault was (``gpu/3``, ``ib/mlx5_0``) or the source's fault class
    (InfiniteHBD ``Class``: ``GPU``, ``Stress Test Failure``…); ``detail`` is free text.
    """

    ts: float
    node: str
    kind: str
    component: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class FaultHistory:
    """Time-ordered events and every node of the fleet (faulted or not)."""

    events: tuple[FaultEvent, ...]
    nodes: tuple[str, ...]
    source: str = ""

    @property
    def fleet_size(self) -> int:
        return len(self.nodes)

    def faults(self) -> list[FaultEvent]:
        """The ``fault_start`` events, in time order."""
        return [e for e in self.events if e.kind == START]

    def span(self) -> tuple[float, float]:
        """First and last event time (0, 0 when empty)."""
        return (self.events[0].ts, self.events[-1].ts) if self.events else (0.0, 0.0)


def make_history(events: Iterable[FaultEvent], fleet_size: int | None = None, source: str = "") -> FaultHistory:
    """Sort ``events`` by time (stable: equal times keep file order) and list the fleet's nodes.

    When ``fleet_size`` exceeds the nodes named in the events, the rest are added as
    ``unseen-NNN``: servers with no recorded fault still compete in every ranking.
    """
    ordered = tuple(sorted(events, key=lambda e: e.ts))
    seen = list(dict.fromkeys(e.node for e in ordered))
    if fleet_size is not None:
        if fleet_size < len(seen):
            raise HistoryError(f"{source}: fleet size {fleet_size} is below the {len(seen)} nodes in the history")
        seen += [f"unseen-{i:03d}" for i in range(fleet_size - len(seen))]
    return FaultHistory(ordered, tuple(seen), source)


def instants(events: Sequence[FaultEvent]) -> Iterator[tuple[float, Sequence[FaultEvent]]]:
    """Group time-ordered events by equal timestamp: what happened at each instant."""
    i = 0
    while i < len(events):
        j = i + 1
        while j < len(events) and events[j].ts == events[i].ts:
            j += 1
        yield events[i].ts, events[i:j]
        i = j


class Availability:
    """Which nodes are down: a node is down while it has an open fault (started, not ended).

    Counting open faults per node keeps a second fault reported during an outage from ending it early;
    an end with no open fault (history began mid-outage) is ignored.
    """

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def observe(self, event: FaultEvent) -> None:
        if event.kind == START:
            self._open[event.node] = self._open.get(event.node, 0) + 1
        elif event.kind == END and event.node in self._open:
            self._open[event.node] -= 1
            if not self._open[event.node]:
                del self._open[event.node]

    def is_down(self, node: str) -> bool:
        return node in self._open

    def down(self) -> frozenset[str]:
        return frozenset(self._open)


def load_history(path: Path, fleet_size: int | None = None) -> FaultHistory:
    """Read any supported history file (format detected from content).

    ``fleet_size`` defaults to 400 for the InfiniteHBD trace and to the nodes named otherwise.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read: {exc.strerror}") from exc
    head = raw.lstrip()[:1]
    if head == b"[":
        events = parse_infinitehbd(raw, str(path))
        return make_history(events, INFINITEHBD_FLEET if fleet_size is None else fleet_size, str(path))
    text = raw.decode("utf-8", errors="replace")
    events = parse_jsonl(text, str(path)) if head == b"{" else parse_csv(text, str(path))
    return make_history(events, fleet_size, str(path))


def parse_infinitehbd(raw: bytes, where: str, origin: float = INFINITEHBD_ORIGIN) -> list[FaultEvent]:
    """Events of the InfiniteHBD trace; ``event_time`` days become epoch seconds from ``origin``."""
    try:
        items = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise HistoryError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(items, list):
        raise HistoryError(f"{where}: expected a JSON array of events")
    events = []
    for i, item in enumerate(items):
        try:
            fault = item.get("fault_type") or {}
            kind = _kind(item["event_type"])
            days = _number(item["event_time"])
            events.append(
                FaultEvent(
                    origin + days * DAY,
                    _node(item["node_id"]),
                    kind,
                    str(fault.get("Class", "")),
                    str(fault.get("Desc", "")),
                )
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise HistoryError(f"{where}: event {i}: {_why(exc)}") from exc
    return events


def parse_jsonl(text: str, where: str) -> list[FaultEvent]:
    """Events of a peerwatch JSON-lines history (blank lines skipped)."""
    events = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                events.append(_record(orjson.loads(line)))
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
                raise HistoryError(f"{where}:{n}: {_why(exc)}") from exc
    return events


def parse_csv(text: str, where: str) -> list[FaultEvent]:
    """Events of a peerwatch CSV history with header ``ts,node,kind[,component[,detail]]``."""
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in CSV_COLUMNS[:3] if c not in header]
    if missing:
        raise HistoryError(f"{where}:1: header lacks {', '.join(missing)} (need ts,node,kind[,component[,detail]])")
    events = []
    for row in reader:
        try:
            events.append(_record(row))
        except (KeyError, TypeError, ValueError) as exc:
            raise HistoryError(f"{where}:{reader.line_num}: {_why(exc)}") from exc
    return events


def event_record(event: FaultEvent) -> dict[str, Any]:
    """The JSON-lines record of an event (what the live service appends)."""
    record: dict[str, Any] = {"ts": event.ts, "node": event.node, "kind": event.kind}
    if event.component:
        record["component"] = event.component
    if event.detail:
        record["detail"] = event.detail
    return record


def write_history(path: Path, events: Iterable[FaultEvent], append: bool = False) -> None:
    """Write events as JSON lines, or as CSV when ``path`` ends in ``.csv``.

    With ``append`` the events go after those already in the file (a CSV header only when the
    file is new): how the live service records faults as they happen.
    """
    fresh = not append or not path.exists() or path.stat().st_size == 0
    with path.open("w" if not append else "a", newline="") as out:
        if path.suffix == ".csv":
            writer = csv.writer(out)
            if fresh:
                writer.writerow(CSV_COLUMNS)
            writer.writerows((repr(e.ts), e.node, e.kind, e.component, e.detail) for e in events)
        else:
            out.writelines(orjson.dumps(event_record(e)).decode() + "\n" for e in events)


def _record(item: Any) -> FaultEvent:
    return FaultEvent(
        parse_ts(item["ts"]),
        _node(item["node"]),
        _kind(item["kind"]),
        str(item.get("component") or ""),
        str(item.get("detail") or ""),
    )


def parse_ts(value: Any) -> float:
    """Epoch seconds from a number or an ISO 8601 string (without an offset it is taken as UTC)."""
    if isinstance(value, str) and not _is_number(value):
        try:
            when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"ts {value!r} is neither epoch seconds nor ISO 8601") from None
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return _number(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number, got {value!r}")
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"expected a finite number, got {value!r}")
    return number


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _kind(value: Any) -> str:
    if value not in KINDS:
        raise ValueError(f"kind {value!r} is not one of {', '.join(KINDS)}")
    return str(value)


def _node(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"node {value!r} is not a non-empty string")
    return value.strip()


def _why(exc: Exception) -> str:
    return f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
