"""Fault transforms of GPUs, NVLink and NVSwitch: each returns the changed arrays and its XIDs.

Signals appear where the field saw them: an NVLink fault first in the scheduler agent's async
task count and the node's interrupts; an ECC fault as hours of creeping remapped rows and HBM
temperature, then NFS GETATTR latency and page-outs; a bus fault as PCIe replays before the GPU
vanishes from the host. Magnitudes are subtle and noisy on purpose.
"""

from __future__ import annotations

import numpy as np

from peerwatch.simulate.fault_kit import Ctx, Down, Edit, Effect, poisson_steps, stall_node_host
from peerwatch.simulate.faults import Fault
from peerwatch.simulate.signals import Signals, Xid
from peerwatch.simulate.targets import EXPORTER_INDEX

DCGM = EXPORTER_INDEX["dcgm"]
GETATTR = 2
GPU_STATE = ("util", "tensor_active", "sm_active", "dram_active", "power", "temp", "mem_temp", "sm_clock", "fb_used")


def _dead_gpu(e: Edit, n: int, g: int, after: np.ndarray) -> None:
    """A GPU that stopped computing: no tensor work, no NVLink traffic, near-idle power."""
    e["tensor_active"][n, g, after] = 0.0
    e["sm_active"][n, g, after] = 0.0
    e["nvlink_bw"][n, g, after] = 0.0
    e["util"][n, g, after] = 0.0
    e["power"][n, g, after] = np.minimum(e["power"][n, g, after], 160.0)


