"""PCIe links running below what they can reach: fewer lanes or a lower speed.

Reads ``/sys/bus/pci/devices/*/{current,max}_link_{width,speed}`` for the devices that
matter (:data:`DEVICE_KINDS`). What a link "can reach" is the lower of the device's and its
upstream port's maximum, so a Gen5 card in a Gen4 slot is not a fault. Idle NVIDIA GPUs lower
their link speed to save power (GUIDE 7): a slow link on a GPU is a fault only while the GPU
is busy, and unknown when nobody can say whether it is busy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from peerwatch.agent.checks import CheckResult, Measurement, Status, unknown, worst
from peerwatch.agent.nvidia import NvidiaSmi
from peerwatch.agent.sysfs import pci_bus_id, read_int, read_text


@dataclass(frozen=True, slots=True)
class DeviceKind:
    """PCI devices worth checking: class code prefixes (class+subclass), vendor, power-saving behaviour."""

    name: str
    class_prefixes: tuple[str, ...]
    vendor: str | None = None  # None: any vendor
    idle_slows_link: bool = False


DEVICE_KINDS: tuple[DeviceKind, ...] = (
    DeviceKind("gpu", ("0x0302", "0x0300"), vendor="0x10de", idle_slows_link=True),
    DeviceKind("infiniband", ("0x0207",)),
    DeviceKind("ethernet", ("0x0200",)),
    DeviceKind("nvme", ("0x0108",)),
)

_SPEED = re.compile(r"([\d.]+)\s*GT/s")


def parse_speed(text: str | None) -> float | None:
    """GT/s of a sysfs link speed (``16.0 GT/s PCIe``, ``8 GT/s``); ``None`` for ``Unknown`` or absent."""
    match = _SPEED.search(text or "")
    return float(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Link:
    """One device's link as read from sysfs (``None``: unreadable)."""

    bus_id: str
    kind: DeviceKind
    width: int | None
    max_width: int | None
    speed: float | None
    max_speed: float | None


def kind_of(class_code: str, vendor: str, kinds: tuple[DeviceKind, ...] = DEVICE_KINDS) -> DeviceKind | None:
    """The first of ``kinds`` matching a class code (``0x030200``) and vendor id (``0x10de``), or ``None``."""
    cls, vendor = class_code.lower(), vendor.lower()
    for kind in kinds:
        if cls.startswith(kind.class_prefixes) and (kind.vendor is None or vendor == kind.vendor):
            return kind
    return None


def _kind_of(device: Path, kinds: tuple[DeviceKind, ...]) -> DeviceKind | None:
    return kind_of(read_text(device / "class") or "", read_text(device / "vendor") or "", kinds)


def lower(a: float | None, b: float | None) -> float | None:
    """The lower of two limits, either of which may be unknown (``None``)."""
    return b if a is None else a if b is None else min(a, b)


def read_link(device: Path, kind: DeviceKind) -> Link | None:
    """The link of the PCI device directory ``device``, or ``None`` if it exposes no link attributes."""
    max_width = read_int(device / "max_link_width")
    max_speed_text = read_text(device / "max_link_speed")
    if max_width is None and max_speed_text is None:
        return None
    max_speed = parse_speed(max_speed_text)
    # sysfs links devices under their upstream port: /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0
    upstream = Path(os.path.realpath(device)).parent
    if pci_bus_id(upstream.name) is not None:
        up_width = read_int(upstream / "max_link_width")
        max_width = int(w) if (w := lower(max_width, up_width)) is not None else None
        max_speed = lower(max_speed, parse_speed(read_text(upstream / "max_link_speed")))
    return Link(
        pci_bus_id(device.name) or device.name,
        kind,
        read_int(device / "current_link_width"),
        max_width,
        parse_speed(read_text(device / "current_link_speed")),
        max_speed,
    )


