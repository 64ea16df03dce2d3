"""Backend.AI agent families (names, types and labels from ``backend.ai/metrics.csv``).

prometheus_client exposes counters with ``_total`` and histograms as ``_sum``/``_count``; the
agent's own counters restart from zero whenever the agent restarts. ``service_group`` comes
from Prometheus' HTTP service discovery, as in Backend.AI's own Grafana set-up.
"""

from __future__ import annotations

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.simulate.families import ExporterTable, Family, Src, ValueFn, entity_kinds, target_labels
from peerwatch.simulate.targets import EXPORTER_INDEX, EXPORTERS, BoolArray

EXP = EXPORTERS[EXPORTER_INDEX["backendai"]]
RPC_METHODS: dict[str, float] = {"health_check": 0.2, "gather_hwinfo": 1 / 60, "sync_kernel_registry": 1 / 30}
STAT_SCOPES: dict[str, float] = {"node": 0.2, "container": 0.2, "process": 0.2}  # stat() every 5 s per scope
DEVICE_ROWS: tuple[tuple[str, str], ...] = (
    ("cuda_util", "current"),
    ("cuda_util", "pct"),
    ("cuda_mem", "current"),
    ("cuda_mem", "capacity"),
)
HOST_ROWS: tuple[tuple[str, str, str], ...] = (
    ("cpu_util", "root", "current"),
    ("mem", "root", "current"),
    ("mem", "root", "capacity"),
    ("net_rx", "root", "current"),
    ("net_tx", "root", "current"),
)


def _reset(s: Src) -> BoolArray:
    return s["agent_reset"]


def _per(rates: dict[str, float]) -> ValueFn:
    def fn(s: Src) -> FloatArray:
        r = np.array(list(rates.values()))[None, :, None] * s.grid.step
        return np.broadcast_to(r, (s.layout.n, len(rates), s.grid.steps)).astype(np.float64)

    return fn


def _stat_sum(s: Src) -> FloatArray:
    return _per(STAT_SCOPES)(s) * s["agent_stat_s"][:, None, :]


def _device_util(s: Src) -> FloatArray:
    g = s["util"].shape[1]
    fb = s["fb_used"] * 1024.0 * 1024.0
    cap = s.layout.spec.hardware.fb_total_mib * 1024.0 * 1024.0
    per_gpu = np.stack([s["util"], s["util"], fb, np.full(fb.shape, cap)], axis=2)  # (N, G, rows, T)
    cpu = 100.0 * (s["cpu_user"] + s["cpu_system"]) * s.layout.spec.hardware.threads
    mem_cap = s.layout.spec.hardware.mem_bytes
    host = np.stack(
        [cpu, mem_cap - s["mem_avail"], np.full(cpu.shape, mem_cap), s["net_rx"][:, 0], s["net_tx"][:, 0]], axis=1
    )
    return np.concatenate([per_gpu.reshape(per_gpu.shape[0], g * len(DEVICE_ROWS), -1), host], axis=1)


def _device_present(s: Src) -> BoolArray:
    gpu = np.repeat(s["gpu_present"], len(DEVICE_ROWS), axis=1)
    return np.concatenate([gpu, np.ones((s.layout.n, len(HOST_ROWS), s.grid.steps), dtype=bool)], axis=1)


F = Family
FAMILIES: tuple[Family, ...] = (
    F(
        "backendai_async_task_count",
        "gauge",
        "Number of active async tasks",
        "node",
        lambda s: s["agent_tasks"],
        decimals=0,
    ),
    F("backendai_cpu_usage_percent", "gauge", "CPU usage of the process", "node", lambda s: s["agent_cpu"], decimals=1),
    F(
        "backendai_memory_used_rss",
        "gauge",
        "Memory used by the process in RSS",
        "node",
        lambda s: s["agent_rss"],
        decimals=-3,
    ),
    F(
        "backendai_memory_used_vms",
        "gauge",
        "Memory used by the process in VMS",
        "node",
        lambda s: 4.6 * s["agent_rss"] + 1.1e9,
        decimals=-3,
    ),
    F(
        "backendai_event_propagator_count",
        "gauge",
        "Current number of active event propagators",
        "node",
        lambda s: np.full((s.layout.n, s.grid.steps), 3.0),
    ),
    F(
        "backendai_rpc_requests_total",
        "counter",
        "Number of RPC requests",
        "rpc",
        _per(RPC_METHODS),
        True,
        0,
        "zero",
        _reset,
    ),
    F(
        "backendai_stat_task_trigger_count_total",
        "counter",
        "Number of stat() task triggered",
        "stat",
        _per(STAT_SCOPES),
        True,
        0,
        "zero",
        _reset,
    ),
    F(
        "backendai_stat_task_success_count_total",
        "counter",
        "Number of stat() task succeeded",
        "stat",
        _per(STAT_SCOPES),
        True,
        0,
        "zero",
        _reset,
    ),
    F(
        "backendai_stat_task_duration_sec_count",
        "counter",
        "Total elapsed time of a stat() collection cycle in seconds",
        "stat",
        _per(STAT_SCOPES),
        True,
        0,
        "zero",
        _reset,
    ),
    F(
        "backendai_stat_task_duration_sec_sum",
        "counter",
        "Total elapsed time of a stat() collection cycle in seconds",
        "stat",
        _stat_sum,
        True,
        4,
        "zero",
        _reset,
    ),
    F(
        "backendai_sync_container_lifecycle_trigger_count_total",
        "counter",
        "Number of sync_container_lifecycle() task triggered",
        "agent",
        _per({"x": 0.1}),
        True,
        0,
        "zero",
        _reset,
    ),
    F(
        "backendai_sync_container_lifecycle_success_count_total",
        "counter",
        "Number of sync_container_lifecycle() task succeeded",
        "agent",
        _per({"x": 0.1}),
        True,
        0,
        "zero",
        _reset,
    ),
    F(
        "backendai_device_utilization",
        "gauge",
        "Device utilization metrics",
        "device",
        _device_util,
        decimals=2,
        present=_device_present,
    ),
)


def _entities(s: Src, n: int, kind: str) -> list[dict[str, str]]:
    agent = s.layout.names[n]
    if kind == "node":
        return [{}]
    if kind == "rpc":
        return [{"method": m} for m in RPC_METHODS]
    if kind == "stat":
        return [{"agent_id": agent, "stat_scope": sc} for sc in STAT_SCOPES]
    if kind == "agent":
        return [{"agent_id": agent}]
    rows = [
        {"device_metric_name": name, "agent_id": agent, "device_id": str(g), "value_type": vt}
        for g in range(s.layout.spec.hardware.gpus)
        for name, vt in DEVICE_ROWS
    ]
    rows += [
        {"device_metric_name": name, "agent_id": agent, "device_id": dev, "value_type": vt}
        for name, dev, vt in HOST_ROWS
    ]
    return rows


def _base(s: Src, n: int) -> dict[str, str]:
    return target_labels(EXP, s.layout.names[n])  # service_group included


KINDS = ("node", "rpc", "stat", "agent", "device")
TABLE = ExporterTable(EXP, FAMILIES, entity_kinds(_entities, KINDS), _base)
