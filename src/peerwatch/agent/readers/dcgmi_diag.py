"""Saved ``dcgmi diag`` output (levels r1–r4), as the table or as ``-j`` JSON (DCGM 2.x–4.x).

Every test outcome is read per GPU: the 3.x table's ``Pass - All`` / ``Fail - GPU: 0`` and its
``Warning`` / ``Info`` rows (``GPU 0 ...``), the 4.x table's ``GPU0: Fail`` rows, and both JSON
shapes (``"DCGM GPU Diagnostic"`` with ``gpu_ids``, ``"DCGM Diagnostic"`` with ``entity_id``).
Fail → CRITICAL, except a failed setup test (:data:`SETUP_TESTS`: DCGM could not run, which says
nothing about the hardware) → UNHEALTHY; Warn → UNHEALTHY; Skip tested nothing and counts for
nothing, so a GPU whose tests were all skipped is UNKNOWN. One ``dcgm_diag`` result per GPU and
one for the ``node`` (setup tests and the overall worst).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from peerwatch.agent.checks import SEVERITY, CheckResult, Status, worst
from peerwatch.agent.paste import clean_lines, first_lines
from peerwatch.agent.readers.errors import ReadError

FORMAT = "dcgmi-diag"
CHECK = "dcgm_diag"

RESULT_WORDS: Mapping[str, Status | None] = {
    "pass": Status.OK,
    "warn": Status.UNHEALTHY,
    "fail": Status.CRITICAL,
    "skip": None,  # not run: no evidence either way
}

SETUP_TESTS = frozenset(
    {
        "blacklist",
        "denylist",
        "nvml library",
        "cuda main library",
        "cuda toolkit libraries",
        "permissions and os blocks",
        "persistence mode",
        "environment variables",
        "graphics processes",
        "software",
    }
)
"""Deployment tests that check DCGM's own setup; their failure is UNHEALTHY, not a hardware verdict."""

_SECTION = re.compile(r"^[|+]-+\s+([A-Za-z][\w ]*?)\s+-+[+|]")
_CATEGORIES = ("Metadata", "Deployment", "Integration", "Hardware", "Stress", "Performance", "Custom")
_RESULT_3X = re.compile(r"^(Pass|Fail|Warn|Skip)\b(?:\s*-\s*(All|GPU:\s*([\d,\s]+)))?\s*$", re.IGNORECASE)
_RESULT_4X = re.compile(r"^(GPU|CPU|Switch|NvSwitch)\s*(\d+):\s*(Pass|Fail|Warn|Skip)\b", re.IGNORECASE)
_MESSAGE_GPU = re.compile(r"^GPU\s*(\d+)\b")
_DEVICE_IDS = re.compile(r"[0-9a-fA-F]{4}")


@dataclass
class _Outcome:
    category: str
    test: str
    entity: str  # "gpu/0", "all" (every GPU) or "node"
    word: str
    messages: list[list[str]] = field(default_factory=list)  # each message as the table's wrapped chunks


