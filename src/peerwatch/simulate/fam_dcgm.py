"""dcgm-exporter families: the default and DCP counters plus the commonly enabled error fields.

Labels follow dcgm-exporter's renderer: ``gpu, UUID, pci_bus_id, device, modelName`` and the host
label, ``Hostname`` on nodes running an older release and ``hostname`` on newer ones, plus
``DCGM_FI_DRIVER_VERSION``. ``DCGM_FI_DEV_XID_ERRORS`` holds the last XID; on newer releases
each new XID starts a new series with ``err_code``/``err_msg``. ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL``
is declared a counter but carries a rate, as some releases do (GUIDE 7).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from peerwatch.model import Labels
from peerwatch.simulate.cluster import pci_bus_id
from peerwatch.simulate.families import ExporterTable, Family, SeriesSet, Src, labels_for, target_labels
from peerwatch.simulate.signals import Xid
from peerwatch.simulate.targets import EXPORTER_INDEX, EXPORTERS, BoolArray

EXP = EXPORTERS[EXPORTER_INDEX["dcgm"]]
XID_NAME = "DCGM_FI_DEV_XID_ERRORS"
# dcgm-exporter's xidErrCodeToText strings (nvidia-xid/xid_catalog.csv, column dcgm_exporter_err_msg)
XID_TEXT: dict[int, str] = {
    0: "No Error",
    43: "GPU stopped processing",
    48: "Double Bit ECC Error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    145: "NVLINK: RLW Error",
    149: "NVLINK: NETIR Error",
}


def _present(s: Src) -> BoolArray:
    return s["gpu_present"]


def _g(name: str, mtype: str, help_: str, sig: str, decimals: int | None = 0, scale: float = 1.0) -> Family:
    return Family(name, mtype, help_, "gpu", lambda s: s[sig] * scale, decimals=decimals, present=_present)


def _c(name: str, help_: str, sig: str, start: str = "zero") -> Family:
    return Family(name, "counter", help_, "gpu", lambda s: s[sig], True, 0, start, present=_present)


FAMILIES: tuple[Family, ...] = (
    _g("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock"),
    _g("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock"),
    _g("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "mem_temp"),
    _g("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temp"),
    _g("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power", 3),
    Family(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "gpu",
        lambda s: s["power"] * s.grid.step * 1000.0,
        True,
        0,
        present=_present,
    ),
    _c("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "pcie_replay"),
    _g("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util"),
    Family(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "Memory utilization (in %).",
        "gpu",
        lambda s: np.rint(s["dram_active"] * 100.0),
        present=_present,
    ),
    Family(
        "DCGM_FI_DEV_ENC_UTIL",
        "gauge",
        "Encoder utilization (in %).",
        "gpu",
        lambda s: np.zeros(s["util"].shape),
        present=_present,
    ),
    Family(
        "DCGM_FI_DEV_DEC_UTIL",
        "gauge",
        "Decoder utilization (in %).",
        "gpu",
        lambda s: np.zeros(s["util"].shape),
        present=_present,
    ),
    Family(
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "Framebuffer memory free (in MiB).",
        "gpu",
        lambda s: s.layout.spec.hardware.fb_total_mib - 611.0 - s["fb_used"],
        decimals=0,
        present=_present,
    ),
    _g("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used"),
    Family(
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved (in MiB).",
        "gpu",
        lambda s: np.full(s["util"].shape, 611.0),
        present=_present,
    ),
    _g(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
        "nvlink_bw",
    ),
    Family(
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "gauge",
        "vGPU License status",
        "gpu",
        lambda s: np.zeros(s["util"].shape),
        present=_present,
    ),
    _g(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "remap_uncorr",
    ),
    _g(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "remap_corr",
    ),
    _g("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "remap_fail"),
    _c("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", "sbe"),
    _c("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", "dbe"),
    Family(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        "gpu",
        lambda s: s["sbe"],
        True,
        0,
        lambda s: s.layout.old_sbe,
        present=_present,
    ),
    _c("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", "dbe"),
    _c(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.", "nvlink_crc"
    ),
    Family(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink data CRC errors.",
        "gpu",
        lambda s: np.floor(s["nvlink_crc"] * 0.3),
        True,
        0,
        "zero",
        present=_present,
    ),
    _c("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.", "nvlink_replay"),
    _c("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.", "nvlink_recovery"),
    Family(
        "DCGM_FI_DEV_POWER_VIOLATION",
        "counter",
        "Throttling duration due to power constraints (in us).",
        "gpu",
        lambda s: s["power_viol"] / 1000.0,
        True,
        0,
        present=_present,
    ),
    Family(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "counter",
        "Throttling duration due to thermal constraints (in us).",
        "gpu",
        lambda s: s["thermal_viol"] / 1000.0,
        True,
        0,
        "zero",
        present=_present,
    ),
    _g("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons (bitmask).", "throttle"),
    _g("DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe Current Link Generation.", "pcie_gen"),
    _g("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe Current Link Width.", "pcie_width"),
    Family(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "gauge",
        "Power management limit (in W).",
        "gpu",
        lambda s: np.full(s["util"].shape, s.layout.spec.hardware.gpu_tdp_w),
        present=_present,
    ),
    Family(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        "gpu",
        lambda s: np.clip(s["util"] / 100.0 * 0.985, 0, 1),
        decimals=6,
        present=_present,
    ),
    _g("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", "sm_active", 6),
    Family(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gauge",
        "The ratio of number of warps resident on an SM.",
        "gpu",
        lambda s: s["sm_active"] * 0.42,
        decimals=6,
        present=_present,
    ),
    _g(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "tensor_active",
        6,
    ),
    _g(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "dram_active",
        6,
    ),
    _g(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol "
        "headers and data payloads - in bytes per second.",
        "pcie_tx",
    ),
    _g(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol "
        "headers and data payloads - in bytes per second.",
        "pcie_rx",
    ),
)


def _base(s: Src, n: int) -> dict[str, str]:
    name = s.layout.names[n]
    host = "Hostname" if s.layout.old_exporter[n] else "hostname"
    return {**target_labels(EXP, name), host: name, "DCGM_FI_DRIVER_VERSION": s.layout.spec.hardware.driver}


def _gpus(s: Src, n: int) -> list[dict[str, str]]:
    return [
        {
            "gpu": str(g),
            "UUID": s.layout.uuids[n][g],
            "pci_bus_id": pci_bus_id(g),
            "device": f"nvidia{g}",
            "modelName": s.layout.spec.hardware.gpu_model,
        }
        for g in range(s.layout.spec.hardware.gpus)
    ]


TABLE = ExporterTable(EXP, FAMILIES, {"gpu": _gpus}, _base)


def xid_series(s: Src) -> Iterator[SeriesSet]:
    """``DCGM_FI_DEV_XID_ERRORS`` per GPU: value = last XID. Newer releases label it with
    ``err_code``/``err_msg`` (a new series per new XID); older ones change the value of one series."""
    times, steps = s.grid.times, s.grid.steps
    by_gpu: dict[tuple[int, int], list[Xid]] = {}
    for x in sorted(s.sig.xids, key=lambda x: x.ts):
        by_gpu.setdefault((x.node, x.gpu), []).append(x)
    nodes: list[int] = []
    labels: list[Labels] = []
    rows: list[np.ndarray] = []
    present: list[np.ndarray] = []
    gone = s["gpu_present"]
    for n in range(s.layout.n):
        gpu_labels = labels_for(TABLE, "gpu", s, n)
        for g, base in enumerate(gpu_labels):
            events = by_gpu.get((n, g), [])
            k_of = [int(np.searchsorted(times, x.ts, side="left")) for x in events]
            codes = [0, *(x.code for x in events)]
            starts = [0, *k_of]
            if s.layout.old_exporter[n]:  # one series whose value is the last XID
                value = np.zeros(steps)
                for k, x in zip(k_of, events, strict=True):
                    value[k:] = x.code
                nodes.append(n)
                labels.append(base)
                rows.append(value)
                present.append(gone[n, g])
                continue
            for i, (code, k0) in enumerate(zip(codes, starts, strict=True)):
                k1 = starts[i + 1] if i + 1 < len(starts) else steps
                if k1 <= k0 and i + 1 < len(starts):
                    continue
                mask = np.zeros(steps, dtype=bool)
                mask[k0:k1] = True
                extra = (("err_code", str(code)), ("err_msg", XID_TEXT.get(code, "Unknown Error")))
                nodes.append(n)
                labels.append(tuple(sorted(base + extra)))
                rows.append(np.full(steps, float(code)))
                present.append(mask & gone[n, g])
    yield SeriesSet(
        XID_NAME,
        "gauge",
        "Value of the last XID error encountered.",
        TABLE.index,
        np.asarray(nodes, dtype=np.int64),
        tuple(labels),
        np.vstack(rows),
        np.vstack(present),
    )
