"""The fault library: kind name -> transform, and :func:`inject`, which applies planned faults in turn."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from peerwatch.simulate import gpu_faults, host_faults
from peerwatch.simulate.fault_kit import Ctx, Down, Transform
from peerwatch.simulate.faults import KINDS, Fault
from peerwatch.simulate.signals import Signals

TRANSFORMS: dict[str, Transform] = {
    "nvlink_xid": gpu_faults.nvlink_xid,
    "nvlink_no_xid": gpu_faults.nvlink_no_xid,
    "gpu_fallen_off_bus": gpu_faults.gpu_fallen_off_bus,
    "gpu_card_drop": gpu_faults.gpu_card_drop,
    "ecc_hbm": gpu_faults.ecc_hbm,
    "ecc_slow_remap": gpu_faults.ecc_slow_remap,
    "gsp_timeout": gpu_faults.gsp_timeout,
    "nvswitch": gpu_faults.nvswitch,
    "pcie_downgrade": gpu_faults.pcie_downgrade,
    "thermal_throttle": gpu_faults.thermal_throttle,
    "power_throttle": gpu_faults.power_throttle,
    "gpu_hang_cascade": gpu_faults.gpu_hang_cascade,
    "node_unreachable": host_faults.node_unreachable,
    "performance_degradation": host_faults.performance_degradation,
    "straggler": host_faults.straggler,
    "nic_dropout": host_faults.nic_dropout,
    "ib_link_flap": host_faults.ib_link_flap,
    "nfs_client": host_faults.nfs_client,
    "nfs_network": host_faults.nfs_network,
    "nfs_storage": host_faults.nfs_storage,
    "exporter_down": host_faults.exporter_down,
    "memory_pressure": host_faults.memory_pressure,
    "scheduler_agent": host_faults.scheduler_agent,
    "ib_port_down": host_faults.ib_port_down,
    "ib_link_marginal": host_faults.ib_link_marginal,
    "fail_slow": host_faults.fail_slow,
}
if set(TRANSFORMS) != set(KINDS):  # the table and the transforms must name the same kinds
    raise RuntimeError(f"fault kinds without transform or row: {sorted(set(TRANSFORMS) ^ set(KINDS))}")


def inject(sig: Signals, faults: Sequence[Fault], ctx_of: Ctx, seed: int) -> tuple[Signals, tuple[Down, ...]]:
    """Apply every fault's transform in order; each fault draws from its own generator (seed, index),
    so adding a fault never changes the noise of another."""
    downs: list[Down] = []
    for i, fault in enumerate(faults):
        ctx = Ctx(ctx_of.grid, ctx_of.layout, np.random.default_rng([seed, 100, i]))
        effect = TRANSFORMS[fault.kind](sig, fault, ctx)
        sig = sig.replace(effect.changes, effect.xids)
        downs.extend(effect.downs)
    return sig, tuple(downs)
