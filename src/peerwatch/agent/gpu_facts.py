"""What nvidia-smi says about a GPU, and how the agent judges it: one shape and one judgement.

Every nvidia-smi format the agent reads (its own ``--query-gpu`` CSV, any saved CSV, ``-q`` text,
``-q -x`` XML) becomes :class:`GpuRow` and :class:`RemapRow`; :func:`judge_gpu` turns them into
the ``nvidia_smi`` verdict, live or saved alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from peerwatch.agent.checks import CheckResult, Measurement, Status, worst
from peerwatch.agent.xid_policy import RECOVERY_ACTIONS, recovery_action_named

CHECK = "nvidia_smi"

# Bits of clocks_event_reasons.active (NVML nvmlClocksEventReasons, formerly "throttle reasons"),
# with the names nvidia-smi gives them: only hardware slowdowns are a fault.
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
CLOCK_REASON_BITS: Mapping[str, int] = {name: bit for bit, (name, _) in CLOCK_EVENT_REASONS.items()}
# `nvidia-smi -q` text spells the reasons as words; both "Clocks Throttle Reasons" (before driver 535)
# and "Clocks Event Reasons" sections use them.
CLOCK_REASON_LABELS: Mapping[str, str] = {
    "idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
}


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU as nvidia-smi reports it; ``None`` where it said ``[N/A]`` or did not say."""

    index: int
    bus_id: str  # canonical dddd:bb:dd.f
    uuid: str
    name: str
    utilization: float | None = None
    ecc_uncorrected: float | None = None  # volatile: since the driver loaded
    retired_pending: bool | None = None
    clock_reasons: int | None = None  # bit mask of CLOCK_EVENT_REASONS
    recovery_action: str | None = None  # "None", "Reset", "Reboot", "Drain P2P", "Drain and Reset"


@dataclass(frozen=True, slots=True)
class RemapRow:
    """Row-remapper state of one GPU (Ampere and newer)."""

    correctable: float | None
    uncorrectable: float | None
    pending: bool | None
    failure: bool | None


@dataclass(frozen=True, slots=True)
class GpuQuery:
    """What one nvidia-smi output told: GPUs, GPUs it could not reach, or why it told nothing."""

    gpus: tuple[GpuRow, ...] = ()
    lost: Mapping[str, str] = field(default_factory=dict)  # bus id -> nvidia-smi's message
    error: str | None = None
    remaps: Mapping[str, RemapRow] = field(default_factory=dict)  # bus id -> remapper state, where shown

    def by_bus_id(self) -> dict[str, GpuRow]:
        return {g.bus_id: g for g in self.gpus}


def number(text: str | None) -> float | None:
    """A value nvidia-smi printed, without its unit (``12 %``, ``0 us``); ``None`` for ``[N/A]`` and the like."""
    if text is None:
        return None
    word = text.strip().split(" ", 1)[0] if text.strip() else ""
    try:
        return float(word)
    except ValueError:
        return None  # [N/A], N/A, [Not Supported], [Unknown Error], [GPU is lost]


def flag(text: str | None) -> bool | None:
    """``Yes``/``No`` (or 1/0, Active/Not Active) as a bool; ``None`` for anything else."""
    if text is None:
        return None
    return {"yes": True, "1": True, "active": True, "no": False, "0": False, "not active": False}.get(
        text.strip().lower()
    )


def reasons_mask(active: Mapping[str, bool | None]) -> int | None:
    """The bit mask of the named reasons that are active (``None`` when none of them was readable)."""
    known = {name: on for name, on in active.items() if name in CLOCK_REASON_BITS and on is not None}
    if not known:
        return None
    return sum(CLOCK_REASON_BITS[name] for name, on in known.items() if on)


def _recovery_problem(action: str | None) -> tuple[Status, str] | None:
    code = recovery_action_named(action) if action else None
    if code is None or code == 0:
        return None
    policy = RECOVERY_ACTIONS[code]
    return policy.status, f"GPU recovery action {action}: {policy.hint}"


def gpu_problems(gpu: GpuRow, remap: RemapRow | None) -> list[tuple[Status, str]]:
    """Each fault nvidia-smi shows for ``gpu``, with its status and what to do."""
    problems = []
    if recovery := _recovery_problem(gpu.recovery_action):
        problems.append(recovery)
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


def gpu_measurements(gpu: GpuRow, remap: RemapRow | None) -> list[Measurement]:
    """The values the agent exports for ``gpu`` (missing values stay missing, never 0)."""
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


def judge_gpu(gpu: GpuRow, remap: RemapRow | None, check: str = CHECK) -> CheckResult:
    """The ``nvidia_smi`` verdict on one GPU: its worst problem, every problem in the hint."""
    problems = gpu_problems(gpu, remap)
    status = worst(s for s, _ in problems)
    hint = "; ".join(text for _, text in problems) or "no ECC, remapping, retirement or throttle problem"
    return CheckResult(check, gpu.bus_id, status, hint, tuple(gpu_measurements(gpu, remap)))


def judge_query(
    query: GpuQuery, remaps: Mapping[str, RemapRow] | None = None, check: str = CHECK
) -> Iterator[CheckResult]:
    """Verdicts on every GPU of ``query``: lost ones CRITICAL, the others by :func:`judge_gpu`."""
    rows = {**query.remaps, **(remaps or {})}
    for bus, message in sorted(query.lost.items()):
        yield CheckResult(check, bus, Status.CRITICAL, f"{message}: GPU unreachable; drain and reboot")
    for gpu in query.gpus:
        if gpu.bus_id not in query.lost:
            yield judge_gpu(gpu, rows.get(gpu.bus_id), check)


def first_text(values: Iterable[str | None]) -> str | None:
    """The first of ``values`` that is present."""
    return next((v for v in values if v is not None), None)