def detect(text: str) -> bool:
    """True for the table (``| Diagnostic | Result |``) or JSON with a ``DCGM ... Diagnostic`` object."""
    head = first_lines(text, 8)
    if any(re.match(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|", line) for line in head):
        return True
    # a paste that starts inside the table still shows a category rule ("+-----  Hardware  ---+")
    if any((m := _SECTION.match(line)) and m.group(1) in _CATEGORIES for line in first_lines(text, 40)):
        return True
    return (
        any(line.startswith("{") for line in head) and re.search(r'"DCGM (GPU )?Diagnostic"', text[:5000]) is not None
    )


def read(text: str) -> list[CheckResult]:
    """One ``dcgm_diag`` result per GPU tested, then the ``node`` summary."""
    start = text.find("{")
    table = any(line.lstrip().startswith("|") and not line.lstrip().startswith('|"') for _, line in clean_lines(text))
    outcomes = _from_table(text) if table or start < 0 else _from_json(text[start:])
    if not outcomes:
        raise ReadError("no dcgmi diag test results found (neither '| Diagnostic | Result |' rows nor JSON tests)")
    return list(_judge(outcomes))


def _from_table(text: str) -> list[_Outcome]:
    outcomes: list[_Outcome] = []
    category = ""
    current: _Outcome | None = None  # the test the next wrapped rows belong to
    message: list[str] | None = None  # the chunks of the Info/Warning text being unwrapped
    for _, line in clean_lines(text):
        stripped = line.strip()
        if match := _SECTION.match(stripped):
            category, current, message = match.group(1), None, None
            continue
        if not stripped.startswith("|") or stripped.startswith("|="):
            continue
        raw = stripped.strip("|").split("|")
        cells = [c.strip() for c in raw]
        left, right = cells[0], (cells[1] if len(cells) > 1 else "")
        # dcgmi cuts long messages into fixed-width chunks, mid-word: keep a chunk's leading space to rejoin it
        chunk = raw[1][1:].rstrip() if len(raw) > 1 else right
        # "| Diagnostic | Result |" is the heading; a "| Diagnostic | Pass - All |" row is the r3 test of that name
        if category in ("", "Metadata") or (left == "Diagnostic" and right == "Result"):
            if left == "GPU Device IDs Detected":
                outcomes.append(_Outcome("Metadata", "devices", "node", right))
            continue
        if left in ("Info", "Warning"):
            message = [right]
            if current is not None:
                # Each Info/Warning row belongs to the test above; "GPU 0 ..." names its GPU.
                target = current
                if left == "Warning" and (m := _MESSAGE_GPU.match(right)):
                    target = _for_entity(outcomes, current, f"gpu/{m.group(1)}")
                message = [chunk if left == "Warning" else f"(info) {chunk}"]
                target.messages.append(message)
            continue
        if left and right:
            message = None
            current = _row_result(category, left, right, outcomes)
        elif left:  # a row cut off by the end of a paste: no result to read
            message, current = None, None
        elif message is not None and right and not (_RESULT_4X.match(right) or _RESULT_3X.match(right)):
            message.append(chunk)
        elif current is not None and right:  # "GPU0: Fail" or "Fail - GPU: 0" under the test's row
            message = None
            current = _row_result(category, current.test, right, outcomes)
    return [o for o in outcomes if o.category != "Metadata" or o.test == "devices"]


def _row_result(category: str, test: str, right: str, outcomes: list[_Outcome]) -> _Outcome:
    if match := _RESULT_4X.match(right):
        outcome = _Outcome(category, test, f"{match.group(1).lower()}/{match.group(2)}", match.group(3))
    elif match := _RESULT_3X.match(right):
        if match.group(3):
            ids = [i for i in re.split(r"[,\s]+", match.group(3)) if i]
            for extra in ids[1:]:
                outcomes.append(_Outcome(category, test, f"gpu/{extra}", match.group(1)))
            entity = f"gpu/{ids[0]}"
        else:
            entity = "all" if match.group(2) else "node"
        outcome = _Outcome(category, test, entity, match.group(1))
    else:
        outcome = _Outcome(category, test, "node", right.split(" ")[0] if right else "")
    outcomes.append(outcome)
    return outcome


def _for_entity(outcomes: list[_Outcome], current: _Outcome, entity: str) -> _Outcome:
    for outcome in reversed(outcomes):
        if outcome.test == current.test and outcome.entity == entity:
            return outcome
    return current


def _from_json(text: str) -> list[_Outcome]:
    try:
        doc, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        raise ReadError(f"line {exc.lineno}: not valid JSON: {exc.msg}") from exc
    root = doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic") if isinstance(doc, dict) else None
    if not isinstance(root, dict):
        raise ReadError("JSON without a 'DCGM GPU Diagnostic' or 'DCGM Diagnostic' object")
    outcomes = []
    for category in root.get("test_categories") or []:
        if not isinstance(category, dict):
            continue
        for test in category.get("tests") or []:
            if not isinstance(test, dict):
                continue  # DCGM 3.x writes null entries
            for result in test.get("results") or []:
                for entity in _json_entities(result):
                    outcomes.append(
                        _Outcome(
                            str(category.get("category", "")),
                            str(test.get("name", "")),
                            entity,
                            str(result.get("status", "")),
                            _json_messages(result),
                        )
                    )
    return outcomes


def _json_entities(result: Mapping[str, Any]) -> list[str]:
    if "entity_id" in result:
        return [f"{str(result.get('entity_group', 'GPU')).replace(' ', '').lower()}/{result['entity_id']}"]
    ids = str(result.get("gpu_ids", result.get("gpu_id", "")))
    return [f"gpu/{i}" for i in re.split(r"[,\s]+", ids) if i] or ["node"]


def _json_messages(result: Mapping[str, Any]) -> list[list[str]]:
    out = []
    for key in ("warnings", "warning"):
        items = result.get(key) or []
        for item in items if isinstance(items, list) else [items]:
            out.append([str(item.get("warning", item)) if isinstance(item, dict) else str(item)])
    return out


def _judge(outcomes: list[_Outcome]) -> Iterator[CheckResult]:
    devices = next((o.word for o in outcomes if o.test == "devices"), "")
    tests = [o for o in outcomes if o.test != "devices"]
    named = {o.entity for o in tests if o.entity.startswith("gpu/")}
    # "GPU 3 ..." messages name the GPUs a "Fail - All" covered (dcgmi diag -i 3 tests GPU 3 alone)
    named |= {f"gpu/{m.group(1)}" for o in tests for msg in o.messages if (m := _MESSAGE_GPU.match(msg[0]))}
    gpus = sorted(named, key=_entity_key)
    if not gpus and (count := len(_DEVICE_IDS.findall(devices))):
        gpus = [f"gpu/{i}" for i in range(count)]
    per_entity: dict[str, list[tuple[Status | None, str]]] = {g: [] for g in gpus}
    node: list[tuple[Status | None, str]] = []
    for o in tests:
        verdict = _verdict(o)
        if o.entity == "all" and gpus:
            for g in gpus:
                # "GPU 3 ..." messages belong to GPU 3 only
                mine = [m for m in o.messages if (n := _MESSAGE_GPU.match(m[0])) is None or f"gpu/{n.group(1)}" == g]
                per_entity[g].append(_verdict(_Outcome(o.category, o.test, g, o.word, mine)))
        elif o.entity in ("all", "node"):
            node.append(verdict)
        else:
            per_entity.setdefault(o.entity, []).append(verdict)
    for entity, verdicts in per_entity.items():
        yield _result(entity, verdicts)
    everything = node + [v for vs in per_entity.values() for v in vs]
    status = _result("node", everything).status
    counts = {w: sum(1 for o in tests if o.word.lower() == w) for w in ("pass", "warn", "fail", "skip")}
    summary = ", ".join(f"{n} {w}" for w, n in counts.items() if n)
    bad = "; ".join(h for s, h in node if s is not None and s is not Status.OK)
    hint = f"{len(tests)} test results: {summary}" + (f"; {bad}" if bad else "")
    yield CheckResult(CHECK, "node", status, hint)


def _verdict(o: _Outcome) -> tuple[Status | None, str]:
    word = o.word.lower()
    if word not in RESULT_WORDS:
        return Status.UNKNOWN, f"{o.test}: unrecognised result {o.word!r}"
    status = RESULT_WORDS[word]
    if status is Status.CRITICAL and o.test.lower() in SETUP_TESTS:
        status = Status.UNHEALTHY
    said = " ".join(_unwrap(m) for m in o.messages if m and not m[0].startswith("(info)"))
    return status, f"{o.test}: {o.word.capitalize()}" + (f" ({said})" if said and status is not Status.OK else "")


def _unwrap(chunks: list[str]) -> str:
    """One message from its table chunks: a chunk as wide as the widest was cut mid-word, a shorter one at a space."""
    width = max(len(c) for c in chunks)
    text = chunks[0]
    for previous, chunk in pairwise(chunks):
        text += ("" if len(previous) >= width else " ") + chunk
    return " ".join(text.split())


def _result(entity: str, verdicts: list[tuple[Status | None, str]]) -> CheckResult:
    judged = [(s, h) for s, h in verdicts if s is not None]
    skipped = [h.split(":")[0] for s, h in verdicts if s is None]
    if not judged:
        why = f"every test skipped ({', '.join(skipped)})" if skipped else "no test result"
        return CheckResult(CHECK, entity, Status.UNKNOWN, why)
    status = worst(s for s, _ in judged)
    bad = [h for s, h in sorted(judged, key=lambda v: -SEVERITY[v[0]]) if s is not Status.OK]
    hint = "; ".join(bad) if bad else f"{len(judged)} test{'s' if len(judged) != 1 else ''} passed"
    return CheckResult(CHECK, entity, status, hint + (f"; skipped: {', '.join(skipped)}" if skipped else ""))


def _entity_key(entity: str) -> tuple[str, int]:
    kind, _, number = entity.partition("/")
    return kind, int(number) if number.isdigit() else -1
