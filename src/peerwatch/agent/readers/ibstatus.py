"""Saved ``ibstatus`` output: the sysfs port attributes, printed one block per port.

``ibstatus`` prints exactly what sysfs holds (``state: 4: ACTIVE``, ``rate: 200 Gb/sec (4X HDR)``),
so the live agent's rule applies unchanged. It names no HCA type: every port of the same link layer
on the host is a peer for the expected rate.
"""

from __future__ import annotations

import re

from peerwatch.agent.checks import CheckResult
from peerwatch.agent.infiniband import Port, judge_ports, parse_phys_state, parse_rate, parse_state
from peerwatch.agent.paste import clean_lines, first_lines, key_value
from peerwatch.agent.readers.errors import ReadError

FORMAT = "ibstatus"

_HEADER = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")


def detect(text: str) -> bool:
    """True when the first lines hold ``Infiniband device 'mlx5_0' port 1 status:``."""
    return any(_HEADER.match(line) for line in first_lines(text, 5))


def read(text: str) -> list[CheckResult]:
    """One ``infiniband_port`` result per port block."""
    blocks: list[tuple[str, str, dict[str, str]]] = []
    for number, line in clean_lines(text):
        stripped = line.strip()
        if match := _HEADER.match(stripped):
            blocks.append((match.group(1), match.group(2), {}))
        elif (pair := key_value(stripped)) is not None:
            if not blocks:
                raise ReadError(f"line {number}: field before any 'Infiniband device ... status:' line: {stripped!r}")
            blocks[-1][2][pair[0]] = pair[1]
    if not blocks:
        raise ReadError("no 'Infiniband device ... port N status:' block found")
    ports = [
        Port(
            device,
            port,
            "",
            fields.get("link_layer", "InfiniBand"),
            parse_state(fields.get("state")),
            parse_phys_state(fields.get("phys state")),
            parse_rate(fields.get("rate", "")),
            fields.get("rate", ""),
            {},
        )
        for device, port, fields in blocks
    ]
    return list(judge_ports(ports))
