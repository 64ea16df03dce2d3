"""The latent state of the cluster: named arrays that the exporters read and the faults transform.

Shapes (N nodes, G GPUs, P IB ports, M NFS mounts, O NFS operations, D disks, T steps):

- GPU ``(N, G, T)``: ``util`` %, ``sm_active``/``tensor_active``/``dram_active`` ratios, ``fb_used`` MiB,
  ``power`` W, ``temp``/``mem_temp`` C, ``sm_clock``/``mem_clock`` MHz, ``pcie_gen``, ``pcie_width``,
  ``pcie_tx``/``pcie_rx`` B/s, ``nvlink_bw`` (rate-like), per-step error increments ``pcie_replay``,
  ``nvlink_crc``, ``nvlink_replay``, ``nvlink_recovery``, ``sbe``, ``dbe``, levels ``remap_corr``,
  ``remap_uncorr``, ``remap_fail``, ``throttle`` (clock event reason bit mask), ``power_viol``/``thermal_viol``
  (ns per step), ``gpu_present`` (bool: the GPU is visible to the host).
- IB ``(N, P, T)``: ``ib_rx``/``ib_tx`` B/s, increments ``ib_downed``, ``ib_recovery``, ``ib_symbol``,
  ``ib_rcv_err``, ``ib_wait``; ``ib_state``, ``ib_phys``.
- Network ``(N, 3, T)`` for direct0, net0, lo: ``net_rx``/``net_tx`` B/s, ``net_err``, ``net_drop`` per step;
  ``veth_rx``/``veth_tx`` B/s and ``veth_drop`` per step ``(N, T)``.
- Host ``(N, T)``: CPU mode fractions ``cpu_user``, ``cpu_system``, ``cpu_iowait``, ``cpu_irq``, ``cpu_softirq``;
  ``procs_running``, ``procs_blocked``, ``load1``, ``intr`` /s, ``ctxt`` /s, ``psi_cpu``/``psi_io``/``psi_mem``
  s/s, ``mem_avail``/``mem_cached``/``mem_dirty`` bytes, ``pgpgin``/``pgpgout``/``pgmajfault``/``pswpout`` /s,
  ``tcp_in``/``tcp_out``/``tcp_retrans`` /s, ``timex_offset`` s, ``agent_tasks``, ``agent_cpu``, ``agent_rss``,
  ``agent_stat_s`` (seconds per stat task), ``nfs_retrans`` /s.
- NFS ``(N, M, O, T)``: ``nfs_ops`` /s, ``nfs_queue``/``nfs_rtt``/``nfs_exec`` seconds per op, ``nfs_timeouts``
  per step; ``(N, M, T)``: ``nfs_read_b``/``nfs_write_b`` B/s.
- Disk ``(N, D, T)``: ``disk_rb``/``disk_wb`` B/s, ``disk_r``/``disk_w`` ops/s, ``disk_busy`` s/s.
- Resets ``(N, T)`` bool: ``agent_reset`` (agent restart), ``(N, M, T)`` ``mount_reset`` (remount).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

AnyArray = npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class Xid:
    """An XID the driver logged: dcgm-exporter shows it as the last XID of that GPU from ``ts`` on."""

    node: int
    gpu: int
    ts: float
    code: int


@dataclass(frozen=True, slots=True)
class Signals:
    """Named latent arrays; never changed in place: :meth:`replace` returns a new set."""

    arrays: Mapping[str, AnyArray]
    xids: tuple[Xid, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> AnyArray:
        try:
            return self.arrays[name]
        except KeyError:
            raise KeyError(f"no latent signal {name!r}; known: {', '.join(sorted(self.arrays))}") from None

    def replace(self, changes: Mapping[str, AnyArray], xids: tuple[Xid, ...] = ()) -> Signals:
        """A new set with ``changes`` swapped in (shapes must match) and ``xids`` appended."""
        for name, arr in changes.items():
            old = self[name]
            if arr.shape != old.shape:
                raise ValueError(f"signal {name!r}: shape {arr.shape} does not match {old.shape}")
        merged = {**self.arrays, **changes}
        return Signals(MappingProxyType(merged), self.xids + xids, self.extra)


def ema(
    x: npt.NDArray[np.float64], alpha: float, init: npt.NDArray[np.float64] | None = None
) -> npt.NDArray[np.float64]:
    """Exponential smoothing along the last axis (thermal lag, load averages); vectorised over entities."""
    out = np.empty_like(x)
    acc = x[..., 0].copy() if init is None else init.copy()
    for k in range(x.shape[-1]):  # a loop over steps, never over entities
        acc += alpha * (x[..., k] - acc)
        out[..., k] = acc
    return out
