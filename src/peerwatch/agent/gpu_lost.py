"""A GPU lost from the PCI bus, reported by NVRM without an Xid line, read as Xid 79.

Drivers report a lost GPU in ways that carry no Xid::

    NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.
    NVRM: GPU at PCI:0000:82:00: GPU has fallen off the bus.
    NVRM: The NVIDIA GPU 0000:b3:00.0
    NVRM: (PCI ID: 10de:26b5) installed in this system has
    NVRM: fallen off the bus and is not responding to commands.

:mod:`peerwatch.agent.xid` counts each as an Xid 79 (NVIDIA's code for exactly this) unless the
log already has an Xid 79 line for that GPU around the same time, so one loss is never counted twice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from peerwatch.agent.kernel_log import LogLine
from peerwatch.agent.sysfs import pci_bus_id

FALLEN_OFF_BUS_XID = 79
SAME_LOSS_SECONDS = 60.0  # an Xid 79 line this close to the report is the same loss


@dataclass(frozen=True, slots=True)
class BusLoss:
    """A GPU the driver reported lost from the bus: its PCI address, the words logged and when."""

    bus_id: str
    message: str
    ts: float | None


_PCI = r"(?:PCI:)?(?P<pci>(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
_ONE_LINE = re.compile(rf"NVRM: GPU (?:at )?{_PCI}:?\s.*fallen off the bus", re.IGNORECASE)
_HEAD = re.compile(rf"NVRM: The NVIDIA GPU {_PCI}\b")
_CONTINUATION_LINES = 3  # the multi-line report spans the head line and two more


def parse_bus_losses(lines: Sequence[LogLine]) -> list[BusLoss]:
    """GPU losses reported without an Xid line, in log order."""
    events = []
    for i, line in enumerate(lines):
        if "NVRM" not in line.text:
            continue
        one = _ONE_LINE.search(line.text)
        if one is not None:
            bus = pci_bus_id(one.group("pci"))
            if bus is not None:
                events.append(BusLoss(bus, _message(line.text), line.ts))
            continue
        head = _HEAD.search(line.text)
        if head is None or (bus := pci_bus_id(head.group("pci"))) is None:
            continue
        following = lines[i + 1 : i + _CONTINUATION_LINES]
        if any("fallen off the bus" in later.text for later in following):
            events.append(BusLoss(bus, "GPU has fallen off the bus", line.ts))
    return events


def _message(text: str) -> str:
    return text[text.lower().index("gpu has fallen") :].strip() if "gpu has fallen" in text.lower() else text.strip()


def close_in_time(a: float | None, b: float | None) -> bool:
    """Whether two reports can be the same loss: within :data:`SAME_LOSS_SECONDS`, or either undated."""
    return a is None or b is None or abs(a - b) <= SAME_LOSS_SECONDS
