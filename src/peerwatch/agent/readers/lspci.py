"""Saved ``lspci -vv`` output: each GPU, NIC, NVMe drive and PCIe bridge's link, and AER error status.

A link is judged by the live agent's rule (:func:`peerwatch.agent.pcie.judge_link`): LnkSta below
what the link can reach, which is the lower of the LnkCap of its two ends (an endpoint's partner is
the bridge whose ``Bus: secondary=`` is its bus; a root or downstream port's is the device on its
secondary bus), so a Gen5 card in a Gen4 slot is no fault. lspci cannot
tell whether a GPU is busy, so a GPU (or a bridge above one) at a lower speed is UNKNOWN, never a
downgrade: idle GPUs slow their link. SR-IOV virtual functions have no link of their own and are
skipped. AER: an uncorrectable error status bit other than ``UnsupReq`` (set by harmless config
probing on most hosts) is UNHEALTHY.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from peerwatch.agent.checks import CheckResult, Status
from peerwatch.agent.paste import clean_lines, first_lines
from peerwatch.agent.pcie import DEVICE_KINDS, DeviceKind, Link, judge_link, kind_of, link_measurements, lower
from peerwatch.agent.readers.errors import ReadError
from peerwatch.agent.sysfs import pci_bus_id

FORMAT = "lspci-vv"

BRIDGE = DeviceKind("bridge", ("0x0604",))
BRIDGE_TO_GPU = DeviceKind("bridge", ("0x0604",), idle_slows_link=True)
"""A root or downstream port whose link goes to a GPU slows with the idle GPU."""

KINDS: tuple[DeviceKind, ...] = (*DEVICE_KINDS, BRIDGE)
"""The live agent's device kinds plus PCIe bridges (root, switch up- and downstream ports)."""

_FACING_DOWN = ("Root Port", "Downstream Port")
"""Express port types whose link goes to the device below (on their secondary bus), not to the one above."""

CLASS_CODES: Mapping[str, str] = {
    "3d controller": "0x0302",
    "vga compatible controller": "0x0300",
    "ethernet controller": "0x0200",
    "infiniband controller": "0x0207",
    "non-volatile memory controller": "0x0108",
    "pci bridge": "0x0604",
}
"""lspci's class names (without ``-nn``) → class code."""

VENDOR_IDS: Mapping[str, str] = {"nvidia corporation": "0x10de", "mellanox technologies": "0x15b3"}
"""lspci's vendor names (without ``-nn``) → vendor id, where a kind needs one."""

BENIGN_UNCORRECTABLE = frozenset({"UnsupReq"})
"""AER uncorrectable status bits that healthy hosts show (config-space probing)."""

_HEADER = re.compile(
    r"^((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+([^:\[]+?)(?:\s*\[([0-9a-fA-F]{4})\])?:\s+(.*)$"
)
_VENDOR_ID = re.compile(r"\[([0-9a-fA-F]{4}):[0-9a-fA-F]{4}\]")
_SPEED = re.compile(r"Speed\s+([\d.]+)GT/s")
_WIDTH = re.compile(r"Width\s+x(\d+)")
_SECONDARY = re.compile(r"secondary=([0-9a-fA-F]{2})")
_FLAG_SET = re.compile(r"(\w+)\+")


@dataclass
class _Device:
    address: str
    class_name: str
    class_code: str
    description: str
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def bus_id(self) -> str:
        return pci_bus_id(self.address) or self.address

    @property
    def domain_bus(self) -> str:
        return self.bus_id.rsplit(":", 1)[0]


def detect(text: str) -> bool:
    """True when one of the first lines is a device header (``3b:00.0 3D controller: ...``) followed by its fields."""
    lines = first_lines(text, 8)
    first = next((i for i, line in enumerate(lines[:5]) if _HEADER.match(line)), None)
    fields = ("Subsystem:", "Control:", "Flags:", "Capabilities:")
    return first is not None and any(line.startswith(fields) for line in lines[first + 1 : first + 4])


