"""``nvidia-smi --query-gpu=... --format=csv``: with or without header and units, any field order.

With a header the columns are named (units such as ``[%]`` dropped); without one the agent's own
field lists (:data:`QUERY_FIELDS`, :data:`MINIMAL_FIELDS`, :data:`REMAP_FIELDS`,
:data:`RECOVERY_FIELDS`) are recognised
by their shape. The live agent parses its nvidia-smi calls here too.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence

from peerwatch.agent.checks import CheckResult
from peerwatch.agent.gpu_facts import GpuQuery, GpuRow, RemapRow, flag, judge_query, number, reasons_mask
from peerwatch.agent.paste import first_lines, paste_lines
from peerwatch.agent.readers.errors import ReadError
from peerwatch.agent.sysfs import pci_bus_id

FORMAT = "nvidia-smi-csv"

QUERY_FIELDS = (
    "index,pci.bus_id,uuid,name,utilization.gpu,ecc.errors.uncorrected.volatile.total,"
    "retired_pages.pending,clocks_throttle_reasons.active"
)
MINIMAL_FIELDS = "index,pci.bus_id,uuid,name,utilization.gpu"  # when the driver rejects a field of the full set
RECOVERY_FIELDS = "index,pci.bus_id,gpu_recovery_action"  # drivers >= 550; asked apart from QUERY_FIELDS
REMAP_FIELDS = (
    "gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure"
)

# Field names nvidia-smi accepts for the same fact (it renamed "throttle" to "event" in driver 535).
_ALIASES: Mapping[str, str] = {
    "gpu_bus_id": "pci.bus_id",
    "clocks_event_reasons.active": "clocks_throttle_reasons.active",
    "remapped_rows.correctable": "remap.correctable",
    "remapped_rows.uncorrectable": "remap.uncorrectable",
    "remapped_rows.pending": "remap.pending",
    "remapped_rows.failure": "remap.failure",
}
_KNOWN = {
    "index", "pci.bus_id", "uuid", "name", "utilization.gpu", "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending", "clocks_throttle_reasons.active", "gpu_recovery_action",
    "remap.correctable", "remap.uncorrectable", "remap.pending", "remap.failure",
}  # fmt: skip
_FIELD = re.compile(r"^([a-z_][a-z0-9_.]*)(?:\s*\[[^\]]*\])?$")
_REASON = re.compile(r"^clocks_(?:throttle|event)_reasons\.(\w+)$")
_LOST = re.compile(r"device handle for GPU\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-7])\s*:\s*(.*)")


def _canonical(field: str) -> str:
    name = field.strip().lower()
    match = _FIELD.match(name)
    name = match.group(1) if match else name
    return _ALIASES.get(name, name)


def _header(cells: Sequence[str]) -> list[str] | None:
    names = [_canonical(c) for c in cells]
    if all(_FIELD.match(c.strip().lower()) for c in cells) and any(n in _KNOWN or _REASON.match(n) for n in names):
        return names
    return None


def _shape(row: Sequence[str]) -> list[str] | None:
    """The agent's own field list a header-less row has the shape of, if any."""
    for fields in (QUERY_FIELDS, MINIMAL_FIELDS, REMAP_FIELDS, RECOVERY_FIELDS):
        names = [_canonical(f) for f in fields.split(",")]
        if len(row) != len(names):
            continue
        first = row[0].strip()
        if (names[0] == "index" and first.isdigit()) or (names[0] == "pci.bus_id" and pci_bus_id(first)):
            return names
    return None


def _rows(text: str) -> list[tuple[int, list[str]]]:
    lines = paste_lines(text)
    out = []
    for number_, row in enumerate(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True), 1):
        if row and any(cell.strip() for cell in row) and "device handle" not in row[0]:
            out.append((number_, [cell.strip() for cell in row]))
    return out


