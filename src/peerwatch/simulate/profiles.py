"""Typical values per phase for a DGX B200 node: the one table the healthy baseline is drawn from.

Columns are looked up per node and step with ``column(name)[phase]``; noise, per-GPU offsets and
thermal lag are added by the baseline builders. Figures follow the reference cluster where it
reported them: ~300K interrupts per 30 s on a training node, ~1.5 TB/day on the storage NIC, NFS
GETATTR ~10 ms, checkpoint WRITE latency mostly client-side queue time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.simulate.phases import Phase


@dataclass(frozen=True, slots=True)
class Profile:
    """Typical values of one phase (rates per second unless named otherwise)."""

    util: float  # GPU utilisation %
    tensor: float  # tensor pipe active ratio
    sm: float  # SM active ratio
    dram: float  # DRAM active ratio
    power: float  # fraction of (TDP - idle) drawn above idle
    fb: float  # fraction of framebuffer used
    pcie_rx: float  # GB/s host to device
    pcie_tx: float  # GB/s device to host
    nvlink: float  # GB/s, rate-like NVLink bandwidth counter
    busy: float  # 1 = GPU active (full PCIe generation), 0 = idle
    ib: float  # GB/s per InfiniBand port, each way
    cpu_user: float  # fraction of all CPUs
    cpu_system: float
    cpu_iowait: float
    procs: float  # runnable processes
    blocked: float  # processes in D state
    intr: float  # thousands of interrupts per second
    ctxt: float  # thousands of context switches per second
    nfs_read: float  # READ ops/s on /data (1 MiB each)
    nfs_write: float  # WRITE ops/s on /data (1 MiB each)
    getattr: float  # GETATTR ops/s on /data
    write_queue: float  # client-side queue seconds per WRITE
    pgpgout: float  # KiB/s paged out
    dirty_gb: float  # dirty page cache
    psi_io: float  # seconds stalled on I/O per second


_P = Profile
PROFILES: dict[Phase, Profile] = {
    Phase.COMPUTE: _P(
        98,
        0.50,
        0.90,
        0.45,
        0.78,
        0.87,
        2.0,
        0.4,
        220,
        1,
        18,
        0.18,
        0.04,
        0.003,
        22,
        0.3,
        10.0,
        60,
        16,
        0.2,
        40,
        0.0004,
        3000,
        0.05,
        0.01,
    ),
    Phase.CHECKPOINT: _P(
        15,
        0.01,
        0.10,
        0.05,
        0.18,
        0.87,
        0.2,
        6.0,
        5,
        1,
        0.5,
        0.06,
        0.08,
        0.04,
        8,
        10,
        14.0,
        90,
        2,
        110,
        90,
        0.35,
        120000,
        6.0,
        0.4,
    ),
    Phase.EVAL: _P(
        85,
        0.25,
        0.70,
        0.35,
        0.50,
        0.88,
        3.0,
        0.3,
        60,
        1,
        4,
        0.22,
        0.04,
        0.004,
        26,
        0.5,
        9.0,
        55,
        40,
        0.2,
        60,
        0.0004,
        3000,
        0.05,
        0.02,
    ),
    Phase.IDLE: _P(
        0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.003,
        0.001,
        0.001,
        0,
        0,
        0.0001,
        0.004,
        0.003,
        0.0005,
        1.5,
        0.05,
        2.5,
        8,
        0.1,
        0.05,
        2,
        0.0003,
        200,
        0.01,
        0.001,
    ),
    Phase.LOADING: _P(
        20,
        0.02,
        0.15,
        0.10,
        0.15,
        0.50,
        8.0,
        0.2,
        20,
        1,
        2,
        0.25,
        0.06,
        0.02,
        30,
        4,
        12.0,
        70,
        180,
        0.5,
        150,
        0.002,
        8000,
        0.2,
        0.2,
    ),
    Phase.STALL: _P(
        100,
        0.0,
        0.04,
        0.01,
        0.20,
        0.87,
        0.01,
        0.01,
        0.5,
        1,
        0.01,
        0.09,
        0.02,
        0.001,
        9,
        0.2,
        6.0,
        30,
        0.5,
        0.1,
        10,
        0.0003,
        500,
        0.02,
        0.002,
    ),
    Phase.LIGHT: _P(
        45,
        0.12,
        0.40,
        0.20,
        0.30,
        0.30,
        0.8,
        0.2,
        5,
        1,
        0.3,
        0.06,
        0.02,
        0.001,
        8,
        0.2,
        6.0,
        25,
        3,
        0.1,
        15,
        0.0004,
        1000,
        0.03,
        0.005,
    ),
}


def column(name: str) -> FloatArray:
    """One profile field as an array indexed by phase code."""
    if name not in {f.name for f in fields(Profile)}:
        raise KeyError(f"no profile column {name!r}")
    return np.array([getattr(PROFILES[Phase(i)], name) for i in range(len(Phase))], dtype=np.float64)


def mixed(name: str, phase: np.ndarray, load: FloatArray | None) -> FloatArray:
    """``column(name)[phase]``, except on side work (phase LIGHT with a known ``load``, broadcast
    against ``phase``): between the idle and the compute profile by that share of full load."""
    col = column(name)
    out: FloatArray = col[phase]
    if load is None:
        return out
    between = col[Phase.IDLE] + load * (col[Phase.COMPUTE] - col[Phase.IDLE])
    out = np.where((phase == Phase.LIGHT) & ~np.isnan(load), between, out)
    return out