@dataclass(frozen=True)
class PcieLinkCheck:
    """Each GPU, NIC and NVMe link: UNHEALTHY below its width, or below its speed (GPUs: only while busy)."""

    sys_root: Path = Path("/sys")
    smi: NvidiaSmi | None = None
    kinds: tuple[DeviceKind, ...] = DEVICE_KINDS
    busy_utilization: float = 10.0  # GPU utilization (%) from which a GPU counts as busy
    name: str = "pcie_link"

    def run(self) -> Iterator[CheckResult]:
        devices = self.sys_root / "bus" / "pci" / "devices"
        links = []
        for device in sorted(devices.iterdir()) if devices.is_dir() else []:
            kind = _kind_of(device, self.kinds)
            link = read_link(device, kind) if kind is not None else None
            if link is not None:
                links.append(link)
        if not links:
            yield unknown(self.name, f"no GPU, NIC or NVMe device with PCIe link attributes under {devices}")
            return
        for link in links:
            yield self._judge(link)

    def _gpu_busy(self, bus_id: str) -> tuple[bool | None, str]:
        if self.smi is None:
            return None, "no nvidia-smi configured"
        query = self.smi.query()
        if query.error is not None:
            return None, query.error
        gpu = query.by_bus_id().get(bus_id)
        if gpu is None or gpu.utilization is None:
            return None, "nvidia-smi reports no utilization for it"
        return gpu.utilization >= self.busy_utilization, f"utilization {gpu.utilization:g}%"

    def _judge(self, link: Link) -> CheckResult:
        slow = link.speed is not None and link.max_speed is not None and link.speed < link.max_speed
        # nvidia-smi is asked only about a slow GPU link: the only case its answer decides
        busy = self._gpu_busy(link.bus_id) if slow and link.kind.idle_slows_link else (None, "")
        status, hint = judge_link(link, busy)
        return CheckResult(self.name, link.bus_id, status, hint, tuple(link_measurements(link)))


def judge_link(link: Link, busy: tuple[bool | None, str]) -> tuple[Status, str]:
    """Verdict and hint for one link: fewer lanes than it can reach → UNHEALTHY; a lower speed → UNHEALTHY,
    except on a kind whose idle devices slow their link, where ``busy`` (busy?, why) decides: busy → UNHEALTHY,
    idle → OK, not known → UNKNOWN.
    """
    findings: list[tuple[Status, str]] = []
    if link.width is None or link.max_width is None:
        findings.append((Status.UNKNOWN, "link width unreadable"))
    elif link.width < link.max_width:
        findings.append((Status.UNHEALTHY, f"limited width: x{link.width} < x{link.max_width}; reseat or swap"))
    if link.speed is None or link.max_speed is None:
        findings.append((Status.UNKNOWN, "link speed unreadable"))
    elif link.speed < link.max_speed:
        slow = f"{link.speed:g} < {link.max_speed:g} GT/s"
        is_busy, why = busy
        if not link.kind.idle_slows_link:
            findings.append((Status.UNHEALTHY, f"limited speed: {slow}; reseat or swap"))
        elif is_busy:
            findings.append((Status.UNHEALTHY, f"limited speed: {slow} on a busy GPU ({why}); reseat or swap"))
        elif is_busy is None:
            findings.append((Status.UNKNOWN, f"speed {slow}: idle GPUs slow their link, busy state unknown ({why})"))
        else:
            findings.append((Status.OK, f"speed {slow} on an idle GPU ({why}): power saving"))
    status = worst(s for s, _ in findings)
    return status, "; ".join(text for _, text in findings) or "link at full width and speed"


def link_measurements(link: Link) -> Iterator[Measurement]:
    """The exported widths and speeds of one link."""
    ids = {"pci_bus_id": link.bus_id, "kind": link.kind.name}
    for family, value in (
        ("peerwatch_agent_pcie_current_link_width", link.width),
        ("peerwatch_agent_pcie_max_link_width", link.max_width),
        ("peerwatch_agent_pcie_current_link_speed_gts", link.speed),
        ("peerwatch_agent_pcie_max_link_speed_gts", link.max_speed),
    ):
        if value is not None:
            yield Measurement.of(family, value, **ids)
