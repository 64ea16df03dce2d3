"""CPU clocks stuck low, and CPU frequency limits capped below the hardware maximum.

Reads ``/sys/devices/system/cpu/cpu*/cpufreq/``. Idle CPUs clock down, so "stuck low" means
even the fastest CPU is below ``low_ratio`` of its maximum while the node has work (1-minute
load at least ``busy_load``): power capping by the BMC, PROCHOT, a BIOS power profile or the
powersave governor. A ``scaling_max_freq`` below ``cpuinfo_max_freq`` is a configuration cap
and is flagged whatever the load. Without cpufreq (VMs) both say UNKNOWN.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from peerwatch.agent.checks import CheckResult, Measurement, Status
from peerwatch.agent.sysfs import read_int, read_text

_CPU_DIR = re.compile(r"^cpu\d+$")


@dataclass(frozen=True, slots=True)
class CpuFreq:
    """One CPU's frequencies in kHz, as cpufreq reports them."""

    cpu: str
    current: int
    hardware_max: int
    scaling_max: int | None


def read_cpus(sys_root: Path) -> list[CpuFreq]:
    """CPUs exposing ``scaling_cur_freq`` and ``cpuinfo_max_freq`` (none in most VMs)."""
    base = sys_root / "devices" / "system" / "cpu"
    cpus = []
    dirs = [p for p in base.iterdir() if _CPU_DIR.match(p.name)] if base.is_dir() else []
    for cpu in sorted(dirs, key=lambda p: int(p.name[3:])):
        freq = cpu / "cpufreq"
        current, hw_max = read_int(freq / "scaling_cur_freq"), read_int(freq / "cpuinfo_max_freq")
        if current is not None and hw_max:
            cpus.append(CpuFreq(cpu.name, current, hw_max, read_int(freq / "scaling_max_freq")))
    return cpus


def load1(proc_root: Path) -> float | None:
    """The 1-minute load average, or ``None`` when unreadable."""
    text = read_text(proc_root / "loadavg")
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class CpuFreqCheck:
    """Node-level: ``cpu_frequency`` (stuck low under load) and ``cpu_frequency_cap`` (limit below maximum)."""

    sys_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    low_ratio: float = 0.5
    busy_load: float = 1.0
    cap_tolerance: float = 0.01  # drivers round: a cap within 1% of the maximum is no cap
    name: str = "cpu_frequency"

    @property
    def cap_name(self) -> str:
        return f"{self.name}_cap"

    def run(self) -> Iterator[CheckResult]:
        cpus = read_cpus(self.sys_root)
        if not cpus:
            why = f"no cpufreq under {self.sys_root / 'devices/system/cpu'} (VM or no cpufreq driver)"
            yield CheckResult(self.name, "node", Status.UNKNOWN, why)
            yield CheckResult(self.cap_name, "node", Status.UNKNOWN, why)
            return
        yield self._stuck_low(cpus)
        yield self._capped(cpus)

    def _stuck_low(self, cpus: list[CpuFreq]) -> CheckResult:
        ratios = [c.current / c.hardware_max for c in cpus]
        fastest, median = max(ratios), statistics.median(ratios)
        measurements = (
            Measurement.of("peerwatch_agent_cpu_frequency_ratio", fastest, stat="max"),
            Measurement.of("peerwatch_agent_cpu_frequency_ratio", median, stat="median"),
        )
        governor = read_text(self.sys_root / "devices/system/cpu" / cpus[0].cpu / "cpufreq/scaling_governor")
        gov = f", governor {governor}" if governor else ""
        if fastest >= self.low_ratio:
            return CheckResult(
                self.name, "node", Status.OK, f"fastest CPU at {fastest:.0%} of maximum{gov}", measurements
            )
        load = load1(self.proc_root)
        low = f"every CPU below {self.low_ratio:.0%} of maximum (fastest {fastest:.0%}{gov})"
        if load is None:
            status, hint = Status.UNKNOWN, f"{low}; load unknown, so idle clocks cannot be ruled out"
        elif load >= self.busy_load:
            status = Status.UNHEALTHY
            hint = f"clocks stuck low: {low} at load {load:g}; check BMC power capping, PROCHOT, BIOS profile, governor"
        else:
            status, hint = Status.OK, f"{low} at load {load:g}: idle"
        return CheckResult(self.name, "node", status, hint, measurements)

    def _capped(self, cpus: list[CpuFreq]) -> CheckResult:
        capped = [
            c for c in cpus if c.scaling_max is not None and c.scaling_max < c.hardware_max * (1 - self.cap_tolerance)
        ]
        measurements = (Measurement.of("peerwatch_agent_cpu_scaling_max_capped_cpus", len(capped)),)
        if not capped:
            return CheckResult(self.cap_name, "node", Status.OK, "scaling_max_freq at cpuinfo_max_freq", measurements)
        c = capped[0]
        hint = (
            f"scaling_max_freq below cpuinfo_max_freq on {len(capped)}/{len(cpus)} CPUs "
            f"(e.g. {c.cpu}: {c.scaling_max // 1000 if c.scaling_max else 0} < {c.hardware_max // 1000} MHz); "
            "raise it (cpupower frequency-set -u) or fix the tuned/BIOS profile"
        )
        return CheckResult(self.cap_name, "node", Status.UNHEALTHY, hint, measurements)
