"""Saved ``ibv_devinfo`` output (plain or ``-v``): each port's state, link layer and, with ``-v``, its rate.

Plain ``ibv_devinfo`` prints only the logical state (``PORT_ACTIVE (4)``); ``-v`` adds the physical
state and ``active_width`` × ``active_speed`` (``4X (2)`` × ``25.0 Gbps (32)`` = 100 Gb/s). The live
agent's rule judges them; peers for the expected rate share ``vendor_part_id`` and link layer.
"""

from __future__ import annotations

import re

from peerwatch.agent.checks import CheckResult
from peerwatch.agent.infiniband import Port, judge_ports, parse_phys_state, parse_state
from peerwatch.agent.paste import clean_lines, first_lines, key_value
from peerwatch.agent.readers.errors import ReadError

FORMAT = "ibv_devinfo"

_LANES = re.compile(r"^(\d+)X\b")
_GBPS = re.compile(r"^([\d.]+)\s*Gbps")


def detect(text: str) -> bool:
    """True when the first lines hold ``hca_id:`` and ``transport:``."""
    lines = first_lines(text, 6)
    return any(line.startswith("hca_id:") for line in lines) and any(line.startswith("transport:") for line in lines)


def read(text: str) -> list[CheckResult]:
    """One ``infiniband_port`` result per port; rates only where ``-v`` printed them."""
    devices: list[tuple[str, dict[str, str], list[tuple[str, dict[str, str]]]]] = []
    for number, line in clean_lines(text):
        pair = key_value(line)
        if pair is None:
            continue
        key, value = pair
        if key == "hca_id":
            devices.append((value, {}, []))
        elif not devices:
            raise ReadError(f"line {number}: field before any 'hca_id:' line: {line.strip()!r}")
        elif key == "port" and value.isdigit():
            devices[-1][2].append((value, {}))
        elif devices[-1][2]:
            devices[-1][2][-1][1].setdefault(key, value)
        else:
            devices[-1][1].setdefault(key, value)
    ports = [_port(name, info, port, fields) for name, info, port_list in devices for port, fields in port_list]
    if not ports:
        raise ReadError("no 'hca_id:' device with a 'port:' block found")
    shown = [p for p in ports if p.rate_gbps is not None]
    unshown = [p for p in ports if p.rate_gbps is None]
    return (
        [*judge_ports(shown), *judge_ports(unshown, rate_shown=False)]
        if shown
        else list(judge_ports(ports, rate_shown=False))
    )


def _port(device: str, info: dict[str, str], port: str, fields: dict[str, str]) -> Port:
    lanes = _LANES.match(fields.get("active_width", ""))
    speed = _GBPS.match(fields.get("active_speed", ""))
    rate = int(lanes.group(1)) * float(speed.group(1)) if lanes and speed else None
    text = f"{rate:g} Gb/sec ({fields['active_width']} x {fields['active_speed']})" if rate is not None else ""
    return Port(
        device,
        port,
        info.get("vendor_part_id", ""),
        fields.get("link_layer", "InfiniBand"),
        parse_state(fields.get("state")),
        parse_phys_state(fields.get("phys_state")),
        rate,
        text,
        {},
    )
