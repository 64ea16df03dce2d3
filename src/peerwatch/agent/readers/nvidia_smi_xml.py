"""``nvidia-smi -q -x``: the ``<nvidia_smi_log>`` document, one ``<gpu id="...">`` per GPU.

Reads the same facts as the ``-q`` text (see :mod:`.nvidia_smi_query`) under their XML names:
``clocks_throttle_reasons``/``clocks_event_reasons``, ``remapped_rows``, ``retired_pages``,
``ecc_errors/volatile``, ``gpu_recovery_action`` and ``gpu_reset_status``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from peerwatch.agent.checks import CheckResult
from peerwatch.agent.gpu_facts import GpuQuery, GpuRow, RemapRow, flag, judge_query, number, reasons_mask
from peerwatch.agent.paste import first_lines, paste_lines
from peerwatch.agent.readers.errors import ReadError
from peerwatch.agent.sysfs import pci_bus_id

FORMAT = "nvidia-smi-xml"

_START = re.compile(r"<nvidia_smi_log\b")
_END = "</nvidia_smi_log>"
_REASON = re.compile(r"^clocks_(?:throttle|event)_reason_(\w+)$")


def _text(node: ET.Element | None, path: str) -> str | None:
    found = node.find(path) if node is not None else None
    return found.text.strip() if found is not None and found.text is not None else None


def _ecc_uncorrected(gpu: ET.Element) -> float | None:
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None
    total = _text(volatile, "double_bit/total")
    if total is not None:
        return number(total)
    counts = [number(e.text) for e in volatile if "uncorrectable" in e.tag]
    present = [c for c in counts if c is not None]
    return sum(present) if present else None


def _recovery(gpu: ET.Element) -> str | None:
    action = _text(gpu, "gpu_recovery_action")
    if action is not None:
        return action
    if flag(_text(gpu, "gpu_reset_status/drain_and_reset_recommended")):
        return "Drain and Reset"
    if flag(_text(gpu, "gpu_reset_status/reset_required")):
        return "Reset"
    return None


def _gpu(index: int, bus: str, gpu: ET.Element) -> tuple[GpuRow, RemapRow | None]:
    active = {}
    for section in ("clocks_throttle_reasons", "clocks_event_reasons"):
        for element in gpu.findall(f"{section}/*"):
            match = _REASON.match(element.tag)
            if match is not None:
                active[match.group(1)] = flag(element.text)
    retired = _text(gpu, "retired_pages/pending_retirement") or _text(gpu, "retired_pages/pending_blacklist")
    row = GpuRow(
        index,
        bus,
        _text(gpu, "uuid") or "",
        _text(gpu, "product_name") or "",
        number(_text(gpu, "utilization/gpu_util")),
        _ecc_uncorrected(gpu),
        flag(retired),
        reasons_mask(active),
        _recovery(gpu),
    )
    remap = gpu.find("remapped_rows")
    if remap is None or len(remap) == 0:  # "<remapped_rows>N/A</remapped_rows>" on GPUs without a remapper
        return row, None
    return row, RemapRow(
        number(_text(remap, "remapped_row_corr")),
        number(_text(remap, "remapped_row_unc")),
        flag(_text(remap, "remapped_row_pending")),
        flag(_text(remap, "remapped_row_failure")),
    )


def parse_xml(text: str) -> GpuQuery:
    """The GPUs of an ``nvidia-smi -q -x`` document (pasted text around it is ignored)."""
    body = "\n".join(paste_lines(text))
    start = _START.search(body)
    end = body.find(_END)
    if start is None or end < 0:
        raise ReadError("no complete <nvidia_smi_log> ... </nvidia_smi_log> document (cut paste?)")
    try:
        root = ET.fromstring(body[start.start() : end + len(_END)])
    except ET.ParseError as exc:
        line = exc.position[0] + body[: start.start()].count("\n")
        raise ReadError(f"line {line}: not well-formed XML ({exc})") from None
    gpus, remaps = [], {}
    for index, gpu in enumerate(root.findall("gpu")):
        bus = pci_bus_id(gpu.get("id", "")) or pci_bus_id(_text(gpu, "pci/pci_bus_id") or "")
        if bus is None:
            raise ReadError(f"<gpu id={gpu.get('id')!r}> (GPU {index}) has no PCI address")
        row, remap = _gpu(index, bus, gpu)
        gpus.append(row)
        if remap is not None:
            remaps[bus] = remap
    return GpuQuery(tuple(gpus), remaps=remaps)


def detect(text: str) -> bool:
    """An ``<nvidia_smi_log>`` root (after an optional XML declaration and DOCTYPE)."""
    return any(_START.search(line) for line in first_lines(text, 5))


def read(text: str) -> list[CheckResult]:
    """The ``nvidia_smi`` verdict per GPU of a saved ``nvidia-smi -q -x`` document."""
    query = parse_xml(text)
    if not query.gpus:
        raise ReadError("the <nvidia_smi_log> document lists no <gpu>")
    return list(judge_query(query))