def parse_csv(text: str, fields: str | None = None) -> GpuQuery:
    """The GPUs (and remapper rows) of a ``--query-gpu`` / ``--query-remapped-rows`` CSV.

    ``fields``: the comma-separated field list of a header-less output; without it the header
    names the columns, or the agent's own field lists are recognised by shape. Rows that fit
    no field list are skipped; a CSV whose columns cannot be named at all raises :class:`ReadError`.
    """
    lost = {}
    for line in text.splitlines():
        match = _LOST.search(line)
        if match and (bus := pci_bus_id(match.group(1))):
            lost[bus] = line.strip()
    names = [_canonical(f) for f in fields.split(",")] if fields else None
    gpus: list[GpuRow] = []
    remaps: dict[str, RemapRow] = {}
    for line_no, row in _rows(text):
        if fields is None:
            header = _header(row)
            if header is not None:
                names = header
                continue
        columns = names if names is not None and len(row) == len(names) else _shape(row)
        if columns is None:
            continue
        values = dict(zip(columns, row, strict=True))
        _add(values, len(gpus), gpus, remaps, lost, line_no)
    if names is None and not gpus and not remaps and not lost:
        raise ReadError("no CSV header naming nvidia-smi fields and no row of a known shape (line 1)")
    return GpuQuery(tuple(gpus), lost, remaps=remaps)


def _add(
    values: Mapping[str, str],
    order: int,
    gpus: list[GpuRow],
    remaps: dict[str, RemapRow],
    lost: dict[str, str],
    line_no: int,
) -> None:
    bus = pci_bus_id(values.get("pci.bus_id", "")) if "pci.bus_id" in values else None
    if any(k.startswith("remap.") for k in values) and bus is not None:
        remaps[bus] = RemapRow(
            number(values.get("remap.correctable")),
            number(values.get("remap.uncorrectable")),
            flag(values.get("remap.pending")),
            flag(values.get("remap.failure")),
        )
    if not ({"index", "uuid", "name"} & set(values)):
        return  # a remapped-rows row only
    index_text = values.get("index", "")
    index = int(index_text) if index_text.isdigit() else order
    component = bus or f"gpu/{index}"  # a CSV without pci.bus_id names GPUs by index
    if any("GPU is lost" in v for v in values.values()):
        lost[component] = f"nvidia-smi: GPU {index} ({component}) is lost (line {line_no})"
    reasons = values.get("clocks_throttle_reasons.active", "")
    flags = {m.group(1): flag(v) for k, v in values.items() if (m := _REASON.match(k)) and m.group(1) != "active"}
    gpus.append(
        GpuRow(
            index,
            component,
            values.get("uuid", ""),
            values.get("name", ""),
            number(values.get("utilization.gpu")),
            number(values.get("ecc.errors.uncorrected.volatile.total")),
            flag(values.get("retired_pages.pending", "")),
            int(reasons, 16) if reasons.lower().startswith("0x") else reasons_mask(flags),
            values.get("gpu_recovery_action"),
        )
    )


def parse_remap(text: str) -> dict[str, RemapRow]:
    """Row-remapper state per PCI address from ``--query-remapped-rows=<REMAP_FIELDS>`` output."""
    return dict(parse_csv(text, REMAP_FIELDS).remaps)


def detect(text: str) -> bool:
    """A CSV header naming nvidia-smi fields, or a first row of the agent's own field lists."""
    for line in first_lines(text, 5):
        row = next(csv.reader([line], skipinitialspace=True), [])
        if len(row) >= 2 and (_header(row) is not None or _shape([c.strip() for c in row]) is not None):
            return True
    return False


def read(text: str) -> list[CheckResult]:
    """The ``nvidia_smi`` verdict per GPU of a saved CSV."""
    query = parse_csv(text)
    if not query.gpus and query.remaps:  # --query-remapped-rows: the remapper state is all it tells
        gpus = tuple(GpuRow(i, bus, "", "") for i, bus in enumerate(query.remaps))
        query = GpuQuery(gpus, query.lost, remaps=query.remaps)
    if not query.gpus and not query.lost:
        raise ReadError("the CSV names no GPU (no index, pci.bus_id, uuid or name column)")
    return list(judge_query(query))
