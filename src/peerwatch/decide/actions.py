"""Severity and the recommended action per diagnosis, from ``actions.csv``.

``critical_at``: a warning-level diagnosis becomes critical when the incident's score reaches it.
Swap: replace the node with a spare before it fails; drain: take it out of scheduling; watch: keep
it in service and look.
"""

from __future__ import annotations

import csv
import io
from functools import cache
from importlib import resources

from peerwatch.model import DIAGNOSES


@cache
def _table() -> dict[str, tuple[str, str, float]]:
    text = resources.files("peerwatch.decide").joinpath("actions.csv").read_text(encoding="utf-8")
    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row["diagnosis"] not in DIAGNOSES or row["severity"] not in ("warning", "critical"):
            raise ValueError(f"actions.csv: bad row {row}")
        if row["action"] not in ("watch", "drain", "swap"):
            raise ValueError(f"actions.csv: bad action in {row}")
        out[row["diagnosis"]] = (row["severity"], row["action"], float(row["critical_at"]))
    missing = set(DIAGNOSES) - set(out)
    if missing:
        raise ValueError(f"actions.csv: no row for {sorted(missing)}")
    return out


def severity_and_action(diagnosis: str, score: float) -> tuple[str, str]:
    """``(severity, action)`` for an incident of this diagnosis and peak score."""
    severity, action, critical_at = _table().get(diagnosis, _table()["unknown"])
    if severity == "warning" and score >= critical_at:
        severity = "critical"
    return severity, action
