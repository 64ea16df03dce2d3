"""NVSwitch SXid lines in the kernel log, judged by their own Fatal / Non-fatal word.

The NVSwitch driver logs one error as a headline and detail lines under the same code::

    nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up
    nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Severity 1 Engine instance 62 Sub-engine instance 00
    nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, ...}

The headline is one event; detail lines add nothing unless the log kept no headline for that
switch and code (a grep, a cut paste), when the detail line stands for an event of unknown severity.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from peerwatch.agent.checks import CheckResult, Measurement, Status, worst
from peerwatch.agent.kernel_log import LogLine, is_stale
from peerwatch.agent.sysfs import pci_bus_id

_SXID = re.compile(r"SXid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\):\s*(?P<code>\d+)\s*,\s*(?P<rest>.*)$")
_HEADLINE = re.compile(r"^(?P<word>Fatal|Non-fatal|Nonfatal)\b\s*,?\s*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SXidEvent:
    """One NVSwitch error: the switch's PCI address, the SXid, whether the driver called it fatal, and when."""

    bus_id: str
    sxid: int
    fatal: bool | None  # None: only detail lines of it were in the log
    message: str
    ts: float | None


@dataclass(frozen=True, slots=True)
class SXidPolicy:
    status: Status
    hint: str


# The driver's own word decides: a fatal SXid has stopped NVLink traffic through the switch.
SXID_POLICY: Mapping[bool | None, SXidPolicy] = {
    True: SXidPolicy(Status.CRITICAL, "fatal NVSwitch error: drain the node, then reset GPUs and NVSwitches (reboot)"),
    False: SXidPolicy(
        Status.UNHEALTHY, "non-fatal NVSwitch error: watch; repeats on the same link point at cable or tray"
    ),
    None: SXidPolicy(
        Status.UNHEALTHY, "NVSwitch error, its Fatal/Non-fatal line not in the log: read the full kernel log"
    ),
}


def parse_sxids(lines: Iterable[LogLine]) -> list[SXidEvent]:
    """The SXid events among ``lines``, in log order (see the module docstring for detail lines)."""
    events: list[SXidEvent] = []
    headlined: set[tuple[str, int]] = set()
    for line in lines:
        if "SXid" not in line.text:
            continue
        match = _SXID.search(line.text)
        bus = pci_bus_id(match.group("pci")) if match else None
        if match is None or bus is None:
            continue
        code, rest = int(match.group("code")), match.group("rest").strip()
        head = _HEADLINE.match(rest)
        if head is not None:
            headlined.add((bus, code))
            fatal = head.group("word").lower() == "fatal"
            events.append(SXidEvent(bus, code, fatal, rest[head.end() :] or rest, line.ts))
        elif (bus, code) not in headlined:
            headlined.add((bus, code))
            events.append(SXidEvent(bus, code, None, rest, line.ts))
    return events


def component(bus: str) -> str:
    """The check component of an NVSwitch: ``nvswitch/<PCI address>``."""
    return f"nvswitch/{bus}"


def judge_sxids(check: str, bus: str, events: list[SXidEvent], now: float, max_age: float | None) -> CheckResult:
    """The verdict on one NVSwitch from its SXid events (those older than ``max_age`` only count)."""
    counts: dict[int, int] = {}
    for e in events:
        counts[e.sxid] = counts.get(e.sxid, 0) + 1
    fresh = [e for e in events if not is_stale(e.ts, now, max_age)]
    seen = ", ".join(f"{code}x{n}" if n > 1 else str(code) for code, n in sorted(counts.items()))
    aged = f"; {len(events) - len(fresh)} older than {max_age:g} s ignored" if len(fresh) < len(events) else ""
    measurements = [Measurement.of("peerwatch_agent_sxid_last", events[-1].sxid, pci_bus_id=bus)]
    measurements += [
        Measurement.of("peerwatch_agent_sxid_count", n, pci_bus_id=bus, sxid=str(code))
        for code, n in sorted(counts.items())
    ]
    if not fresh:
        return CheckResult(check, component(bus), Status.OK, f"SXid {seen}{aged}", tuple(measurements))
    status = worst(SXID_POLICY[e.fatal].status for e in fresh)
    # The latest of the worst events is quoted.
    event = next(e for e in reversed(fresh) if SXID_POLICY[e.fatal].status is status)
    word = {True: "Fatal", False: "Non-fatal", None: "severity unknown"}[event.fatal]
    hint = f"SXid {event.sxid} ({word}, {event.message[:80]}): {SXID_POLICY[event.fatal].hint} (seen: {seen}{aged})"
    return CheckResult(check, component(bus), status, hint, tuple(measurements))
