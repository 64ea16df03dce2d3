"""What an XID means for diagnosis: a table (``xid_diagnosis.csv``) over NVIDIA's catalogue.

XIDs the table does not list fall back on the catalogue's resolution bucket: one that needs a
GPU reset or a reboot is a hardware fault of unknown kind; one that only needs the application
restarted is left to the application.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache
from importlib import resources

from peerwatch.agent.xid_catalog import load_catalog
from peerwatch.model import DIAGNOSES

_HARDWARE_BUCKETS = ("RESET_GPU", "RESTART_BM", "WORKFLOW_")


@dataclass(frozen=True, slots=True)
class XidMeaning:
    xid: int
    diagnosis: str | None  # None: the application's business, not a hardware finding
    score: float
    text: str


@cache
def _table() -> dict[int, XidMeaning]:
    text = resources.files("peerwatch.catalog").joinpath("xid_diagnosis.csv").read_text(encoding="utf-8")
    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        diagnosis = row["diagnosis"] or None
        if diagnosis is not None and diagnosis not in DIAGNOSES:
            raise ValueError(f"xid_diagnosis.csv: XID {row['xid']}: unknown diagnosis {diagnosis!r}")
        out[int(row["xid"])] = XidMeaning(int(row["xid"]), diagnosis, float(row["score"]), row["why"])
    return out


def xid_meaning(xid: int) -> XidMeaning:
    """The diagnosis, score and a short text for an XID code."""
    known = _table().get(xid)
    if known is not None:
        return known
    entry = load_catalog().get(xid)
    if entry is None:
        return XidMeaning(xid, "unknown", 10.0, "XID not in NVIDIA's catalogue (newer driver?)")
    hardware = entry.immediate_action.startswith(_HARDWARE_BUCKETS)
    return XidMeaning(xid, "unknown" if hardware else None, 12.0 if hardware else 0.0, entry.description)
