"""nvidia-smi: the GPU inventory other checks share, and the per-GPU memory/throttle check.

One :class:`NvidiaSmi` is shared by the Xid check (PCI address → GPU index), the PCIe check
(is the GPU busy?) and :class:`NvidiaSmiCheck`; it caches its answer for ``ttl`` seconds so
a run calls nvidia-smi once. nvidia-smi hangs on a sick GPU, so every call has a timeout.
"""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from peerwatch.agent.checks import CheckResult, Measurement, Status, unknown, worst
from peerwatch.agent.runner import CommandError, CommandRunner
from peerwatch.agent.sysfs import pci_bus_id

QUERY_FIELDS = (
    "index,pci.bus_id,uuid,name,utilization.gpu,ecc.errors.uncorrected.volatile.total,"
    "retired_pages.pending,clocks_throttle_reasons.active"
)
MINIMAL_FIELDS = "index,pci.bus_id,uuid,name,utilization.gpu"  # when the driver rejects a field of the full set
REMAP_FIELDS = (
    "gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure"
)

# Bits of clocks_throttle_reasons.active (NVML nvmlClocksEventReasons): only hardware slowdowns are a fault.
CLOCK_EVENT_REASONS: Mapping[int, tuple[str, Status]] = {
    0x1: ("gpu_idle", Status.OK),
    0x2: ("applications_clocks_setting", Status.OK),
    0x4: ("sw_power_cap", Status.OK),
    0x8: ("hw_slowdown", Status.UNHEALTHY),
    0x10: ("sync_boost", Status.OK),
    0x20: ("sw_thermal_slowdown", Status.UNHEALTHY),
    0x40: ("hw_thermal_slowdown", Status.UNHEALTHY),
    0x80: ("hw_power_brake_slowdown", Status.UNHEALTHY),
    0x100: ("display_clocks_setting", Status.OK),
}

