"""``nvidia-smi -q`` text: one block per GPU (``GPU 00000000:3B:00.0``), indented ``Key : value`` lines.

Sections are read by name, whatever their depth, so ``-q -d ECC,PAGE_RETIREMENT,...`` subsets
and older or newer drivers read alike: "Clocks Throttle Reasons" (before driver 535) or "Clocks
Event Reasons", "Remapped Rows", "Retired Pages", volatile "ECC Errors" (``Double Bit … Total``
or the ``… Uncorrectable`` rows), "GPU Recovery Action" and the older "GPU Reset Status".
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from peerwatch.agent.checks import CheckResult, unknown
from peerwatch.agent.gpu_facts import (
    CHECK,
    CLOCK_REASON_LABELS,
    GpuQuery,
    GpuRow,
    RemapRow,
    first_text,
    flag,
    judge_query,
    number,
    reasons_mask,
)
from peerwatch.agent.paste import first_lines, paste_lines
from peerwatch.agent.readers.errors import ReadError
from peerwatch.agent.sysfs import pci_bus_id

FORMAT = "nvidia-smi-q"

_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[^:]*?[^:\s])\s*(?::\s*(?P<value>.*?))?\s*$")
_LOST = re.compile(r"device handle for GPU\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-7])\s*:\s*(.*)")
_HEAD = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(\d+)\s*$")
Path = tuple[str, ...]


def _blocks(text: str) -> Iterator[tuple[str, int, list[str]]]:
    """(PCI address, line number, lines) of each GPU block."""
    current: tuple[str, int, list[str]] | None = None
    for number_, line in enumerate(paste_lines(text), 1):
        match = _GPU.match(line)
        if match is not None:
            if current is not None:
                yield current
            current = (match.group(1), number_, [])
        elif current is not None:
            if line.strip() and not line.startswith((" ", "\t")):
                yield current  # text after the block (another command's output)
                current = None
            else:
                current[2].append(line)
    if current is not None:
        yield current


def _fields(lines: list[str]) -> dict[Path, str]:
    """``(section, ..., key) -> value`` of one GPU block; keys lower case."""
    out: dict[Path, str] = {}
    stack: list[tuple[int, str]] = []
    for line in lines:
        match = _LINE.match(line.expandtabs(4))
        if match is None or not match.group("key").strip():
            continue
        indent, key, value = len(match.group("indent")), match.group("key").strip().lower(), match.group("value")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(name for _, name in stack), key)
        if value is None:
            stack.append((indent, key))
        else:
            out[path] = value
    return out


def _under(fields: Mapping[Path, str], section: str) -> dict[str, str]:
    """Last key -> value of every field inside ``section`` (any depth)."""
    return {path[-1]: v for path, v in fields.items() if section in path[:-1]}


def _get(fields: Mapping[Path, str], *path: str) -> str | None:
    return fields.get(path)


def _ecc_uncorrected(fields: Mapping[Path, str]) -> float | None:
    total = _get(fields, "ecc errors", "volatile", "double bit", "total")
    if total is not None:
        return number(total)
    counts = [number(v) for p, v in fields.items() if p[:2] == ("ecc errors", "volatile") and "uncorrectable" in p[-1]]
    present = [c for c in counts if c is not None]
    return sum(present) if present else None


def _recovery(fields: Mapping[Path, str]) -> str | None:
    action = _get(fields, "gpu recovery action")
    if action is not None:
        return action
    # Before the recovery action (drivers < 550) the reset status said the same.
    if flag(_get(fields, "gpu reset status", "drain and reset recommended")):
        return "Drain and Reset"
    if flag(_get(fields, "gpu reset status", "reset required")):
        return "Reset"
    return None


def _gpu(index: int, bus: str, fields: Mapping[Path, str]) -> tuple[GpuRow, RemapRow | None]:
    reasons = {**_under(fields, "clocks throttle reasons"), **_under(fields, "clocks event reasons")}
    active = {CLOCK_REASON_LABELS[k]: flag(v) for k, v in reasons.items() if k in CLOCK_REASON_LABELS}
    retired = first_text(
        _get(fields, "retired pages", key) for key in ("pending page blacklist", "pending page retirement", "pending")
    )
    gpu = GpuRow(
        index,
        bus,
        _get(fields, "gpu uuid") or "",
        _get(fields, "product name") or "",
        number(_get(fields, "utilization", "gpu")),
        _ecc_uncorrected(fields),
        flag(retired),
        reasons_mask(active),
        _recovery(fields),
    )
    remap = _under(fields, "remapped rows")
    row = None
    if remap:
        row = RemapRow(
            number(remap.get("correctable error")),
            number(remap.get("uncorrectable error")),
            flag(remap.get("pending")),
            flag(remap.get("remapping failure occurred")),
        )
    return gpu, row


def parse_query_text(text: str) -> GpuQuery:
    """The GPUs of ``nvidia-smi -q`` output, in the order printed (that order is the index)."""
    lost = {}
    for line in text.splitlines():
        match = _LOST.search(line)
        if match and (bus := pci_bus_id(match.group(1))):
            lost[bus] = line.strip()
    gpus, remaps = [], {}
    for index, (address, line_no, lines) in enumerate(_blocks(text)):
        bus = pci_bus_id(address)
        if bus is None:
            raise ReadError(f"line {line_no}: GPU {address!r} is not a PCI address")
        fields = _fields(lines)
        if any("GPU is lost" in v for v in fields.values()):
            lost[bus] = f"nvidia-smi -q: GPU {bus} is lost (line {line_no})"
        gpu, remap = _gpu(index, bus, fields)
        gpus.append(gpu)
        if remap is not None:
            remaps[bus] = remap
    return GpuQuery(tuple(gpus), lost, remaps=remaps)


def detect(text: str) -> bool:
    """The ``NVSMI LOG`` banner or a ``GPU 00000000:3B:00.0`` block head among the first lines."""
    return any(_HEAD.match(line.strip()) or _GPU.match(line) for line in first_lines(text))


def read(text: str) -> list[CheckResult]:
    """The ``nvidia_smi`` verdict per GPU of saved ``nvidia-smi -q`` text."""
    query = parse_query_text(text)
    if not query.gpus and not query.lost:
        raise ReadError("no 'GPU 0000:xx:00.0' block found: not nvidia-smi -q output, or cut before the first GPU")
    results = list(judge_query(query))
    attached = next((int(m.group(1)) for line in paste_lines(text) if (m := _ATTACHED.match(line.strip()))), None)
    if attached is not None and attached > len(query.gpus):
        # A cut paste (or `-i`) must not read as "every GPU is fine".
        results.append(
            unknown(CHECK, f"the output lists {attached} attached GPUs but shows {len(query.gpus)}: the rest unread")
        )
    return results
