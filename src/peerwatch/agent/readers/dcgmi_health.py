"""Saved ``dcgmi health -c`` output (watches set with ``dcgmi health -s``), table or ``-j`` JSON.

Three shapes are read: the tree DCGM 2.x–4.x prints (``| Overall Health | Warning |``, ``| GPU |``,
``| -> 0 | Warning |``, ``|    -> Errors |``, ``|       -> PCIe system | Warning |`` and the incident
text wrapped below), the older ``| GPU ID: 0 | Warning |`` table, and the JSON of ``-j``
(``{"header": ["Health Monitor Report"], "body": {"Overall Health": {"value": ...}, "GPU":
{"children": {"0": {"value": ..., "children": {"Errors": ...}}}}}}``). Healthy → OK, Warning →
UNHEALTHY, Failure → CRITICAL; overall health is the ``node`` result, each entity (``gpu/0``,
``nvswitch/1``) its own, with DCGM's incident text as the hint. The live agent's ``dcgm_health``
check runs ``dcgmi health -c`` and reads it here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from peerwatch.agent.checks import CheckResult, Status
from peerwatch.agent.paste import clean_lines, first_lines
from peerwatch.agent.readers.errors import ReadError

FORMAT = "dcgmi-health"
CHECK = "dcgm_health"

HEALTH_WORDS: Mapping[str, Status] = {"healthy": Status.OK, "warning": Status.UNHEALTHY, "failure": Status.CRITICAL}

_ENTITY_ID = re.compile(r"^([A-Za-z][A-Za-z ]*?)\s+ID:\s*(\d+)$")  # old table: "GPU ID: 0"
_ARROW = re.compile(r"^(\s*)->\s*(.+?)\s*$")  # tree: "-> 0", "   -> Errors", "      -> PCIe system"
_OVERALL = re.compile(r"Overall Health\s*:?\s*(\w+)?", re.IGNORECASE)


def detect(text: str) -> bool:
    """True for the table (``Health Monitor Report`` / ``Overall Health`` rows) or its JSON."""
    head = first_lines(text, 6)
    if any(line.startswith("{") for line in head):  # -j puts the header after the body
        return '"Health Monitor Report"' in text[:20000] or '"Overall Health"' in text[:20000]
    return any("Health Monitor Report" in line or "| Overall Health" in line for line in head)


def status_of(word: str) -> Status | None:
    """The verdict of DCGM's first word (``Warning - Detected ...`` → UNHEALTHY), ``None`` if not one."""
    words = word.strip().split(" ", 1)
    return HEALTH_WORDS.get(words[0].lower()) if words[0] else None


def read(text: str) -> list[CheckResult]:
    """The ``node`` verdict then one per entity; :class:`ReadError` when the text holds no overall verdict."""
    lines = [line for _, line in clean_lines(text)]
    start = next((i for i, line in enumerate(lines) if line.startswith("{")), None)
    if start is not None:  # JSON, perhaps after "Health monitor systems set successfully."
        overall, entities = _from_json("\n".join(lines[start:]))
    else:
        overall, entities = _from_table(text)
    if overall is None:
        said = next((line.strip() for _, line in clean_lines(text) if line.strip()), "no output")
        raise ReadError(f"no 'Overall Health' verdict found (first line: {said!r})")
    summary = "; ".join(f"{e}: {t}" for e, (s, t) in entities.items() if s is not Status.OK and t)
    results = [CheckResult(CHECK, "node", overall, summary or f"overall health {overall.name}")]
    results.extend(CheckResult(CHECK, e, s, t or s.name.lower()) for e, (s, t) in entities.items())
    return results


def _entity(group: str, number: str) -> str:
    return f"{group.replace(' ', '').lower()}/{number}"


def _from_table(text: str) -> tuple[Status | None, dict[str, tuple[Status, str]]]:
    overall: Status | None = None
    entities: dict[str, tuple[Status, list[str]]] = {}
    current: str | None = None
    group = "GPU"
    for _, line in clean_lines(text):
        if not line.lstrip().startswith("|"):
            continue
        # keep the tree's indentation ("|    -> Errors"), less the cell's one space of padding
        cells = [c.rstrip().removeprefix(" ") for c in line.strip().strip("|").split("|")]
        left, right = cells[0], (cells[1].strip() if len(cells) > 1 else "")
        if match := _OVERALL.search(" ".join(cells)):
            overall, current = status_of(match.group(1) or right), None
            continue
        if match := _ENTITY_ID.match(left.strip()):
            current = _entity(match.group(1), match.group(2))
            entities[current] = (_or_unknown(status_of(right)), [])
        elif match := _ARROW.match(left):
            depth, name = len(match.group(1)), match.group(2)
            if depth == 0 and name.isdigit():
                current = _entity(group, name)
                entities[current] = (_or_unknown(status_of(right)), [])
            elif current is not None and name != "Errors":
                entities[current][1].append(f"{name}: {right}" + (" -" if right else ""))
        elif left.strip() and not right:
            group = left.strip()  # an entity group heading: "GPU", "NvSwitch", "CPU"
        elif current is not None and not left.strip() and right:
            entities[current][1].append(right)
    # The table wraps incident text at the column edge: rejoin it.
    return overall, {e: (s, " ".join(parts).strip(" -")) for e, (s, parts) in entities.items()}


def _or_unknown(status: Status | None) -> Status:
    return Status.UNKNOWN if status is None else status


def _from_json(text: str) -> tuple[Status | None, dict[str, tuple[Status, str]]]:
    try:
        doc, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        raise ReadError(f"line {exc.lineno}: not valid JSON: {exc.msg}") from exc
    body = doc.get("body") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        raise ReadError("JSON without the 'body' object of dcgmi health -j")
    overall = status_of(_value(body.get("Overall Health")))
    entities: dict[str, tuple[Status, str]] = {}
    for group, node in body.items():
        if group == "Overall Health" or not isinstance(node, dict):
            continue
        for number, entity in (node.get("children") or {}).items():
            incidents = []
            errors = ((entity.get("children") or {}).get("Errors") or {}).get("children") or {}
            for system, incident in errors.items():
                words = " ".join(incident.get("overflow") or [])
                incidents.append(f"{system}: {_value(incident)}" + (f" - {words}" if words else ""))
            entities[_entity(group, number)] = (_or_unknown(status_of(_value(entity))), "; ".join(incidents))
    return overall, entities


def _value(node: Any) -> str:
    return str(node.get("value", "")) if isinstance(node, dict) else ""