_LOST = re.compile(r"device handle for GPU\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-7])\s*:\s*(.*)")


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU as nvidia-smi reports it; ``None`` where it said ``[N/A]`` or similar."""

    index: int
    bus_id: str  # canonical dddd:bb:dd.f
    uuid: str
    name: str
    utilization: float | None = None
    ecc_uncorrected: float | None = None
    retired_pending: bool | None = None
    clock_reasons: int | None = None


@dataclass(frozen=True, slots=True)
class RemapRow:
    """Row-remapper state of one GPU (Ampere and newer)."""

    correctable: float | None
    uncorrectable: float | None
    pending: bool | None
    failure: bool | None


@dataclass(frozen=True, slots=True)
class GpuQuery:
    """What one nvidia-smi call told: GPUs, GPUs it could not reach, or why it told nothing."""

    gpus: tuple[GpuRow, ...] = ()
    lost: Mapping[str, str] = field(default_factory=dict)  # bus id -> nvidia-smi's message
    error: str | None = None

    def by_bus_id(self) -> dict[str, GpuRow]:
        return {g.bus_id: g for g in self.gpus}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # [N/A], [Not Supported], [Unknown Error], [GPU is lost]


def _flag(text: str) -> bool | None:
    return {"yes": True, "1": True, "no": False, "0": False}.get(text.strip().lower())


def _rows(stdout: str) -> Iterator[list[str]]:
    for row in csv.reader(io.StringIO(stdout), skipinitialspace=True):
        if row and "device handle" not in row[0]:
            yield [cell.strip() for cell in row]


def parse_query(stdout: str) -> GpuQuery:
    """Parse ``nvidia-smi --query-gpu=<QUERY_FIELDS or MINIMAL_FIELDS> --format=csv,noheader,nounits``."""
    gpus, lost = [], {}
    for line in stdout.splitlines():
        match = _LOST.search(line)
        if match and (bus := pci_bus_id(match.group(1))):
            lost[bus] = line.strip()
    for row in _rows(stdout):
        bus = pci_bus_id(row[1]) if len(row) >= 5 else None
        if bus is None or not row[0].isdigit():
            continue
        if any("GPU is lost" in cell for cell in row):
            lost[bus] = f"nvidia-smi: GPU {row[0]} ({bus}) is lost"
        extra = row[5:] + [""] * (8 - len(row))
        reasons = extra[2]
        gpus.append(
            GpuRow(
                int(row[0]),
                bus,
                row[2],
                row[3],
                _number(row[4]),
                _number(extra[0]),
                _flag(extra[1]),
                int(reasons, 16) if reasons.lower().startswith("0x") else None,
            )
        )
    return GpuQuery(tuple(gpus), lost)


def parse_remap(stdout: str) -> dict[str, RemapRow]:
    """Parse ``nvidia-smi --query-remapped-rows=<REMAP_FIELDS> --format=csv,noheader,nounits``."""
    out = {}
    for row in _rows(stdout):
        bus = pci_bus_id(row[0]) if len(row) == 5 else None
        if bus is not None:
            out[bus] = RemapRow(_number(row[1]), _number(row[2]), _flag(row[3]), _flag(row[4]))
    return out


@dataclass
class NvidiaSmi:
    """Runs nvidia-smi through ``runner`` and caches each answer for ``ttl`` seconds."""

    runner: CommandRunner
    timeout: float = 20.0
    ttl: float = 5.0
    clock: Callable[[], float] = time.monotonic
    _cache: dict[str, tuple[float, object]] = field(default_factory=dict, repr=False)

    def _cached(self, key: str, compute: Callable[[], object]) -> object:
        hit = self._cache.get(key)
        if hit is not None and self.clock() - hit[0] < self.ttl:
            return hit[1]
        value = compute()
        self._cache[key] = (self.clock(), value)
        return value

    def _run(self, *args: str) -> tuple[int, str]:
        done = self.runner.run(("nvidia-smi", *args), self.timeout)
        return done.returncode, done.stdout + ("\n" + done.stderr if done.stderr else "")

    def query(self) -> GpuQuery:
        """The GPUs nvidia-smi sees now (``error`` set when it could not be asked or answered nothing)."""
        result = self._cached("query", self._query)
        assert isinstance(result, GpuQuery)
        return result

    def _query(self) -> GpuQuery:
        if self.runner.which("nvidia-smi") is None:
            return GpuQuery(error="nvidia-smi not found")
        try:
            for fields in (QUERY_FIELDS, MINIMAL_FIELDS):
                code, out = self._run(f"--query-gpu={fields}", "--format=csv,noheader,nounits")
                if "is not a valid field" not in out:
                    break
        except CommandError as exc:
            return GpuQuery(error=f"{exc} (a hung driver or GPU is a common cause: check dmesg for Xid 79/119)")
        parsed = parse_query(out)
        if parsed.gpus or parsed.lost:
            return parsed
        first = next((line.strip() for line in out.splitlines() if line.strip()), f"exit {code}")
        return GpuQuery(error=f"nvidia-smi: {first}")

    def remapped_rows(self) -> Mapping[str, RemapRow] | None:
        """Row-remapper state per PCI address, or ``None`` where the GPUs or driver do not report it."""
        result = self._cached("remap", self._remap)
        return result if isinstance(result, dict) else None

    def _remap(self) -> dict[str, RemapRow] | None:
        try:
            code, out = self._run(f"--query-remapped-rows={REMAP_FIELDS}", "--format=csv,noheader,nounits")
        except CommandError:
            return None
        return parse_remap(out) if code == 0 else None


def _gpu_problems(gpu: GpuRow, remap: RemapRow | None) -> list[tuple[Status, str]]:
    problems = []
    if gpu.ecc_uncorrected:
        problems.append((Status.CRITICAL, f"{gpu.ecc_uncorrected:g} uncorrected ECC errors: drain and reset the GPU"))
    if remap is not None and remap.failure:
        problems.append((Status.CRITICAL, "row remapping failed (no spare rows): swap the GPU"))
    if remap is not None and remap.pending:
        problems.append((Status.UNHEALTHY, "row remap pending: reset the GPU to apply it"))
    if gpu.retired_pending:
        problems.append((Status.UNHEALTHY, "page retirement pending: reset the GPU to apply it"))
    for bit, (reason, status) in CLOCK_EVENT_REASONS.items():
        if gpu.clock_reasons is not None and gpu.clock_reasons & bit and status is not Status.OK:
            problems.append((status, f"clocks throttled by {reason}: check cooling and power"))
    return problems


def _gpu_measurements(gpu: GpuRow, remap: RemapRow | None) -> list[Measurement]:
    ids = {"gpu": str(gpu.index), "pci_bus_id": gpu.bus_id}
    out = [Measurement.of("peerwatch_agent_gpu_info", 1, **ids, uuid=gpu.uuid, name=gpu.name)]
    values: dict[str, float | bool | None] = {
        "peerwatch_agent_gpu_utilization_percent": gpu.utilization,
        "peerwatch_agent_gpu_ecc_uncorrected_volatile": gpu.ecc_uncorrected,
        "peerwatch_agent_gpu_retired_pages_pending": gpu.retired_pending,
        "peerwatch_agent_gpu_clocks_event_reasons": gpu.clock_reasons,
    }
    if remap is not None:
        values["peerwatch_agent_gpu_remapped_rows_pending"] = remap.pending
        values["peerwatch_agent_gpu_remapped_rows_failure"] = remap.failure
        for kind, count in (("correctable", remap.correctable), ("uncorrectable", remap.uncorrectable)):
            if count is not None:
                out.append(Measurement.of("peerwatch_agent_gpu_remapped_rows", count, **ids, kind=kind))
    out.extend(Measurement.of(name, float(v), **ids) for name, v in values.items() if v is not None)
    return out


@dataclass(frozen=True)
class NvidiaSmiCheck:
    """Per GPU: uncorrected ECC errors, row-remap and page-retirement state, hardware throttling, lost GPUs."""

    smi: NvidiaSmi
    name: str = "nvidia_smi"

    def run(self) -> Iterator[CheckResult]:
        query = self.smi.query()
        if query.error is not None:
            yield unknown(self.name, query.error)
            return
        remaps = self.smi.remapped_rows() or {}
        for bus, message in sorted(query.lost.items()):
            yield CheckResult(self.name, bus, Status.CRITICAL, f"{message}: GPU unreachable; drain and reboot")
        for gpu in query.gpus:
            if gpu.bus_id in query.lost:
                continue
            remap = remaps.get(gpu.bus_id)
            problems = _gpu_problems(gpu, remap)
            status = worst(s for s, _ in problems)
            hint = "; ".join(text for _, text in problems) or "no ECC, remapping, retirement or throttle problem"
            yield CheckResult(self.name, gpu.bus_id, status, hint, tuple(_gpu_measurements(gpu, remap)))
