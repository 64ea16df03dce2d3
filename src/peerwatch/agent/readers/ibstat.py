"""Saved ``ibstat`` output: each port's state, physical state, rate and link layer.

Judged by the live agent's rule (:func:`peerwatch.agent.infiniband.judge_ports`): a port not
Active/LinkUp is CRITICAL, an active port slower than the fastest active port of the same CA type
and link layer is UNHEALTHY. ``ibpanic`` lines (a device ibstat could not read) are UNKNOWN.
"""

from __future__ import annotations

import re

from peerwatch.agent.checks import CheckResult, unknown
from peerwatch.agent.infiniband import Port, judge_ports, parse_phys_state, parse_state
from peerwatch.agent.paste import clean_lines, first_lines, key_value
from peerwatch.agent.readers.errors import ReadError

FORMAT = "ibstat"

_CA = re.compile(r"^CA:? '([^']+)'\s*$")  # `ibstat CA PORT` prints "CA: 'mlx4_0'"
_PORT = re.compile(r"^Port (\d+):\s*$")
_PANIC = re.compile(r"ibpanic: .*?IB device '([^']+)' failed: (.*)$")


def detect(text: str) -> bool:
    """True when the first lines hold ibstat's ``CA 'mlx5_0'`` header."""
    return any(_CA.match(line) for line in first_lines(text, 5))


def read(text: str) -> list[CheckResult]:
    """One ``infiniband_port`` result per port, plus UNKNOWN for devices ibstat failed to read."""
    ports: list[Port] = []
    panics: list[CheckResult] = []
    device = hca = ""
    fields: dict[str, str] | None = None
    port = ""

    def close() -> None:
        if fields is not None:
            ports.append(_port(device, port, hca, fields))

    for number, line in clean_lines(text):
        stripped = line.strip()
        if match := _CA.match(stripped):
            close()
            device, hca, fields = match.group(1), "", None
        elif (match := _PANIC.search(stripped)) and match.group(1) not in {r.component for r in panics}:
            panics.append(unknown("infiniband_port", f"ibstat could not read it: {match.group(2)}", match.group(1)))
        elif match := _PORT.match(stripped):
            if not device:
                raise ReadError(f"line {number}: port block before any CA line: {stripped!r}")
            close()
            port, fields = match.group(1), {}
        elif (pair := key_value(stripped)) is not None:
            if fields is not None:
                fields[pair[0]] = pair[1]
            elif pair[0] == "CA type":
                hca = pair[1]
    close()
    if not ports and not panics:
        raise ReadError("no CA with a port block ('CA ...' then 'Port 1:') found")
    return [*judge_ports(ports), *panics]


def _port(device: str, port: str, hca: str, fields: dict[str, str]) -> Port:
    rate = fields.get("Rate", "")
    try:
        gbps: float | None = float(rate)
    except ValueError:
        gbps = None
    return Port(
        device,
        port,
        hca,
        fields.get("Link layer", "InfiniBand"),
        parse_state(fields.get("State")),
        parse_phys_state(fields.get("Physical state")),
        gbps,
        f"{rate} Gb/sec" if gbps is not None else rate,
        {},
    )
