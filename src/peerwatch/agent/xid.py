"""Kernel-log Xids: parse NVRM Xid lines, judge them by NVIDIA's catalogue, report per GPU.

Handles the driver's spellings, e.g.::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)
    NVRM: Xid 154, GPU recovery action changed to 0x2 (Node Reboot Required)
    NVRM: Xid (0000:01:00): 16, Head 00000000 Count 00000000        (drivers before 2013)

behind any timestamp prefix :mod:`peerwatch.agent.kernel_log` knows. The same check reads
NVSwitch SXid lines (:mod:`peerwatch.agent.sxid`, one result per switch) and GPUs lost from the
bus without an Xid line (:mod:`peerwatch.agent.gpu_lost`, counted as Xid 79).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from peerwatch.agent.checks import SEVERITY, CheckResult, Measurement, Status, unknown, worst
from peerwatch.agent.gpu_lost import FALLEN_OFF_BUS_XID, BusLoss, close_in_time, parse_bus_losses
from peerwatch.agent.kernel_log import KernelLogSource, KernelLogUnavailable, LogLine, is_stale
from peerwatch.agent.nvidia import NvidiaSmi
from peerwatch.agent.sxid import SXidEvent, judge_sxids, parse_sxids
from peerwatch.agent.sysfs import pci_bus_id
from peerwatch.agent.xid_policy import XidPolicy, classify
from peerwatch.xid_catalog import XidEntry, load_catalog

UNKNOWN_GPU = "unknown"  # component of Xid lines that name no PCI address

_XID = re.compile(r"NVRM: Xid (?:\((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\))?:?\s*(?P<xid>\d+)\s*,\s*(?P<msg>.*)$")
_PID_NAME = re.compile(r"^(?:pid=[^,]*,\s*)?(?:name=[^,]*,\s*)?")


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One Xid line: the GPU's canonical PCI address, the code, the driver's message and its time."""

    bus_id: str
    xid: int
    message: str
    ts: float | None
    inferred: bool = False  # True: no Xid line, the code was read from another report (a GPU lost)


def parse_xids(lines: Iterable[LogLine]) -> list[XidEvent]:
    """The Xid events among ``lines`` (other lines are ignored), in log order."""
    events = []
    for line in lines:
        if "NVRM: Xid" not in line.text:
            continue
        match = _XID.search(line.text)
        if match is None:
            continue
        pci = match.group("pci")
        bus = (pci_bus_id(pci) if pci else None) or UNKNOWN_GPU
        message = _PID_NAME.sub("", match.group("msg").strip(), count=1)
        events.append(XidEvent(bus, int(match.group("xid")), message, line.ts))
    return events


def merge_bus_losses(xids: Iterable[XidEvent], losses: Iterable[BusLoss]) -> list[XidEvent]:
    """``xids`` plus, as Xid 79 events, the ``losses`` no Xid 79 line of the same GPU already reports."""
    out = list(xids)
    logged = [e for e in out if e.xid == FALLEN_OFF_BUS_XID]
    for loss in losses:
        if not any(e.bus_id == loss.bus_id and close_in_time(e.ts, loss.ts) for e in logged):
            out.append(XidEvent(loss.bus_id, FALLEN_OFF_BUS_XID, loss.message, loss.ts, inferred=True))
    return out


