"""InfiniBand / RoCE ports: state, rate and error counters from ``/sys/class/infiniband``.

Port not ACTIVE / LinkUp → CRITICAL. An active port slower than expected → UNHEALTHY, where
"expected" is the configured rate or else the fastest active port of the same HCA type and
link layer on this host (the rails of a node are peers). Error counters are exported as they
are (old counts are not new errors: finding increases across nodes is the engine's job); the
check also remembers the last run's values and flags increases of at least the thresholds in
:data:`ERROR_COUNTERS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from peerwatch.agent.checks import CheckResult, Measurement, Status, format_counts, unknown
from peerwatch.agent.sysfs import read_int, read_text

ERROR_COUNTERS: Mapping[str, int | None] = {
    "link_downed": 1,
    "link_error_recovery": 2,  # one isolated recovery is common and harmless
    "local_link_integrity_errors": 1,
    "excessive_buffer_overrun_errors": 1,
    "symbol_error": 10,
    "port_rcv_errors": 10,
    "port_rcv_remote_physical_errors": 10,
    "port_xmit_discards": None,  # congestion elsewhere in the fabric, not this port's fault
    "port_rcv_switch_relay_errors": None,
    "port_rcv_constraint_errors": None,
    "port_xmit_constraint_errors": None,
    "VL15_dropped": None,
}
"""Counter → increase between two runs that makes the port UNHEALTHY (``None``: export only)."""

_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
_RATE = re.compile(r"([\d.]+)\s*Gb/sec")


@dataclass(frozen=True, slots=True)
class Port:
    """One port as sysfs shows it (codes and names ``None`` when unreadable)."""

    device: str
    port: str
    hca_type: str
    link_layer: str
    state: tuple[int, str] | None
    phys_state: tuple[int, str] | None
    rate_gbps: float | None
    rate_text: str
    counters: Mapping[str, int]

    @property
    def component(self) -> str:
        return f"{self.device}:{self.port}"

    @property
    def up(self) -> bool:
        return (
            self.state is not None
            and self.state[1] == "ACTIVE"
            and self.phys_state is not None
            and self.phys_state[1] == "LinkUp"
        )


def _state(text: str | None) -> tuple[int, str] | None:
    match = _STATE.match(text or "")
    return (int(match.group(1)), match.group(2)) if match else None


def read_ports(sys_root: Path) -> list[Port]:
    """Every port of every device under ``sys_root/class/infiniband``."""
    base = sys_root / "class" / "infiniband"
    ports = []
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        hca = read_text(dev / "hca_type") or ""
        for port_dir in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            counters = {}
            for name in ERROR_COUNTERS:
                value = read_int(port_dir / "counters" / name)  # "N/A (no PMA)" reads as None
                if value is not None:
                    counters[name] = value
            rate_text = read_text(port_dir / "rate") or ""
            rate = _RATE.search(rate_text)
            ports.append(
                Port(
                    dev.name,
                    port_dir.name,
                    hca,
                    read_text(port_dir / "link_layer") or "InfiniBand",
                    _state(read_text(port_dir / "state")),
                    _state(read_text(port_dir / "phys_state")),
                    float(rate.group(1)) if rate else None,
                    rate_text,
                    counters,
                )
            )
    return ports


@dataclass
class InfinibandCheck:
    """``infiniband_port`` (state and rate) and ``infiniband_errors`` (counter increases) per port.

    ``ignore`` lists ``device`` or ``device:port`` names not to check (an unused second port).
    Keeps the previous run's counters in memory, hence not frozen.
    """

    sys_root: Path = Path("/sys")
    expected_rate_gbps: float | None = None
    ignore: frozenset[str] = frozenset()
    name: str = "infiniband"
    _previous: dict[str, Mapping[str, int]] = field(default_factory=dict, repr=False)

    def run(self) -> Iterator[CheckResult]:
        ports = [p for p in read_ports(self.sys_root) if p.device not in self.ignore and p.component not in self.ignore]
        if not ports:
            why = f"no InfiniBand/RoCE port under {self.sys_root / 'class/infiniband'}"
            yield unknown(f"{self.name}_port", why)
            yield unknown(f"{self.name}_errors", why)
            return
        peer_rate: dict[tuple[str, str], float] = {}
        for p in ports:
            if p.up and p.rate_gbps is not None:
                key = (p.hca_type, p.link_layer)
                peer_rate[key] = max(peer_rate.get(key, 0.0), p.rate_gbps)
        for p in ports:
            yield self._port(p, self.expected_rate_gbps or peer_rate.get((p.hca_type, p.link_layer)))
            yield self._errors(p)

    def _port(self, p: Port, expected: float | None) -> CheckResult:
        ids = {"device": p.device, "port": p.port}
        measurements = [
            Measurement.of(family, value[0], **ids)
            for family, value in (
                ("peerwatch_agent_infiniband_port_state", p.state),
                ("peerwatch_agent_infiniband_port_phys_state", p.phys_state),
            )
            if value is not None
        ]
        if p.rate_gbps is not None:
            measurements.append(
                Measurement.of("peerwatch_agent_infiniband_port_rate_bytes_per_second", p.rate_gbps * 1e9 / 8, **ids)
            )
        check = f"{self.name}_port"
        if p.state is None or p.phys_state is None:
            return CheckResult(check, p.component, Status.UNKNOWN, "port state unreadable", tuple(measurements))
        state = f"{p.state[1]}/{p.phys_state[1]}"
        if not p.up:
            hint = f"port {state}: link down; check cable, transceiver and switch port"
            return CheckResult(check, p.component, Status.CRITICAL, hint, tuple(measurements))
        if p.rate_gbps is None:
            return CheckResult(
                check, p.component, Status.UNKNOWN, f"port {state}, rate unreadable", tuple(measurements)
            )
        if expected is not None and p.rate_gbps < expected:
            hint = f"rate {p.rate_text} < {expected:g} Gb/sec expected; check cable/transceiver and switch port speed"
            return CheckResult(check, p.component, Status.UNHEALTHY, hint, tuple(measurements))
        return CheckResult(check, p.component, Status.OK, f"port {state} at {p.rate_text}", tuple(measurements))

    def _errors(self, p: Port) -> CheckResult:
        check = f"{self.name}_errors"
        measurements = tuple(
            Measurement.of("peerwatch_agent_infiniband_port_errors_total", v, device=p.device, port=p.port, counter=c)
            for c, v in sorted(p.counters.items())
        )
        if not p.counters:
            return CheckResult(check, p.component, Status.UNKNOWN, "no error counters readable", measurements)
        previous = self._previous.get(p.component)
        self._previous[p.component] = dict(p.counters)
        totals = format_counts(p.counters)
        if previous is None:
            hint = "first run: baseline for increases" + (f" (totals: {totals})" if totals else "")
            return CheckResult(check, p.component, Status.OK, hint, measurements)
        # A counter below its previous value was reset (reboot, driver reload, perfquery -R): no increase.
        increases = {c: v - previous[c] for c, v in p.counters.items() if c in previous and v > previous[c]}
        flagged = {c: d for c, d in increases.items() if (t := ERROR_COUNTERS.get(c)) is not None and d >= t}
        if flagged:
            hint = f"error counters rose since last run: {format_counts(flagged)}; check cable and transceiver"
            return CheckResult(check, p.component, Status.UNHEALTHY, hint, measurements)
        rose = f" (below thresholds: {format_counts(increases)})" if increases else ""
        return CheckResult(
            check, p.component, Status.OK, f"no error counter increase since last run{rose}", measurements
        )
