"""Reading sysfs attribute files: missing or unreadable files are ``None``, never an exception.

Attributes vanish while a device is being removed and some read as ``N/A`` or ``Unknown``;
callers turn ``None`` into UNKNOWN, not into zero.
"""

from __future__ import annotations

import re
from pathlib import Path

_PCI_ADDR = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?$")


def read_text(path: Path) -> str | None:
    """The stripped contents of ``path``, or ``None`` when it does not exist or cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    """The integer in ``path`` (decimal or ``0x`` hex), or ``None`` when absent or not a number."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def pci_bus_id(address: str) -> str | None:
    """Canonical PCI address ``dddd:bb:dd.f`` (lower case) of the spellings tools use.

    ``00000000:3B:00.0`` (nvidia-smi), ``0000:3b:00`` (NVRM Xid lines, no function) and
    ``3b:00.0`` all become ``0000:3b:00.0``; anything else is ``None``.
    """
    match = _PCI_ADDR.match(address.strip())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function or '0'}"
