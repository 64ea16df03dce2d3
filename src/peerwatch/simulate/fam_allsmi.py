"""all-smi (Lablup) families, GPU and CPU/memory/disk, labelled as ``all_smi api`` does.

all-smi sets its own ``instance`` label (the host name); Prometheus keeps it as
``exported_instance`` and sets ``instance`` to the scrape target, as it does for any target
label clash (GUIDE 7). GPU series are omitted, not zero, once the GPU is gone.
"""

from __future__ import annotations

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.simulate.families import ExporterTable, Family, Src, ValueFn, entity_kinds, target_labels
from peerwatch.simulate.targets import EXPORTER_INDEX, EXPORTERS, BoolArray

EXP = EXPORTERS[EXPORTER_INDEX["allsmi"]]
MIB = 1024.0 * 1024.0
THRESHOLDS = {"slowdown": 92.0, "shutdown": 97.0, "max_operating": 87.0}  # B200 board limits (C)


def _present(s: Src) -> BoolArray:
    return s["gpu_present"]


def _full(s: Src, v: float) -> FloatArray:
    return np.full(s["util"].shape, v)


def _gpu(name: str, help_: str, fn: ValueFn, decimals: int | None = None) -> Family:
    return Family(f"all_smi_{name}", "gauge", help_, "gpu", fn, decimals=decimals, present=_present)


def _host(name: str, help_: str, entity: str, fn: ValueFn, decimals: int | None = None) -> Family:
    return Family(f"all_smi_{name}", "gauge", help_, entity, fn, decimals=decimals)


def _gpu_const(v: float) -> ValueFn:
    return lambda s: _full(s, v)


def _cpu_util(s: Src) -> FloatArray:
    return 100.0 * (s["cpu_user"] + s["cpu_system"] + s["cpu_iowait"] + s["cpu_irq"] + s["cpu_softirq"])


def _node_const(v: float) -> ValueFn:
    return lambda s: np.full((s.layout.n, s.grid.steps), v)


