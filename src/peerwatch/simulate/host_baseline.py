"""Healthy host signals: CPU, memory, kernel, InfiniBand, NICs, NFS, disks and the scheduler agent.

NFS traffic drives the storage NIC (``direct0`` carries what the mounts read and write), so the
recording stays self-consistent. Storage-side slowdowns raise every node's NFS round-trip time at
once; agent restarts and remounts set the reset masks that the counter families honour.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.simulate.cluster import NFS_MOUNTS, NFS_OPS, Layout
from peerwatch.simulate.count_noise import apply_count_noise
from peerwatch.simulate.events import Event
from peerwatch.simulate.phases import Activity, Phase
from peerwatch.simulate.profiles import mixed
from peerwatch.simulate.signals import AnyArray, ema
from peerwatch.simulate.targets import Grid

MIB = 1024.0 * 1024.0
# Per operation on /data: (share of GETATTR rate or of READ rate, base RTT s, base queue s)
NFS_RTT = np.array([0.004, 0.006, 0.0080, 0.002, 0.003, 0.004])  # READ WRITE GETATTR ACCESS LOOKUP OPEN
NFS_QUEUE = np.array([0.0004, 0.0004, 0.0015, 0.0002, 0.0003, 0.0004])
HOME_OPS = np.array([0.5, 0.2, 3.0, 1.0, 1.0, 0.1])  # /home is light and steady
HEALTHY_IB_RECOVERY_PER_DAY = 1 / 20  # an isolated link recovery now and then, harmless


def host_signals(layout: Layout, grid: Grid, act: Activity, events: Sequence[Event], seed: int) -> dict[str, AnyArray]:
    """The healthy host arrays (see :mod:`peerwatch.simulate.signals` for names and shapes)."""
    rng = np.random.default_rng([seed, 6])
    hw = layout.spec.hardware
    n, t = layout.n, grid.steps
    ph = act.phase

    def col(name: str) -> FloatArray:
        return mixed(name, ph, act.load)

    def jit(sd: float, shape: tuple[int, ...] = (n, t)) -> FloatArray:
        return 1.0 + rng.normal(0.0, sd, shape)

    procs = np.clip(col("procs") * jit(0.15) + rng.normal(0, 1.0, (n, t)), 0, None)
    blocked = np.clip(col("blocked") * jit(0.3), 0, None)
    alpha1 = 1.0 - np.exp(-grid.step / 60.0)
    out: dict[str, AnyArray] = {
        "cpu_user": col("cpu_user") * jit(0.06),
        "cpu_system": col("cpu_system") * jit(0.06),
        "cpu_iowait": col("cpu_iowait") * jit(0.2),
        "cpu_irq": 0.002 * col("intr") / 10.0 * jit(0.05),
        "cpu_softirq": 0.008 * col("intr") / 10.0 * jit(0.05),
        "procs_running": np.rint(procs),
        "procs_blocked": np.rint(blocked),
        "load1": ema(procs + blocked, alpha1),
        "intr": col("intr") * 1e3 * jit(0.03),
        "ctxt": col("ctxt") * 1e3 * jit(0.04),
        "psi_cpu": 0.02 * col("cpu_user") / 0.18 * jit(0.2),
        "psi_io": col("psi_io") * jit(0.2),
        "psi_mem": np.zeros((n, t)),
        "mem_avail": hw.mem_bytes * (0.66 - 0.04 * (ph != Phase.IDLE)) * jit(0.003),
        "mem_cached": hw.mem_bytes * 0.22 * jit(0.004),
        "mem_dirty": col("dirty_gb") * 2**30 * jit(0.1),
        "pgpgin": 16_000.0 * col("nfs_read") / 16.0 * jit(0.1) + 50.0,
        "pgpgout": col("pgpgout") * jit(0.1),
        "pgmajfault": 4.0 * jit(0.3),
        "pswpout": np.zeros((n, t)),
        "tcp_in": 3000.0 * jit(0.05) * (1 + col("nfs_write") / 40.0),
        "tcp_out": 3000.0 * jit(0.05) * (1 + col("nfs_write") / 40.0),
        "tcp_retrans": np.abs(rng.normal(0.3, 0.15, (n, t))),
        "timex_offset": np.cumsum(rng.normal(0.0, 2e-7, (n, t)), axis=1) + rng.normal(0, 5e-6, (n, 1)),
        "agent_tasks": rng.integers(44, 51, (n, t)).astype(np.float64),  # the field's normal 44-50
        "agent_cpu": np.clip(rng.normal(3.0, 0.6, (n, t)), 0.2, None),
        "agent_rss": 420e6 + np.cumsum(np.abs(rng.normal(0, 2e4, (n, t))), axis=1),
        "agent_stat_s": 0.05 * jit(0.1),
        "nfs_retrans": np.zeros((n, t)),
        "agent_reset": np.zeros((n, t), dtype=bool),
    }
    out.update(_ib(layout, grid, col("ib"), rng))
    out.update(_nfs(layout, grid, ph, act.load, events, rng))
    apply_count_noise(out, grid, events, seed, "nfs")
    out.update(_net_disk(layout, grid, act, out["nfs_read_b"], out["nfs_write_b"], rng))
    apply_count_noise(out, grid, events, seed, "net")
    for ev in events:
        k = min(grid.index(ev.start_ts), t - 1)
        if ev.kind == "agent_restart" and ev.node is not None:
            out["agent_reset"][layout.index(ev.node), k] = True
        elif ev.kind == "remount" and ev.node is not None:
            out["mount_reset"][layout.index(ev.node), 0, k] = True
    return out


def _ib(layout: Layout, grid: Grid, ib_gb: FloatArray, rng: np.random.Generator) -> dict[str, AnyArray]:
    n, t, p = layout.n, grid.steps, layout.spec.hardware.ib_ports
    traffic = ib_gb[:, None, :] * 1e9 * (1 + rng.normal(0, 0.05, (n, p, t))) + 2e4
    rec_p = HEALTHY_IB_RECOVERY_PER_DAY * grid.step / 86_400.0
    return {
        "ib_rx": traffic,
        "ib_tx": traffic * (1 + rng.normal(0, 0.01, (n, p, t))),
        "ib_downed": np.zeros((n, p, t)),
        "ib_recovery": (rng.random((n, p, t)) < rec_p).astype(np.float64),
        "ib_symbol": (rng.random((n, p, t)) < rec_p * 3).astype(np.float64),
        "ib_rcv_err": np.zeros((n, p, t)),
        "ib_wait": np.rint(traffic / 1e9 * 4e4 * rng.uniform(0.5, 1.5, (n, p, t)) * grid.step),
        "ib_state": np.full((n, p, t), 4.0),  # ACTIVE
        "ib_phys": np.full((n, p, t), 5.0),  # LinkUp
    }


def _nfs(
    layout: Layout,
    grid: Grid,
    ph: np.ndarray,
    load: FloatArray | None,
    events: Sequence[Event],
    rng: np.random.Generator,
) -> dict[str, AnyArray]:
    n, t, m, o = layout.n, grid.steps, len(NFS_MOUNTS), len(NFS_OPS)
    read, write, getattr_ = mixed("nfs_read", ph, load), mixed("nfs_write", ph, load), mixed("getattr", ph, load)
    data_ops = np.stack([read, write, getattr_, 0.1 * getattr_, 0.15 * getattr_, 0.02 * read + 0.05], axis=1)
    home_ops = np.broadcast_to(HOME_OPS[None, :, None], (n, o, t))
    ops = np.stack([data_ops, home_ops], axis=1) * np.clip(1 + rng.normal(0, 0.1, (n, m, o, t)), 0.3, None)
    rtt = NFS_RTT[None, None, :, None] * np.clip(1 + rng.normal(0, 0.08, (n, m, o, t)), 0.5, None)
    queue = np.broadcast_to(NFS_QUEUE[None, None, :, None], (n, m, o, t)).copy()
    queue[:, 0, 1, :] = mixed("write_queue", ph, load)  # checkpoint WRITEs queue on the client (93% of latency)
    queue *= np.clip(1 + rng.normal(0, 0.15, (n, m, o, t)), 0.3, None)
    for ev in events:
        if ev.kind == "storage_slowdown":  # server side: every node's RTT rises together
            on = (grid.times >= ev.start_ts) & (grid.times < ev.end_ts)
            rtt[..., on] *= rng.uniform(3.0, 5.0)
    return {
        "nfs_ops": ops,
        "nfs_rtt": rtt,
        "nfs_queue": queue,
        "nfs_exec": queue + rtt + 0.0002,
        "nfs_timeouts": np.zeros((n, m, o, t)),
        "nfs_read_b": ops[:, :, 0, :] * MIB,
        "nfs_write_b": ops[:, :, 1, :] * MIB,
        "mount_reset": np.zeros((n, m, t), dtype=bool),
    }


def _net_disk(
    layout: Layout, grid: Grid, act: Activity, nfs_rb: FloatArray, nfs_wb: FloatArray, rng: np.random.Generator
) -> dict[str, AnyArray]:
    n, t = layout.n, grid.steps
    j = np.clip(1 + rng.normal(0, 0.05, (n, 3, t)), 0.5, None)
    rx = np.stack([nfs_rb.sum(axis=1) * 1.03 + 2e5, np.full((n, t), 4.0e4), np.full((n, t), 1.0e6)], axis=1) * j
    tx = np.stack([nfs_wb.sum(axis=1) * 1.03 + 1e5, np.full((n, t), 2.5e4), np.full((n, t), 1.0e6)], axis=1) * j
    tx[:, 2] = rx[:, 2]  # loopback sends what it receives
    busy = act.container.astype(np.float64)
    drops = (rng.random((n, 3, t)) < 0.002).astype(np.float64)  # the odd dropped packet on any NIC
    local = np.where(act.phase == Phase.IDLE, 0.05, 1.0)
    return {
        "net_rx": rx,
        "net_tx": tx,
        "net_err": np.zeros((n, 3, t)),
        "net_drop": drops,
        "veth_drop": np.zeros((n, t)),  # container interfaces drop nothing unless count_noise says so
        "veth_rx": busy * 2.0e5 * (1 + rng.normal(0, 0.1, (n, t))),
        "veth_tx": busy * 1.5e5 * (1 + rng.normal(0, 0.1, (n, t))),
        "disk_rb": (local * 5e6)[:, None, :] * np.clip(1 + rng.normal(0, 0.2, (n, 2, t)), 0, None),
        "disk_wb": (local * 2e6)[:, None, :] * np.clip(1 + rng.normal(0, 0.2, (n, 2, t)), 0, None),
        "disk_r": (local * 80.0)[:, None, :] * np.clip(1 + rng.normal(0, 0.2, (n, 2, t)), 0, None),
        "disk_w": (local * 40.0)[:, None, :] * np.clip(1 + rng.normal(0, 0.2, (n, 2, t)), 0, None),
        "disk_busy": (local * 0.02)[:, None, :] * np.clip(1 + rng.normal(0, 0.2, (n, 2, t)), 0, None),
    }
