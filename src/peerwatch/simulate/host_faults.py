"""Fault transforms of hosts, InfiniBand, NFS, exporters and the scheduler agent."""

from __future__ import annotations

import numpy as np

from peerwatch.simulate.fault_kit import Ctx, Down, Edit, Effect, poisson_steps
from peerwatch.simulate.faults import Fault
from peerwatch.simulate.signals import Signals
from peerwatch.simulate.targets import EXPORTER_INDEX, BoolArray


def node_unreachable(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Blocked processes and I/O pressure build up; then the node stops answering every scrape."""
    e, n = Edit(sig), f.node_index
    fail = float(f.failure_ts or f.end_ts)
    rise = c.ramp(f.onset_ts, fail) * c.window(f.onset_ts, fail)
    e["procs_blocked"][n] += np.rint(rise * c.rng.uniform(10, 30))
    e["psi_io"][n] += 0.6 * rise
    e["load1"][n] += 25.0 * rise
    e["mem_avail"][n] -= 0.1 * c.layout.spec.hardware.mem_bytes * rise
    return e.effect(downs=(Down(n, None, c.k(fail)),))


def performance_degradation(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Every GPU of the node clocks ~12% lower with no throttle reason; the node does less work."""
    e, n = Edit(sig), f.node_index
    on = c.window(f.onset_ts, f.end_ts)
    busy = e["sm_clock"][n, :, on] > 1000
    e["sm_clock"][n, :, on] = np.where(
        busy, np.rint(e["sm_clock"][n, :, on] * 0.88 / 15.0) * 15.0, e["sm_clock"][n, :, on]
    )
    e["tensor_active"][n, :, on] *= 0.9
    e["power"][n, :, on] *= 0.92
    e["ib_rx"][n, :, on] *= 0.93
    e["ib_tx"][n, :, on] *= 0.93
    return e.effect()


def straggler(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """A stray host process starves the data loader: CPU and load up, the node's GPUs idle in gaps."""
    e, n = Edit(sig), f.node_index
    on = c.window(f.onset_ts, f.end_ts)
    rise = c.ramp(f.onset_ts, f.onset_ts + 120.0) * on
    cnt = int(on.sum())
    e["cpu_user"][n] += 0.35 * rise
    e["procs_running"][n] += np.rint(45.0 * rise)
    e["load1"][n] += 45.0 * rise
    e["ctxt"][n] *= 1.0 + 0.8 * rise
    gpus = e["util"].shape[1]
    e["tensor_active"][n, :, on] *= c.rng.uniform(0.75, 0.85, (cnt, gpus))
    e["util"][n, :, on] = np.clip(e["util"][n, :, on] - np.rint(c.rng.normal(8.0, 4.0, (cnt, gpus))), 0, 100)
    e["pcie_rx"][n, :, on] *= 0.7
    return e.effect()


def nic_dropout(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Symbol errors and link recoveries, then the IB port goes down and carries nothing."""
    e, n, p = Edit(sig), f.node_index, f.port
    fail = float(f.failure_ts or f.end_ts)
    pre = c.window(f.onset_ts, fail)
    rise = c.ramp(f.onset_ts, fail) * pre
    e["ib_symbol"][n, p] += poisson_steps(c, 20.0 * rise)
    e["ib_recovery"][n, p] += poisson_steps(c, 0.5 * rise)
    e["ib_rcv_err"][n, p] += poisson_steps(c, 5.0 * rise)
    after = c.window(fail)
    e["ib_downed"][n, p, c.k(f.onset_ts + 0.5 * (fail - f.onset_ts))] += 1.0  # it went down once and came back
    e["ib_downed"][n, p, c.k(fail)] += 1.0
    e["ib_state"][n, p, after] = 1.0  # DOWN
    e["ib_phys"][n, p, after] = 2.0  # Polling
    e["ib_rx"][n, p, after] = 0.0
    e["ib_tx"][n, p, after] = 0.0
    storage_over_ib(e, n, c.window(f.onset_ts), c)
    return e.effect()


def ib_port_down(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """An IB port goes down without warning and stays down (a cable pulled, a transceiver dead):
    state DOWN, physical state Disabled or Polling, no traffic."""
    e, n, p = Edit(sig), f.node_index, f.port
    fail = float(f.failure_ts or f.onset_ts)
    after = c.window(fail)
    e["ib_downed"][n, p, c.k(fail)] += 1.0
    e["ib_state"][n, p, after] = 1.0  # DOWN
    e["ib_phys"][n, p, after] = float(c.rng.choice([2.0, 3.0]))  # Polling or Disabled
    e["ib_rx"][n, p, after] = 0.0
    e["ib_tx"][n, p, after] = 0.0
    return e.effect()


def ib_link_flap(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """The port goes down and up every few minutes; most flaps fall between scrapes (state still ACTIVE)."""
    e, n, p = Edit(sig), f.node_index, f.port
    on = c.window(f.onset_ts, f.end_ts)
    flaps = c.bursts(f.onset_ts, f.end_ts, (180.0, 600.0))
    cnt = int(flaps.sum())
    e["ib_downed"][n, p, flaps] += 1.0
    e["ib_recovery"][n, p, flaps] += c.rng.integers(1, 4, cnt)
    e["ib_symbol"][n, p] += poisson_steps(c, 2.0 * on + 200.0 * flaps)
    e["ib_rcv_err"][n, p] += poisson_steps(c, 30.0 * flaps)
    seen = flaps & (c.rng.random(c.grid.steps) < 0.5)
    e["ib_state"][n, p, seen] = 1.0
    e["ib_phys"][n, p, seen] = 2.0
    e["ib_rx"][n, p, flaps] *= 0.1
    e["ib_tx"][n, p, flaps] *= 0.1
    after_flap = np.convolve(flaps, np.ones(max(1, round(240.0 / c.grid.step))), mode="full")[: c.grid.steps] > 0
    storage_over_ib(e, n, after_flap, c)
    return e.effect()


def ib_link_marginal(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """A marginal link (a dirty connector, a failing transceiver): symbol errors now and then, a
    link recovery every few minutes, traffic somewhat lower; the port stays ACTIVE."""
    e, n, p = Edit(sig), f.node_index, f.port
    on = c.window(f.onset_ts, f.end_ts)
    e["ib_symbol"][n, p] += poisson_steps(c, float(c.rng.uniform(0.2, 2.0)) * on)
    recoveries = c.bursts(f.onset_ts, f.end_ts, (120.0, 600.0))
    e["ib_recovery"][n, p, recoveries] += 1.0
    e["ib_rcv_err"][n, p] += poisson_steps(c, 0.3 * on)
    slower = float(c.rng.uniform(0.7, 0.95))
    e["ib_rx"][n, p, on] *= slower
    e["ib_tx"][n, p, on] *= slower
    storage_over_ib(e, n, on, c, share=0.9)
    return e.effect()


def storage_over_ib(e: Edit, n: int, on: BoolArray, c: Ctx, share: float = 0.65) -> None:
    """Where the node reaches its filers over the fabric (IPoIB, NFS over RDMA; ``share`` of runs):
    a bad IB port shows to the NFS client as slow round trips and retransmissions, the symptom far
    from the cause."""
    if c.rng.random() >= share:
        return
    e["nfs_rtt"][n, :, :, on] *= c.rng.uniform(2.0, 8.0)
    e["nfs_retrans"][n, on] = c.rng.uniform(0.5, 5.0, int(on.sum()))
    e["tcp_retrans"][n, on] *= c.rng.uniform(5.0, 40.0)


def nfs_client(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Requests wait in this client's own RPC queue (slots, CPU); server RTT is normal."""
    e, n, m = Edit(sig), f.node_index, f.mount
    on = c.window(f.onset_ts, f.end_ts)
    e["nfs_queue"][n, m, :, on] *= c.rng.uniform(30.0, 80.0)
    e["nfs_ops"][n, m, :, on] *= 0.7
    e["procs_blocked"][n, on] += 6.0
    e["psi_io"][n, on] += 0.3
    e["cpu_iowait"][n, on] += 0.02
    return e.effect()


def nfs_network(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """This node's path to the filers is lossy: long round trips, retransmissions, NIC errors."""
    e, n = Edit(sig), f.node_index
    on = c.window(f.onset_ts, f.end_ts)
    e["nfs_rtt"][n, :, :, on] *= c.rng.uniform(5.0, 15.0)
    e["nfs_retrans"][n, on] = c.rng.uniform(2.0, 10.0, int(on.sum()))
    e["tcp_retrans"][n, on] *= 50.0
    e["net_err"][n, 0] += poisson_steps(c, 3.0 * on)
    e["net_drop"][n, 0] += poisson_steps(c, 5.0 * on)
    timeouts = e["nfs_timeouts"]
    timeouts[n] += c.rng.poisson(0.02 * on, timeouts[n].shape)
    return e.effect()


def nfs_storage(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """The filer behind one mount is slow for everyone, far beyond a routine storage slowdown."""
    e, m = Edit(sig), f.mount
    on = c.window(f.onset_ts, f.end_ts)
    e["nfs_rtt"][:, m, :, on] *= c.rng.uniform(20.0, 40.0)
    timeouts = e["nfs_timeouts"]
    timeouts[:, m] += c.rng.poisson(0.05 * on, timeouts[:, m].shape)
    e["procs_blocked"][:, on] += 3.0
    return e.effect()


def exporter_down(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """The node's dcgm-exporter stops answering (``up`` = 0); everything else reports."""
    return Effect({}, downs=(Down(f.node_index, EXPORTER_INDEX["dcgm"], c.k(f.onset_ts), c.k(f.end_ts)),))


def memory_pressure(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Host memory runs low: available memory falls, page-outs, swap-outs and memory stalls rise."""
    e, n = Edit(sig), f.node_index
    on = c.window(f.onset_ts, f.end_ts)
    rise = c.ramp(f.onset_ts, f.onset_ts + 600.0) * on
    total = c.layout.spec.hardware.mem_bytes
    e["mem_avail"][n] = e["mem_avail"][n] * (1 - rise) + rise * total * c.rng.uniform(0.01, 0.03, c.grid.steps)
    e["mem_cached"][n] *= 1.0 - 0.8 * rise
    e["psi_mem"][n] += 0.3 * rise
    e["pgmajfault"][n] *= 1.0 + 100.0 * rise
    e["pswpout"][n] += 5000.0 * rise
    e["pgpgout"][n] += 200_000.0 * rise
    e["procs_blocked"][n] += np.rint(8.0 * rise)
    return e.effect()


def scheduler_agent(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """The agent itself is stuck: task backlog, its CPU at 100%, RSS growing; GPUs are fine."""
    e, n = Edit(sig), f.node_index
    on = c.window(f.onset_ts, f.end_ts)
    rise = c.ramp(f.onset_ts, f.onset_ts + 300.0) * on
    e["agent_tasks"][n] += np.rint(rise * c.rng.uniform(300, 700))
    e["agent_cpu"][n] = e["agent_cpu"][n] * (1 - rise) + rise * np.clip(c.rng.normal(99, 2, c.grid.steps), 90, 100)
    e["agent_rss"][n] += rise * 2e9
    e["agent_stat_s"][n] *= 1.0 + 60.0 * rise
    return e.effect()


FAIL_SLOW_SHARE = (0.04, 0.12)  # of the work each GPU does while computing
THERMAL_SLOWDOWN = (0x20, 0x40)  # SW or HW thermal slowdown
POWER_BRAKE = (0x80, 0x84)  # HW power brake, alone or with the SW power cap


def fail_slow_share(rng: np.random.Generator) -> float:
    """The fault's size: the first draw of its generator (tests read it back the same way)."""
    return float(rng.uniform(*FAIL_SLOW_SHARE))


def fail_slow(sig: Signals, f: Fault, c: Ctx) -> Effect:
    """Every GPU of the node does a few per cent less work for hours (utilisation, SM and tensor activity,
    power), its IB ports carry less by a similar share, no error counter moves. The variant (its
    expected diagnosis) adds the cause: clocks down with thermal bits and a hotter node, or with
    power-brake bits; plain has neither."""
    e, n = Edit(sig), f.node_index
    share = fail_slow_share(c.rng)
    on = c.window(f.onset_ts, f.end_ts)
    rise = c.ramp(f.onset_ts, f.onset_ts + float(c.rng.uniform(60.0, 900.0))) * on  # abrupt, or over minutes
    gpus, steps = e["util"].shape[1], c.grid.steps
    busy = e["util"][n] > 50.0  # computing; checkpoints and restarts look as they did
    cut = np.where(busy, share * c.rng.uniform(0.8, 1.2, (gpus, 1)) * rise, 0.0)  # same sign, not the same size
    e["util"][n] = np.clip(np.rint(e["util"][n] * (1.0 - cut)), 0, 100)
    for name in ("sm_active", "tensor_active", "dram_active", "nvlink_bw"):
        e[name][n] *= 1.0 - cut
    idle = c.layout.spec.hardware.gpu_idle_w
    e["power"][n] = idle + (e["power"][n] - idle) * (1.0 - cut)
    ib = share * float(c.rng.uniform(0.7, 1.1)) * rise
    e["ib_rx"][n] *= 1.0 - ib
    e["ib_tx"][n] *= 1.0 - ib
    cause = f.expected[0]
    if cause not in ("thermal_throttle", "power_throttle"):
        return e.effect()
    clock = e["sm_clock"][n]
    e["sm_clock"][n] = np.where(busy, np.rint(clock * (1.0 - cut * c.rng.uniform(0.6, 1.0)) / 15.0) * 15.0, clock)
    often = c.rng.uniform(0.1, 0.6)
    # Each GPU crosses its slowdown temperature on its own; a power brake is the node's, on all at once.
    draws = c.rng.random((gpus, steps) if cause == "thermal_throttle" else steps)
    reasons = busy & (rise > 0) & (draws < often)
    viol = c.grid.step * 1e9 * c.rng.uniform(0.1, 0.5, (gpus, steps))
    if cause == "thermal_throttle":
        heat = np.rint(rise * c.rng.uniform(4.0, 10.0))
        e["temp"][n] += heat
        e["mem_temp"][n] += np.rint(0.6 * heat)
        e["throttle"][n] = np.where(reasons, float(c.rng.choice(THERMAL_SLOWDOWN)), e["throttle"][n])
        e["thermal_viol"][n] += np.where(reasons, viol, 0.0)
    else:
        e["throttle"][n] = np.where(reasons, float(c.rng.choice(POWER_BRAKE)), e["throttle"][n])
        e["power_viol"][n] += np.where(reasons, viol, 0.0)
    return e.effect()