def nvlink_xid(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Agent async tasks 44-50 -> ~869 minutes ahead, host interrupts and runnable processes fall, NVLink
    CRC errors grow, then XID 145/149."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    fail = float(f.failure_ts or f.end_ts)
    rise = c.ramp(f.onset_ts, f.onset_ts + 150.0)
    tasks = e["agent_tasks"]
    tasks[n] = np.rint(tasks[n] + (869.0 + c.rng.normal(0, 25.0, c.grid.steps) - tasks[n]) * rise)
    stall_node_host(e, n, c.window(f.onset_ts + 0.6 * (fail - f.onset_ts)), c)
    pre = c.window(f.onset_ts, fail)
    e["nvlink_crc"][n, g] += poisson_steps(c, 4.0 * c.ramp(f.onset_ts, fail) * pre)
    e["nvlink_replay"][n, g] += poisson_steps(c, 1.0 * c.ramp(f.onset_ts, fail) * pre)
    e["nvlink_bw"][n, g, pre] *= 0.8
    _dead_gpu(e, n, g, c.window(fail))
    return e.effect(xids=(Xid(n, g, fail, int(f.xid or 145)),))


def nvlink_no_xid(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """NVLink errors and a weaker link on one GPU; the node runs a little slower; no XID."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    on = c.window(f.onset_ts, f.end_ts)
    e["nvlink_crc"][n, g] += poisson_steps(c, 4.0 * on)
    e["nvlink_replay"][n, g] += poisson_steps(c, 1.0 * on)
    e["nvlink_recovery"][n, g] += poisson_steps(c, 0.05 * on)
    e["nvlink_bw"][n, g, on] *= c.rng.uniform(0.5, 0.7, int(on.sum()))
    e["tensor_active"][n, :, on] *= 0.96
    return e.effect()


def gpu_fallen_off_bus(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """PCIe replays, XID 79, then the GPU is gone: its series vanish, the node keeps reporting."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    fail = float(f.failure_ts or f.end_ts)
    pre = c.window(f.onset_ts, fail)
    e["pcie_replay"][n, g] += poisson_steps(c, 6.0 * c.ramp(f.onset_ts, fail) * pre)
    e["agent_tasks"][n, pre] += np.rint(20.0 * c.ramp(f.onset_ts, fail)[pre])
    e["gpu_present"][n, g, c.k(fail) + 2 :] = False  # dcgm shows the XID for a scrape or two first
    stall_node_host(e, n, c.window(fail), c)
    return e.effect(xids=(Xid(n, g, fail, 79),))


def gpu_card_drop(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """A GPU drops off the host with no XID and no warning."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    fail = float(f.failure_ts or f.end_ts)
    e["gpu_present"][n, g, c.k(fail) :] = False
    stall_node_host(e, n, c.window(fail), c)
    return e.effect()


def ecc_hbm(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Hours of creeping correctable remaps, SBEs and HBM temperature; NFS GETATTR latency and page-outs
    spike shortly before XID 94 and an uncorrectable remap."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    fail = float(f.failure_ts or f.end_ts)
    rise = c.ramp(f.onset_ts, fail)
    pre = c.window(f.onset_ts, fail)
    e["remap_corr"][n, g] += np.floor(rise * c.rng.uniform(8, 40))
    e["sbe"][n, g] += poisson_steps(c, (0.2 + 3.0 * rise**2) * pre)
    e["mem_temp"][n, g] += np.rint(rise * c.rng.uniform(3.0, 6.0))
    late = c.window(fail - float(c.rng.uniform(600, 1200)), fail + 300.0)
    cnt = int(late.sum())
    e["nfs_rtt"][n, :, GETATTR, late] *= c.rng.uniform(5.0, 15.0, cnt)[:, None]
    e["pgpgout"][n, late] *= c.rng.uniform(8.0, 15.0, cnt)
    e["pgmajfault"][n, late] *= 20.0
    k = c.k(fail)
    e["remap_uncorr"][n, g, k:] += 1.0
    e["dbe"][n, g, k] += 1.0
    _dead_gpu(e, n, g, c.window(fail))
    return e.effect(xids=(Xid(n, g, fail, int(f.xid or 94)),))


def ecc_slow_remap(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Correctable remapped rows grow by 1-6 an hour on average (Poisson arrivals, a row or two each) until
    the end, steadily or, in half the draws, accelerating from half that rate to one and a half times it;
    the HBM warms 1-4 C over the fault, SBEs grow too in half the draws; in a third the driver logs an
    informational XID (63: a remap recorded, 92: high SBE rate). Nothing fails: the field saw 254 rows
    accumulate over 55 days with no XID before the GPU vanished."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    on = c.window(f.onset_ts, f.end_ts)
    per_step = c.grid.step / 3600.0
    rate = float(c.rng.uniform(1.0, 6.0)) * per_step * on
    if c.rng.random() < 0.5:
        rate = rate * (0.5 + c.ramp(f.onset_ts, f.end_ts))
    arrivals = poisson_steps(c, rate)
    size = c.rng.choice([1.0, 1.0, 1.0, 2.0], c.grid.steps)
    e["remap_corr"][n, g] += np.cumsum(arrivals * size)
    e["mem_temp"][n, g] += np.rint(c.ramp(f.onset_ts, f.end_ts) * c.rng.uniform(1.0, 4.0))
    if c.rng.random() < 0.5:
        e["sbe"][n, g] += poisson_steps(c, float(c.rng.uniform(0.5, 4.0)) * per_step * on)
    later = np.flatnonzero(arrivals > 0)
    xids: tuple[Xid, ...] = ()
    if c.rng.random() < 1 / 3 and later.size:
        at = float(c.grid.times[later[int(c.rng.integers(later.size))]])
        xids = (Xid(n, g, at, int(c.rng.choice([63, 92]))),)
    return e.effect(xids=xids)


def gsp_timeout(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """NVML calls into the GPU's GSP block: the agent's stat tasks slow and pile up, dcgm scrapes time out,
    then XID 119 and the GPU's readings freeze."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    fail = float(f.failure_ts or f.end_ts)
    rise = c.ramp(f.onset_ts, fail)
    active = c.window(f.onset_ts)
    e["agent_stat_s"][n] *= 1.0 + 40.0 * rise
    e["agent_tasks"][n, active] += np.rint(c.rng.uniform(100, 250) * rise[active])
    k = c.k(fail)
    after = c.window(fail)
    for name in GPU_STATE:
        arr = e[name]
        arr[n, g, after] = arr[n, g, max(k - 1, 0)]  # the driver returns the last value it had
    downs = (Down(n, DCGM, c.k(f.onset_ts), k, every=0.3), Down(n, DCGM, k, None, every=0.7))
    return e.effect(xids=(Xid(n, g, fail, 119),), downs=downs)


def nvswitch(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """An NVSwitch fault touches every GPU of the node: NVLink errors on all 8, then XIDs on all 8."""
    e, n = Edit(sig), f.node_index
    fail = float(f.failure_ts or f.end_ts)
    pre = c.window(f.onset_ts, fail)
    rise = c.ramp(f.onset_ts, fail)
    gpus = sig["util"].shape[1]
    for g in range(gpus):
        e["nvlink_crc"][n, g] += poisson_steps(c, 2.0 * rise * pre)
        _dead_gpu(e, n, g, c.window(fail))
    e["nvlink_bw"][n, :, pre] *= 0.7
    stall_node_host(e, n, c.window(fail), c)
    code = int(f.xid or 145)
    return e.effect(xids=tuple(Xid(n, g, fail + 0.01 * g, code) for g in range(gpus)))


def pcie_downgrade(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """A busy GPU's link retrains to gen 3 x8, with bursts of replays."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    on = c.window(f.onset_ts, f.end_ts)
    gen = e["pcie_gen"]
    gen[n, g, on] = np.minimum(gen[n, g, on], 3.0)
    e["pcie_width"][n, g, on] = 8.0
    e["pcie_replay"][n, g] += poisson_steps(c, 3.0 * on)
    e["tensor_active"][n, g, on] *= 0.97
    return e.effect()


def thermal_throttle(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """The GPU heats to ~88 C, then its clock drops for a scrape or two every few minutes."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    on = c.window(f.onset_ts, f.end_ts)
    heat = c.ramp(f.onset_ts, f.onset_ts + 600.0) * on * c.rng.uniform(18.0, 24.0)
    e["temp"][n, g] += np.rint(heat)
    e["mem_temp"][n, g] += np.rint(0.7 * heat)
    drops = c.bursts(f.onset_ts + 600.0, f.end_ts, (180.0, 300.0), steps=2)
    cnt = int(drops.sum())
    e["sm_clock"][n, g, drops] = np.rint(c.rng.uniform(1100, 1400, cnt) / 15.0) * 15.0
    e["throttle"][n, g, drops] = 0x60  # SW + HW thermal slowdown
    e["thermal_viol"][n, g, drops] = c.grid.step * 1e9 * c.rng.uniform(0.3, 0.8, cnt)
    e["power"][n, g, drops] *= 0.7
    e["tensor_active"][n, g, drops] *= 0.7
    return e.effect()


def power_throttle(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Power brake: clock and power drop every few minutes, power-violation time grows."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    drops = c.bursts(f.onset_ts, f.end_ts, (120.0, 300.0))
    cnt = int(drops.sum())
    e["sm_clock"][n, g, drops] = np.rint(c.rng.uniform(900, 1200, cnt) / 15.0) * 15.0
    e["power"][n, g, drops] = c.rng.uniform(380, 480, cnt)
    e["throttle"][n, g, drops] = 0x84  # HW power brake + SW power cap
    e["power_viol"][n, g, drops] += c.grid.step * 1e9 * c.rng.uniform(0.4, 0.9, cnt)
    e["tensor_active"][n, g, drops] *= 0.6
    return e.effect()


def gpu_hang_cascade(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """One GPU hangs busy with no tensor work; the cluster-wide stall (planned) follows minutes later."""
    e, n, g = Edit(sig), f.node_index, f.gpu
    hung = c.window(f.onset_ts)
    cnt = int(hung.sum())
    e["util"][n, g, hung] = 100.0
    e["tensor_active"][n, g, hung] = 0.0
    e["sm_active"][n, g, hung] = c.rng.uniform(0.01, 0.03, cnt)
    e["dram_active"][n, g, hung] = 0.005
    e["nvlink_bw"][n, g, hung] = 0.0
    e["power"][n, g, hung] = c.rng.normal(310.0, 4.0, cnt)
    e["ib_rx"][n, :, hung] *= 0.3
    e["ib_tx"][n, :, hung] *= 0.3
    return e.effect()
