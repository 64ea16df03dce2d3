"""Loading labels.json and alarms files (errors name the file and field), and the continuity rule."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from peerwatch.evaluate import AlarmsError, LabelsError, load_labels, read_alarms
from peerwatch.evaluate.continuity import Episode, Rule, episodes

GOOD: dict[str, Any] = {
    "scenario": "cli",
    "nodes": ["gpu001", "gpu002", "gpu003"],
    "spares": ["gpu003"],
    "start_ts": 1000.0,
    "end_ts": 4600.0,
    "step": 30.0,
    "faults": [
        {
            "node": "gpu002",
            "component": "gpu/1",
            "kind": "nvlink_xid",
            "onset_ts": 2000.0,
            "failure_ts": 2600.0,
            "end_ts": 2600.0,
            "expected": ["nvlink"],
            "xid": 149,
        },
        {
            "node": "cluster",
            "component": "nfs//data",
            "kind": "nfs_storage",
            "onset_ts": 3000.0,
            "failure_ts": None,
            "end_ts": 4000.0,
            "expected": ["nfs_storage"],
        },
    ],
    "events": [],
}


def write(tmp_path: Path, doc: Any) -> Path:
    folder = tmp_path / "scen"
    folder.mkdir(exist_ok=True)
    path = folder / "labels.json"
    path.write_bytes(doc if isinstance(doc, bytes) else orjson.dumps(doc))
    return path


def test_good_labels_load(tmp_path: Path) -> None:
    lab = load_labels(write(tmp_path, GOOD))
    assert lab.name == "scen" and lab.nodes == ("gpu001", "gpu002", "gpu003")
    assert lab.faults[0].xid == 149 and lab.faults[1].failure_ts is None
    assert lab.node_hours == 3.0  # the spare is one of the nodes, counted once


def _set(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()
BAD = [
    ("nodes missing", ("nodes",), _DELETE, "nodes"),
    ("nodes not strings", ("nodes",), [1, 2], "nodes"),
    ("start_ts missing", ("start_ts",), _DELETE, "start_ts"),
    ("end before start", ("end_ts",), 500.0, "end_ts"),
    ("step zero", ("step",), 0, "step"),
    ("faults not a list", ("faults",), {"a": 1}, "faults"),
    ("fault not an object", ("faults", 0), "x", "faults[0]"),
    ("onset a string", ("faults", 1, "onset_ts"), "soon", "faults[1].onset_ts"),
    ("onset a bool", ("faults", 0, "onset_ts"), True, "faults[0].onset_ts"),
    ("failure before onset", ("faults", 0, "failure_ts"), 1999.0, "faults[0].failure_ts"),
    ("end before onset", ("faults", 1, "end_ts"), 10.0, "faults[1].end_ts"),
    ("unknown node", ("faults", 0, "node"), "gpu999", "faults[0].node"),
    ("empty component", ("faults", 0, "component"), "", "faults[0].component"),
    ("kind missing", ("faults", 1, "kind"), _DELETE, "faults[1].kind"),
    ("unknown diagnosis", ("faults", 0, "expected"), ["nvlinkk"], "faults[0].expected"),
    ("no diagnosis", ("faults", 0, "expected"), [], "faults[0].expected"),
    ("xid a string", ("faults", 0, "xid"), "149", "faults[0].xid"),
]


@pytest.mark.parametrize(("case", "path", "value", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_labels_name_file_and_field(
    tmp_path: Path, case: str, path: tuple[Any, ...], value: Any, field: str
) -> None:
    file = write(tmp_path, _set(path, value))
    with pytest.raises(LabelsError) as info:
        load_labels(file)
    assert info.value.field == field
    assert str(info.value).startswith(f"{file}: {field}: ")


@pytest.mark.parametrize(("content", "field"), [(b"{not json", "(file)"), (b"[1, 2]", "(top level)")])
def test_unreadable_labels(tmp_path: Path, content: bytes, field: str) -> None:
    file = write(tmp_path, content)
    with pytest.raises(LabelsError, match=re.escape(f"{file}: {field}: ")):
        load_labels(file)


def test_missing_labels_file(tmp_path: Path) -> None:
    with pytest.raises(LabelsError, match="cannot read"):
        load_labels(tmp_path / "nope" / "labels.json")


def test_alarms_file_reads_analyze_lines(tmp_path: Path) -> None:
    path = tmp_path / "alarms.jsonl"
    line = {"ts": 10, "node": "gpu001", "component": "gpu/1", "diagnosis": "nvlink", "evidence": []}
    path.write_bytes(orjson.dumps(line) + b"\n\n" + orjson.dumps(line | {"ts": 11.5}) + b"\n")
    assert [a.ts for a in read_alarms(path)] == [10.0, 11.5]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{oops", ":2: not JSON"),
        (b'{"node": "gpu001", "component": "node", "diagnosis": "unknown"}', ":2: ts: expected epoch seconds"),
        (b'{"ts": "10", "node": "gpu001", "component": "node", "diagnosis": "unknown"}', ":2: ts:"),
        (b'{"ts": 10, "component": "node", "diagnosis": "unknown"}', ":2: node:"),
        (b'{"ts": 10, "node": "gpu001", "component": "node"}', ":2: diagnosis:"),
        (b"[1]", ":2: expected an object"),
    ],
)
def test_bad_alarm_lines_name_file_and_line(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "alarms.jsonl"
    path.write_bytes(b'{"ts": 1, "node": "a", "component": "node", "diagnosis": "unknown"}\n' + line + b"\n")
    with pytest.raises(AlarmsError, match=re.escape(str(path) + message)):
        read_alarms(path)


def _flags(text: str) -> np.ndarray:
    return np.array([c == "x" for c in text], dtype=bool)


# (case, per-step outlier flags, expected episodes (raised, first, last, points)); rule 2 of 3, quiet 10
CONTINUITY = [
    ("nothing", "..........", []),
    ("one isolated point", "...x......", []),
    ("isolated points far apart", "x...x...x...x", []),
    ("two in a row", "..xx......", [Episode(3, 2, 3, 2)]),
    ("two of three", "..x.x.....", [Episode(4, 2, 4, 2)]),
    ("flapping is one episode", "xx.x..x..x.x..x", [Episode(1, 0, 14, 7)]),
    ("quiet gap splits", "xx" + "." * 11 + "xx", [Episode(1, 0, 1, 2), Episode(14, 13, 14, 2)]),
    ("gap of exactly quiet does not split", "xx" + "." * 9 + "xx", [Episode(1, 0, 12, 4)]),
    ("raised late in an episode", "x...x....xx", [Episode(10, 0, 10, 4)]),
]


@pytest.mark.parametrize(("case", "flags", "expected"), CONTINUITY, ids=[c[0] for c in CONTINUITY])
def test_continuity_rule(case: str, flags: str, expected: list[Episode]) -> None:
    assert episodes(_flags(flags), Rule(need=2, span=3, quiet=10)) == expected


def test_continuity_rule_rejects_impossible_settings() -> None:
    with pytest.raises(ValueError, match="need"):
        Rule(need=4, span=3)
    with pytest.raises(ValueError, match="quiet"):
        Rule(quiet=2, span=3)