def read(text: str) -> list[CheckResult]:
    """``pcie_link`` per GPU/NIC/NVMe/bridge with a PCIe link, ``pcie_aer`` where an AER status is shown."""
    devices = _devices(text)
    if not devices:
        raise ReadError("no lspci device header ('3b:00.0 3D controller: ...') found")
    above = {
        f"{d.domain_bus.split(':')[0]}:{m.group(1).lower()}": d
        for d in devices
        if (m := _SECONDARY.search(d.fields.get("Bus", "")))
    }
    first_on_bus: dict[str, _Device] = {}
    for d in devices:
        first_on_bus.setdefault(d.domain_bus, d)
    kinds = {d.bus_id: _kind(d) for d in devices}
    results: list[CheckResult] = []
    for device in devices:
        kind = kinds[device.bus_id]
        if kind is None:
            continue
        partner = above.get(device.domain_bus)
        if any(t in device.fields.get("Express", "") for t in _FACING_DOWN):
            m = _SECONDARY.search(device.fields.get("Bus", ""))
            partner = first_on_bus.get(f"{device.domain_bus.split(':')[0]}:{m.group(1).lower()}") if m else None
            if partner is not None and (below := kinds[partner.bus_id]) is not None and below.idle_slows_link:
                kind = BRIDGE_TO_GPU
        results.extend(_judge(device, kind, partner))
    return results


def _kind(device: _Device) -> DeviceKind | None:
    vendor = m.group(1) if (m := _VENDOR_ID.search(device.description)) else ""
    vendor = (
        f"0x{vendor}"
        if vendor
        else next((v for name, v in VENDOR_IDS.items() if device.description.lower().startswith(name)), "")
    )
    return kind_of(device.class_code, vendor, KINDS)


def _devices(text: str) -> list[_Device]:
    devices: list[_Device] = []
    for _, line in clean_lines(text):
        if match := _HEADER.match(line.strip()) if line[:1] not in (" ", "\t") else None:
            address, class_name, code, description = match.groups()
            class_code = f"0x{code.lower()}" if code else CLASS_CODES.get(class_name.strip().lower(), "")
            devices.append(_Device(address, class_name.strip(), class_code, description))
        elif devices and ":" in line:
            key, _, value = line.strip().partition(":")
            if key == "Capabilities" and " Express " in f" {value} ":
                key = "Express"
            devices[-1].fields.setdefault(key.strip(), value.strip())
    return devices


def _link(device: _Device, kind: DeviceKind, partner: _Device | None) -> Link:
    cap, sta = device.fields.get("LnkCap", ""), device.fields.get("LnkSta", "")
    max_speed, max_width = _number(_SPEED, cap), _number(_WIDTH, cap)
    if partner is not None:  # the other end of the link caps what it can reach
        up_cap = partner.fields.get("LnkCap", "")
        max_speed = lower(max_speed, _number(_SPEED, up_cap))
        max_width = lower(max_width, _number(_WIDTH, up_cap))
    return Link(
        device.bus_id,
        kind,
        int(w) if (w := _number(_WIDTH, sta)) is not None else None,
        int(max_width) if max_width is not None else None,
        _number(_SPEED, sta),
        max_speed,
    )


def _judge(device: _Device, kind: DeviceKind, partner: _Device | None) -> Iterator[CheckResult]:
    if "LnkSta" in device.fields and "Virtual Function" not in device.description:
        link = _link(device, kind, partner)
        if kind.name == "bridge" and link.width == 0:
            status, hint = Status.OK, "no device trained a link on this port (empty slot)"
        else:
            status, hint = judge_link(link, (None, "lspci does not show whether the GPU is busy"))
        yield CheckResult(
            "pcie_link", device.bus_id, status, f"{device.class_name}: {hint}", tuple(link_measurements(link))
        )
    elif "Virtual Function" not in device.description:
        if device.fields.get("Capabilities") == "<access denied>":
            why = "capabilities <access denied>: save lspci -vv run as root"
        elif "Express" in device.fields:
            why = "PCI Express device without a LnkSta line (output cut short?)"
        else:
            return  # conventional PCI: no link to judge
        yield CheckResult("pcie_link", device.bus_id, Status.UNKNOWN, f"{device.class_name}: {why}")
    if "UESta" in device.fields:
        set_bits = _FLAG_SET.findall(device.fields["UESta"])
        serious = [b for b in set_bits if b not in BENIGN_UNCORRECTABLE]
        corrected = _FLAG_SET.findall(device.fields.get("CESta", ""))
        note = f" (correctable status: {' '.join(corrected)})" if corrected else ""
        if serious:
            hint = f"AER uncorrectable error status: {' '.join(serious)}{note}; check the kernel log for AER reports"
            yield CheckResult("pcie_aer", device.bus_id, Status.UNHEALTHY, hint)
        else:
            yield CheckResult("pcie_aer", device.bus_id, Status.OK, f"no uncorrectable error status{note}")


def _number(pattern: re.Pattern[str], text: str) -> float | None:
    match = pattern.search(text)
    return float(match.group(1)) if match else None
