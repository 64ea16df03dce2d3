"""Xid knowledge in one place: NVIDIA's Xid catalogue as shipped in ``peerwatch/data/xid_catalog.csv``
(see ``XID_SOURCE.md``), and what an Xid means for diagnosis (``data/xid_diagnosis.csv`` over it).

Both the agent (status of an Xid, ``agent/xid_policy.py``) and the detectors (``xid_meaning``) read
it. It imports nothing at load time beyond the standard library, so the agent stays free of numpy.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path


@dataclass(frozen=True, slots=True)
class XidEntry:
    """One row of the catalogue: what an Xid is and NVIDIA's resolution buckets for it."""

    xid: int
    mnemonic: str
    description: str
    immediate_action: str  # resolution bucket, e.g. RESET_GPU; empty for Xid 162-172 in this copy
    investigatory_action: str
    note: str  # our paraphrase of NVIDIA's guidance, not NVIDIA's words


def parse_catalog(text: str, where: str = "xid_catalog.csv") -> dict[int, XidEntry]:
    """Rows of a catalogue CSV keyed by Xid; raises ``ValueError`` naming the bad line."""
    entries: dict[int, XidEntry] = {}
    reader = csv.DictReader(io.StringIO(text))
    required = {"xid", "mnemonic", "description", "immediate_action", "investigatory_action", "note"}
    missing = required - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"{where}: missing columns {sorted(missing)}")
    for row in reader:
        try:
            xid = int(row["xid"])
        except ValueError:
            raise ValueError(f"{where}:{reader.line_num}: xid {row['xid']!r} is not an integer") from None
        entries[xid] = XidEntry(
            xid,
            row["mnemonic"].strip(),
            row["description"].strip(),
            row["immediate_action"].strip(),
            row["investigatory_action"].strip(),
            row["note"].strip(),
        )
    return entries


_HARDWARE_BUCKETS = ("RESET_GPU", "RESTART_BM", "WORKFLOW_")


@dataclass(frozen=True, slots=True)
class XidMeaning:
    xid: int
    diagnosis: str | None  # None: the application's business, not a hardware finding
    score: float
    text: str


@cache
def _packaged() -> Mapping[int, XidEntry]:
    text = resources.files("peerwatch").joinpath("data", "xid_catalog.csv").read_text(encoding="utf-8")
    return parse_catalog(text)


def load_catalog(path: Path | None = None) -> Mapping[int, XidEntry]:
    """The catalogue at ``path``, or the copy shipped with peerwatch."""
    if path is None:
        return _packaged()
    return parse_catalog(path.read_text(encoding="utf-8"), str(path))


@cache
def _meanings() -> dict[int, XidMeaning]:
    from peerwatch.model import DIAGNOSES  # here, not at the top: model loads numpy, the agent needs none

    text = resources.files("peerwatch").joinpath("data", "xid_diagnosis.csv").read_text(encoding="utf-8")
    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        diagnosis = row["diagnosis"] or None
        if diagnosis is not None and diagnosis not in DIAGNOSES:
            raise ValueError(f"xid_diagnosis.csv: XID {row['xid']}: unknown diagnosis {diagnosis!r}")
        out[int(row["xid"])] = XidMeaning(int(row["xid"]), diagnosis, float(row["score"]), row["why"])
    return out


def xid_meaning(xid: int) -> XidMeaning:
    """The diagnosis, score and a short text for an XID code.

    XIDs the diagnosis table does not list fall back on the catalogue's resolution bucket: one that
    needs a GPU reset or a reboot is a hardware fault of unknown kind; one that only needs the
    application restarted is left to the application.
    """
    known = _meanings().get(xid)
    if known is not None:
        return known
    entry = load_catalog().get(xid)
    if entry is None:
        return XidMeaning(xid, "unknown", 10.0, "XID not in NVIDIA's catalogue (newer driver?)")
    hardware = entry.immediate_action.startswith(_HARDWARE_BUCKETS)
    return XidMeaning(xid, "unknown" if hardware else None, 12.0 if hardware else 0.0, entry.description)