@dataclass(frozen=True)
class XidCheck:
    """Worst Xid per GPU in the kernel log; every GPU nvidia-smi lists gets a result, Xid or not.

    With no Xid and no GPU listed, the result is ``node``: OK if the nvidia driver is loaded,
    UNKNOWN otherwise (a host without the driver cannot log Xids, so its silence proves nothing).

    Events older than ``max_age`` seconds (when their time is known) still count in the
    metrics but no longer set the status: a GPU reset or swap has usually dealt with them.
    """

    source: KernelLogSource
    smi: NvidiaSmi | None = None
    catalog: Mapping[int, XidEntry] = field(default_factory=load_catalog)
    max_age: float | None = None
    sys_root: Path = Path("/sys")  # only to see whether the nvidia module is loaded
    driver_in_log: bool = False  # True: NVRM/nvidia lines in the log show the driver was loaded (saved logs)
    clock: Callable[[], float] = time.time
    name: str = "xid"

    def run(self) -> Iterator[CheckResult]:
        try:
            log = self.source.read()
        except KernelLogUnavailable as exc:
            yield unknown(self.name, f"kernel log unreadable: {exc}")
            return
        by_gpu: dict[str, list[XidEvent]] = defaultdict(list)
        for event in merge_bus_losses(parse_xids(log.lines), parse_bus_losses(log.lines)):
            by_gpu[event.bus_id].append(event)
        index = self._gpu_index()
        for bus in sorted(set(by_gpu) | set(index)):
            yield self._judge(bus, index.get(bus, ""), by_gpu.get(bus, []), log.where)
        by_switch: dict[str, list[SXidEvent]] = defaultdict(list)
        for sxid in parse_sxids(log.lines):
            by_switch[sxid.bus_id].append(sxid)
        for bus, sxids in sorted(by_switch.items()):
            yield judge_sxids(self.name, bus, sxids, self.clock(), self.max_age)
        if not by_gpu and not index and not by_switch:
            read = f"no Xid in {log.where} ({len(log.lines)} lines)"
            if (self.sys_root / "module" / "nvidia").is_dir() or (
                self.driver_in_log and any("NVRM" in ln.text or "nvidia" in ln.text for ln in log.lines)
            ):
                yield CheckResult(self.name, "node", Status.OK, read)
            else:  # without the driver no Xid can be logged: silence proves nothing
                why = "the log has no nvidia driver line" if self.driver_in_log else "the nvidia driver is not loaded"
                yield unknown(self.name, f"{read}, but {why}")

    def _gpu_index(self) -> dict[str, str]:
        if self.smi is None:
            return {}
        return {g.bus_id: str(g.index) for g in self.smi.query().gpus}

    def _judge(self, bus: str, gpu: str, events: list[XidEvent], where: str) -> CheckResult:
        if not events:
            return CheckResult(self.name, bus, Status.OK, f"no Xid in {where}")
        now = self.clock()
        counts: dict[int, int] = defaultdict(int)
        last_ts: dict[int, float] = {}
        verdicts: list[tuple[XidPolicy, XidEvent]] = []
        stale = 0
        for e in events:
            counts[e.xid] += 1
            if e.ts is not None:
                last_ts[e.xid] = max(e.ts, last_ts.get(e.xid, e.ts))
            if is_stale(e.ts, now, self.max_age):
                stale += 1
                continue
            verdicts.append((classify(e.xid, e.message, self.catalog), e))
        status = worst(v.status for v, _ in verdicts)
        hint = self._hint(verdicts, counts, stale)
        ids = {"pci_bus_id": bus, "gpu": gpu}
        measurements = [Measurement.of("peerwatch_agent_xid_last", events[-1].xid, **ids)]
        for xid, n in sorted(counts.items()):
            measurements.append(Measurement.of("peerwatch_agent_xid_count", n, **ids, xid=str(xid)))
            if xid in last_ts:
                measurements.append(
                    Measurement.of("peerwatch_agent_xid_last_seen_timestamp_seconds", last_ts[xid], **ids, xid=str(xid))
                )
        return CheckResult(self.name, bus, status, hint, tuple(measurements))

    def _hint(self, verdicts: list[tuple[XidPolicy, XidEvent]], counts: Mapping[int, int], stale: int) -> str:
        seen = ", ".join(f"{xid}x{n}" if n > 1 else str(xid) for xid, n in sorted(counts.items()))
        aged = f"; {stale} older than {self.max_age:g} s ignored" if stale else ""
        if not verdicts:
            return f"Xid {seen}{aged}"
        # The worst verdict names the action; the latest of equally bad ones is quoted.
        policy, event = max(reversed(verdicts), key=lambda pe: SEVERITY[pe[0].status])
        entry = self.catalog.get(event.xid)
        what = entry.mnemonic if entry and entry.mnemonic else "unknown Xid"
        if event.inferred:  # say what the log said: it had no Xid line
            what = f"({event.message}, NVRM report without an Xid line)"
        return f"Xid {event.xid} {what}: {policy.hint} (seen: {seen}{aged})"
