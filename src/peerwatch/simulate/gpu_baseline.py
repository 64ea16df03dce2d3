"""Healthy GPU signals of every node: utilisation with the shared step rhythm, power, heat, clocks, links.

All arrays are (nodes, GPUs, steps). The training step rhythm is evaluated at each node's own
dcgm-exporter scrape times, so peers look alike without sharing timestamps. Per-GPU offsets (a
few hot GPUs, power scale) are fixed per layout: they are how the hardware is, not faults.
"""

from __future__ import annotations

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.simulate.cluster import Layout
from peerwatch.simulate.phases import Activity, Phase
from peerwatch.simulate.profiles import mixed
from peerwatch.simulate.signals import AnyArray, ema
from peerwatch.simulate.targets import Grid

STEP_PERIOD_S = 7.9  # one training step; all ranks share it
COMPUTE_SHARE = 0.8  # part of a step spent in compute kernels, the rest in collectives
THERMAL_TAU_S = 90.0
HEALTHY_REPLAYS_PER_DAY = 1 / 30  # a single isolated PCIe replay about once a month per GPU
THROTTLE_POWER_CAP = 0x4
THROTTLE_IDLE = 0x1


def gpu_signals(layout: Layout, grid: Grid, act: Activity, dcgm_times: FloatArray, seed: int) -> dict[str, AnyArray]:
    """The healthy GPU arrays; ``dcgm_times`` (N, T) are the dcgm-exporter scrape times."""
    rng = np.random.default_rng([seed, 5])
    hw = layout.spec.hardware
    n, g, t = layout.n, hw.gpus, grid.steps
    ph = act.phase[:, None, :].repeat(g, axis=1)  # (N, G, T)
    load = None if act.load is None else act.load[:, None, :]

    def col(name: str) -> FloatArray:
        return mixed(name, ph, load)

    def noise(sd: float) -> FloatArray:
        return rng.normal(0.0, sd, (n, g, t))

    # Step rhythm: tensor activity is high in the compute part of the step, low in collectives.
    pos = np.mod(dcgm_times, STEP_PERIOD_S) / STEP_PERIOD_S
    rhythm = np.where(pos < COMPUTE_SHARE, 1.12, 0.55)[:, None, :]
    compute = ph == Phase.COMPUTE
    tensor = col("tensor") * np.where(compute, rhythm, 1.0) * (1 + noise(0.04))
    util = col("util") + noise(1.5) * (col("busy") > 0) - np.where(compute, 2.0 * (1.12 - rhythm), 0.0)
    busy = col("busy") > 0
    power_frac = col("power") * np.where(compute, 0.9 + 0.1 * rhythm, 1.0) * (1 + noise(0.02))
    power = (hw.gpu_idle_w + (hw.gpu_tdp_w - hw.gpu_idle_w) * power_frac) * layout.gpu_power_scale[:, :, None]
    power += noise(3.0)
    alpha = 1.0 - np.exp(-grid.step / THERMAL_TAU_S)
    off = layout.gpu_temp_offset[:, :, None]
    temp = ema(27.0 + 0.046 * power + off, alpha) + noise(0.4)
    mem_temp = ema(30.0 + 0.040 * power + 0.6 * off, alpha) + noise(0.4)
    sm_clock = np.where(busy, hw.sm_clock_max - 220.0 * np.clip(power_frac - 0.6, 0.0, None) + noise(8.0), 345.0)
    # Idle GPUs drop to PCIe gen 1 after a little while; this is power saving, not a downgrade.
    idle_long = ema((~busy).astype(np.float64), 0.6) > 0.8
    fb_rank = 1 + rng.normal(0.0, 0.006, (n, g, int(act.epoch.max()) + 1))  # per-rank memory differs a little
    fb = col("fb") * hw.fb_total_mib * np.take_along_axis(fb_rank, np.broadcast_to(act.epoch, (n, g, t)), axis=2)
    replay_p = HEALTHY_REPLAYS_PER_DAY * grid.step / 86_400.0
    throttle = np.where(busy, 0, THROTTLE_IDLE).astype(np.float64)
    capped = busy & (power_frac > 0.8) & (rng.random((n, g, t)) < 0.03)  # brief power-cap moments everywhere
    throttle[capped] = THROTTLE_POWER_CAP
    zeros = np.zeros((n, g, t))
    return {
        "util": np.clip(np.rint(util), 0, 100),
        "tensor_active": np.clip(tensor, 0, 1),
        "sm_active": np.clip(col("sm") * (1 + noise(0.02)), 0, 1),
        "dram_active": np.clip(col("dram") * np.where(compute, rhythm, 1.0) * (1 + noise(0.04)), 0, 1),
        "fb_used": np.rint(np.clip(fb + noise(8.0), 0, hw.fb_total_mib)),
        "power": np.clip(power, 60.0, hw.gpu_tdp_w),
        "temp": np.rint(temp),
        "mem_temp": np.rint(mem_temp),
        "sm_clock": np.rint(sm_clock / 15.0) * 15.0,
        "mem_clock": np.full((n, g, t), hw.mem_clock),
        "pcie_gen": np.where(idle_long, 1.0, float(hw.pcie_gen_max)),
        "pcie_width": np.full((n, g, t), float(hw.pcie_width)),
        "pcie_rx": np.clip(col("pcie_rx") * 1e9 * (1 + noise(0.08)), 0, None),
        "pcie_tx": np.clip(col("pcie_tx") * 1e9 * (1 + noise(0.08)), 0, None),
        "nvlink_bw": np.clip(col("nvlink") * 1e3 * np.where(compute, 2.0 - rhythm, 1.0) * (1 + noise(0.05)), 0, None),
        "pcie_replay": (rng.random((n, g, t)) < replay_p).astype(np.float64),
        "nvlink_crc": zeros,
        "nvlink_replay": zeros,
        "nvlink_recovery": zeros,
        "sbe": zeros,
        "dbe": zeros,
        "remap_corr": np.broadcast_to(layout.old_remap[:, :, None], (n, g, t)).copy(),
        "remap_uncorr": zeros,
        "remap_fail": zeros,
        "throttle": throttle,
        "power_viol": np.where(capped, grid.step * 1e9 * rng.uniform(0.02, 0.2, (n, g, t)), 0.0),
        "thermal_viol": zeros,
        "gpu_present": np.ones((n, g, t), dtype=bool),
    }
