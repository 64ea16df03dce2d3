"""NVIDIA's Xid catalogue as shipped in ``peerwatch/data/xid_catalog.csv`` (see ``XID_SOURCE.md``)."""

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


@cache
def _packaged() -> Mapping[int, XidEntry]:
    text = resources.files("peerwatch").joinpath("data", "xid_catalog.csv").read_text(encoding="utf-8")
    return parse_catalog(text)


def load_catalog(path: Path | None = None) -> Mapping[int, XidEntry]:
    """The catalogue at ``path``, or the copy shipped with peerwatch."""
    if path is None:
        return _packaged()
    return parse_catalog(path.read_text(encoding="utf-8"), str(path))