FAMILIES: tuple[Family, ...] = (
    _gpu("gpu_utilization", "GPU utilization percentage", lambda s: s["util"]),
    _gpu("gpu_memory_used_bytes", "GPU memory used in bytes", lambda s: s["fb_used"] * MIB),
    _gpu(
        "gpu_memory_total_bytes",
        "GPU memory total in bytes",
        lambda s: _full(s, s.layout.spec.hardware.fb_total_mib * MIB),
    ),
    _gpu("gpu_temperature_celsius", "GPU temperature in celsius", lambda s: s["temp"]),
    _gpu("gpu_power_consumption_watts", "GPU power consumption in watts", lambda s: s["power"], 3),
    _gpu("gpu_frequency_mhz", "GPU frequency in MHz", lambda s: s["sm_clock"]),
    _gpu("gpu_pcie_gen_current", "Current PCIe generation", lambda s: s["pcie_gen"]),
    _gpu("gpu_pcie_width_current", "Current PCIe link width", lambda s: s["pcie_width"]),
    _gpu(
        "gpu_performance_state",
        "GPU performance state (P0=0 ... P15=15)",
        lambda s: np.where(s["pcie_gen"] <= 1, 8.0, 0.0),
    ),
    *(
        _gpu(
            f"gpu_temperature_threshold_{k}_celsius",
            f"{k.replace('_', ' ').capitalize()} temperature threshold",
            _gpu_const(v),
        )
        for k, v in THRESHOLDS.items()
    ),
    _gpu(
        "gpu_clock_graphics_max_mhz", "Maximum graphics clock", lambda s: _full(s, s.layout.spec.hardware.sm_clock_max)
    ),
    _gpu("gpu_clock_memory_max_mhz", "Maximum memory clock", lambda s: _full(s, s.layout.spec.hardware.mem_clock)),
    _gpu("gpu_power_limit_current_watts", "Current power limit", lambda s: _full(s, s.layout.spec.hardware.gpu_tdp_w)),
    _gpu("gpu_power_limit_max_watts", "Maximum power limit", lambda s: _full(s, s.layout.spec.hardware.gpu_tdp_w)),
    _gpu(
        "gpu_numa_node_id",
        "NUMA node the GPU is attached to",
        lambda s: np.broadcast_to(
            (np.arange(s["util"].shape[1]) >= s["util"].shape[1] // 2)[None, :, None] * 1.0, s["util"].shape
        ),
    ),
    _gpu("gpu_sm_occupancy", "GPM-reported SM occupancy fraction", lambda s: s["sm_active"] * 0.42, 4),
    _gpu(
        "gpu_memory_bandwidth_utilization",
        "GPM-reported DRAM bandwidth utilization fraction",
        lambda s: s["dram_active"],
        4,
    ),
    Family(
        "all_smi_gpu_info", "gauge", "GPU device information", "gpu_info", lambda s: _full(s, 1.0), present=_present
    ),
    _host("cpu_utilization", "CPU utilization percentage", "cpu", _cpu_util, 4),
    _host("cpu_socket_count", "Number of CPU sockets", "cpu", lambda s: _node_const(s.layout.spec.hardware.sockets)(s)),
    _host("cpu_core_count", "Total number of CPU cores", "cpu", lambda s: _node_const(s.layout.spec.hardware.cores)(s)),
    _host(
        "cpu_thread_count",
        "Total number of CPU threads",
        "cpu",
        lambda s: _node_const(s.layout.spec.hardware.threads)(s),
    ),
    _host(
        "cpu_frequency_mhz",
        "CPU frequency in MHz",
        "cpu",
        lambda s: 2000.0 + 900.0 * np.clip(_cpu_util(s) / 40, 0, 1),
        0,
    ),
    _host(
        "cpu_socket_utilization",
        "Per-socket CPU utilization percentage",
        "socket",
        lambda s: _cpu_util(s)[:, None, :] * np.array([1.08, 0.92])[None, :, None],
        4,
    ),
    _host(
        "memory_total_bytes",
        "Total system memory in bytes",
        "mem",
        lambda s: _node_const(s.layout.spec.hardware.mem_bytes)(s),
    ),
    _host("memory_available_bytes", "Available system memory in bytes", "mem", lambda s: s["mem_avail"], -3),
    _host(
        "memory_used_bytes",
        "Used system memory in bytes",
        "mem",
        lambda s: s.layout.spec.hardware.mem_bytes - s["mem_avail"],
        -3,
    ),
    _host(
        "memory_free_bytes",
        "Free system memory in bytes",
        "mem",
        lambda s: np.clip(s["mem_avail"] - 0.9 * s["mem_cached"], 0.01 * s.layout.spec.hardware.mem_bytes, None),
        -3,
    ),
    _host(
        "memory_utilization",
        "Memory utilization percentage",
        "mem",
        lambda s: 100.0 * (1.0 - s["mem_avail"] / s.layout.spec.hardware.mem_bytes),
        4,
    ),
    _host("disk_total_bytes", "Total disk space in bytes", "disk", lambda s: _node_const(1.92e12)(s)),
    _host(
        "disk_available_bytes",
        "Available disk space in bytes",
        "disk",
        lambda s: 1.2e12 - np.cumsum(s["disk_wb"][:, 0, :] * 0.01, axis=1) * s.grid.step,
        -6,
    ),
    _host("up", "1 once the first collection cycle has populated the exporter", "host", _node_const(1.0)),
)


def _gpus(s: Src, n: int, info: bool = False) -> list[dict[str, str]]:
    hw = s.layout.spec.hardware
    out = []
    for g in range(hw.gpus):
        lab = {"gpu": hw.gpu_model, "gpu_uuid": s.layout.uuids[n][g], "gpu_index": str(g)}
        if info:
            lab.update(
                {
                    "type": "GPU",
                    "driver_version": hw.driver,
                    "cuda_version": hw.cuda,
                    "lib_name": "CUDA",
                    "lib_version": hw.cuda,
                }
            )
        out.append(lab)
    return out


def _entities(s: Src, n: int, kind: str) -> list[dict[str, str]]:
    host = s.layout.names[n]
    model = "Intel(R) Xeon(R) Platinum 8570"
    if kind == "cpu":
        return [{"cpu_model": model, "hostname": host, "index": "0"}]
    if kind == "socket":
        return [{"cpu_model": model, "hostname": host, "cpu_index": "0", "socket_id": str(i)} for i in range(2)]
    if kind == "mem":
        return [{"hostname": host, "index": "0"}]
    if kind == "disk":
        return [{"mount_point": "/", "index": "0"}]
    if kind == "host":
        return [{"hostname": host}]
    return _gpus(s, n, info=kind == "gpu_info")


def _base(s: Src, n: int) -> dict[str, str]:
    return {**target_labels(EXP, s.layout.names[n]), "exported_instance": s.layout.names[n]}


KINDS = ("gpu", "gpu_info", "cpu", "socket", "mem", "disk", "host")
TABLE = ExporterTable(EXP, FAMILIES, entity_kinds(_entities, KINDS), _base)
