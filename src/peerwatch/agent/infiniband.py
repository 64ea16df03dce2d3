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
from collections.abc import Iterable, Iterator, Mapping
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

STATE_NAMES: Mapping[int, str] = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
"""Logical port state code → the name sysfs prints (tools print ``Active``, ``PORT_ACTIVE (4)``: read by code)."""

PHYS_STATE_NAMES: Mapping[int, str] = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "Phy Test",
}
"""Physical port state code → the name sysfs prints."""

DOWN_ADVICE: Mapping[str, str] = {
    "Polling": "no peer answers: cable or transceiver unplugged or faulty, or the switch port is down",
    "Disabled": "port disabled (by the driver, firmware or the switch)",
    "LinkErrorRecovery": "link retraining after errors: check cable and transceiver",
    "INIT": "physical link up but no subnet manager has activated the port: check the SM",
    "ARMED": "waiting for the subnet manager to activate the port",
}
"""Physical or logical state → what it usually means, added to a down port's hint."""


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
        # A logical ACTIVE needs a physical LinkUp, so a tool that omits the physical state still reads as up.
        return (
            self.state is not None
            and self.state[1] == "ACTIVE"
            and (self.phys_state is None or self.phys_state[1] == "LinkUp")
        )


_CODE_IN_PARENS = re.compile(r"\((\d+)\)")


def _norm(name: str) -> str:
    return re.sub(r"[^a-z]", "", name.lower().removeprefix("port_"))


def _parse(text: str | None, names: Mapping[int, str], aliases: Mapping[str, int]) -> tuple[int, str] | None:
    text = (text or "").strip()
    if match := _STATE.match(text):
        return int(match.group(1)), match.group(2)
    if match := _CODE_IN_PARENS.search(text):
        code = int(match.group(1))
        return code, names.get(code, text.split(" ")[0])
    found = {_norm(name): code for code, name in names.items()}.get(_norm(text), aliases.get(_norm(text)))
    return (found, names[found]) if found is not None else None


def parse_state(text: str | None) -> tuple[int, str] | None:
    """``(code, sysfs name)`` of a logical port state as any tool prints it, ``None`` if unrecognised.

    sysfs and ``ibstatus``: ``4: ACTIVE``; ``ibv_devinfo``: ``PORT_ACTIVE (4)``; ``ibstat``: ``Active``
    (no code: looked up by name; ibstat says ``Initializing`` for INIT).
    """
    return _parse(text, STATE_NAMES, {"initializing": 2})


def parse_phys_state(text: str | None) -> tuple[int, str] | None:
    """``(code, sysfs name)`` of a physical port state: ``5: LinkUp``, ``LINK_UP (5)`` or ``LinkUp``."""
    return _parse(text, PHYS_STATE_NAMES, {})


def parse_rate(text: str) -> float | None:
    """Gb/s of a rate as sysfs and ``ibstatus`` print it (``200 Gb/sec (4X HDR)``), ``None`` if absent."""
    match = _RATE.search(text)
    return float(match.group(1)) if match else None


def peer_rates(ports: Iterable[Port]) -> dict[tuple[str, str], float]:
    """The fastest rate of the active ports per (HCA type, link layer): what a port of that kind should reach."""
    best: dict[tuple[str, str], float] = {}
    for p in ports:
        if p.up and p.rate_gbps is not None:
            key = (p.hca_type, p.link_layer)
            best[key] = max(best.get(key, 0.0), p.rate_gbps)
    return best


def judge_port(p: Port, expected: float | None, rate_shown: bool = True) -> tuple[Status, str]:
    """Verdict and hint for one port: down → CRITICAL, slower than ``expected`` Gb/s → UNHEALTHY.

    ``rate_shown=False``: the source does not print a rate (plain ``ibv_devinfo``), so an up port is OK
    rather than UNKNOWN.
    """
    if p.state is None:
        return Status.UNKNOWN, "port state unreadable"
    state = f"{p.state[1]}/{p.phys_state[1]}" if p.phys_state else p.state[1]
    if not p.up:
        names = [p.phys_state[1]] if p.phys_state else []
        advice = next((DOWN_ADVICE[n] for n in [*names, p.state[1]] if n in DOWN_ADVICE), "")
        hint = (
            f"port {state}: link down; "
            + (f"{advice}; " if advice else "")
            + "check cable, transceiver and switch port"
        )
        return Status.CRITICAL, hint
    if p.rate_gbps is None:
        if not rate_shown:
            return Status.OK, f"port {state} (rate not in this output)"
        return Status.UNKNOWN, f"port {state}, rate unreadable"
    if expected is not None and p.rate_gbps < expected:
        hint = f"rate {p.rate_text} < {expected:g} Gb/sec expected; check cable/transceiver and switch port speed"
        return Status.UNHEALTHY, hint
    return Status.OK, f"port {state} at {p.rate_text}"


def judge_ports(
    ports: list[Port], expected_rate: float | None = None, check: str = "infiniband_port", rate_shown: bool = True
) -> Iterator[CheckResult]:
    """One result per port; a port's expected rate is ``expected_rate`` or else its peers' (:func:`peer_rates`)."""
    peer_rate = peer_rates(ports)
    for p in ports:
        status, hint = judge_port(p, expected_rate or peer_rate.get((p.hca_type, p.link_layer)), rate_shown)
        yield CheckResult(check, p.component, status, hint, tuple(port_measurements(p)))


def port_measurements(p: Port) -> list[Measurement]:
    """The exported state codes and rate of one port."""
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
    return measurements


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
            ports.append(
                Port(
                    dev.name,
                    port_dir.name,
                    hca,
                    read_text(port_dir / "link_layer") or "InfiniBand",
                    parse_state(read_text(port_dir / "state")),
                    parse_phys_state(read_text(port_dir / "phys_state")),
                    parse_rate(rate_text),
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
        yield from judge_ports(ports, self.expected_rate_gbps, f"{self.name}_port")
        for p in ports:
            yield self._errors(p)

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
