"""The fault library as data: each kind's diagnoses, component, timing, mix weight and where it shows.

A :class:`Fault` is the label of one injected fault (GUIDE 3.2). :func:`plan_faults` turns
requests ("an ECC fault somewhere, about half-way") into concrete faults and into the cluster-wide
consequences of hard failures: the job stalls a little after the failure, restarts after the NCCL
timeout, and a spare takes the failed node's place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from peerwatch.simulate.cluster import NFS_MOUNTS, Layout
from peerwatch.simulate.events import Event
from peerwatch.simulate.phases import Membership
from peerwatch.simulate.targets import Grid

MIN = 60.0
HOUR = 3600.0
NCCL_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class FaultKind:
    """One row of the library. ``precursor``: seconds from first sign to failure (hard faults) or
    from onset to the cluster stall (cascade); ``duration``: length of a degradation."""

    name: str
    expected: tuple[str, ...]
    component: str  # gpu | nvswitch | ib | nfs | node | cluster_nfs
    hard: bool
    stalls: bool  # a hard failure stops the synchronous job
    precursor: tuple[float, float]
    duration: tuple[float, float]
    weight: float  # share in the reference cluster's / ByteDance's observed mix, per cent
    xids: tuple[int, ...]
    signals: tuple[str, ...]  # metric families where the signal must show (tests check them)
    note: str


_K = FaultKind
KINDS: dict[str, FaultKind] = {
    k.name: k
    for k in (
        _K(
            "nvlink_xid",
            ("nvlink",),
            "gpu",
            True,
            True,
            (8 * MIN, 25 * MIN),
            (0, 0),
            23.5,
            (145, 149),
            ("backendai_async_task_count", "node_intr_total", "DCGM_FI_DEV_XID_ERRORS"),
            "agent async tasks 44-50 -> ~869, interrupts and runnable processes fall, then NVLink XID",
        ),
        _K(
            "gpu_fallen_off_bus",
            ("gpu_fallen_off_bus",),
            "gpu",
            True,
            True,
            (1 * MIN, 5 * MIN),
            (0, 0),
            11.8,
            (79,),
            ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL"),
            "PCIe replays, XID 79, then the GPU's series vanish while the node keeps reporting",
        ),
        _K(
            "ecc_hbm",
            ("ecc_hbm",),
            "gpu",
            True,
            True,
            (2 * HOUR, 5 * HOUR),
            (0, 0),
            11.8,
            (94,),
            (
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
                "node_mountstats_nfs_operations_response_time_seconds_total",
                "node_vmstat_pgpgout",
                "DCGM_FI_DEV_XID_ERRORS",
            ),
            "remapped rows and HBM temperature creep for hours; NFS GETATTR latency and page-outs spike; XID 94",
        ),
        _K(
            "gsp_timeout",
            ("gsp_timeout",),
            "gpu",
            True,
            True,
            (2 * MIN, 6 * MIN),
            (0, 0),
            5.9,
            (119,),
            ("backendai_async_task_count", "up", "DCGM_FI_DEV_XID_ERRORS"),
            "NVML calls block: agent stat tasks slow, dcgm scrapes fail, XID 119, the GPU's values freeze",
        ),
        _K(
            "nvlink_no_xid",
            ("nvlink",),
            "gpu",
            False,
            False,
            (0, 0),
            (30 * MIN, 90 * MIN),
            5.9,
            (),
            ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"),
            "NVLink CRC/replay errors and lower NVLink bandwidth on one GPU, no XID",
        ),
        _K(
            "node_unreachable",
            ("node_unreachable", "exporter_down"),
            "node",
            True,
            True,
            (5 * MIN, 15 * MIN),
            (0, 0),
            11.8,
            (),
            ("node_procs_blocked", "up"),
            "blocked processes and I/O pressure build up, then every exporter of the node stops",
        ),
        _K(
            "performance_degradation",
            ("performance_degradation",),
            "node",
            False,
            False,
            (0, 0),
            (40 * MIN, 2 * HOUR),
            5.9,
            (),
            ("DCGM_FI_DEV_SM_CLOCK",),
            "all GPUs of the node clock ~12% lower with no throttle reason; the node does less work",
        ),
        _K(
            "gpu_card_drop",
            ("gpu_fallen_off_bus",),
            "gpu",
            True,
            True,
            (0, 0),
            (0, 0),
            3.0,
            (),
            ("DCGM_FI_DEV_GPU_UTIL",),
            "a GPU disappears from the host without an XID",
        ),
        _K(
            "pcie_downgrade",
            ("pcie_downgrade",),
            "gpu",
            False,
            False,
            (0, 0),
            (30 * MIN, 2 * HOUR),
            4.0,
            (),
            ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "all_smi_gpu_pcie_gen_current"),
            "a busy GPU's link trains down to gen 3 x8 with bursts of replays",
        ),
        _K(
            "nic_dropout",
            ("nic_dropout", "ib_link"),
            "ib",
            True,
            True,
            (1 * MIN, 5 * MIN),
            (0, 0),
            4.0,
            (),
            ("node_infiniband_state_id", "node_infiniband_link_downed_total"),
            "symbol errors and recoveries, then one IB port goes down and carries nothing",
        ),
        _K(
            "nvswitch",
            ("nvswitch", "nvlink"),
            "nvswitch",
            True,
            True,
            (2 * MIN, 10 * MIN),
            (0, 0),
            2.0,
            (145,),
            ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_XID_ERRORS"),
            "NVLink errors on all 8 GPUs of a node, then NVLink XIDs on all of them",
        ),
        _K(
            "ib_link_flap",
            ("ib_link",),
            "ib",
            False,
            False,
            (0, 0),
            (30 * MIN, 90 * MIN),
            3.0,
            (),
            ("node_infiniband_link_downed_total", "node_infiniband_link_error_recovery_total"),
            "one IB port goes down and up again every few minutes with symbol and receive errors",
        ),
        _K(
            "nfs_client",
            ("nfs_client",),
            "nfs",
            False,
            False,
            (0, 0),
            (20 * MIN, 60 * MIN),
            1.5,
            (),
            ("node_mountstats_nfs_operations_queue_time_seconds_total", "node_procs_blocked"),
            "one node's NFS requests wait in its own RPC queue; server time is normal",
        ),
        _K(
            "nfs_network",
            ("nfs_network",),
            "nfs",
            False,
            False,
            (0, 0),
            (20 * MIN, 60 * MIN),
            1.5,
            (),
            ("node_mountstats_nfs_operations_response_time_seconds_total", "node_nfs_rpc_retransmissions_total"),
            "one node's NFS round trips are slow, with retransmissions and NIC errors",
        ),
        _K(
            "nfs_storage",
            ("nfs_storage",),
            "cluster_nfs",
            False,
            False,
            (0, 0),
            (20 * MIN, 60 * MIN),
            1.0,
            (),
            ("node_mountstats_nfs_operations_response_time_seconds_total",),
            "the filer is slow: every node's RTT on one mount rises far above a normal slowdown",
        ),
        _K(
            "thermal_throttle",
            ("thermal_throttle",),
            "gpu",
            False,
            False,
            (0, 0),
            (30 * MIN, 90 * MIN),
            2.0,
            (),
            ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_SM_CLOCK"),
            "one GPU heats to ~88 C and drops its clock periodically (thermal slowdown)",
        ),
        _K(
            "power_throttle",
            ("power_throttle",),
            "gpu",
            False,
            False,
            (0, 0),
            (30 * MIN, 90 * MIN),
            2.0,
            (),
            ("DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_SM_CLOCK"),
            "one GPU hits power brake periodically: clock and power drop, power violation time grows",
        ),
        _K(
            "straggler",
            ("performance_degradation",),
            "node",
            False,
            False,
            (0, 0),
            (30 * MIN, 90 * MIN),
            1.9,
            (),
            ("node_load1", "node_procs_running"),
            "a stray host process starves the data loader; the node's GPUs idle in small gaps",
        ),
        _K(
            "gpu_hang_cascade",
            ("gpu_hang",),
            "gpu",
            True,
            True,
            (2 * MIN, 5 * MIN),
            (0, 0),
            0.0,
            (),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_POWER_USAGE"),
            "one GPU hangs (busy, no tensor work); minutes later every node stalls; the first is the cause",
        ),
        _K(
            "exporter_down",
            ("exporter_down",),
            "node",
            False,
            False,
            (0, 0),
            (15 * MIN, 45 * MIN),
            0.0,
            (),
            ("up",),
            "the node's dcgm-exporter stops answering; the node itself is fine",
        ),
        _K(
            "memory_pressure",
            ("memory_pressure",),
            "node",
            False,
            False,
            (0, 0),
            (20 * MIN, 60 * MIN),
            0.0,
            (),
            ("node_memory_MemAvailable_bytes", "node_pressure_memory_stalled_seconds_total"),
            "host memory runs low: page-outs, swap-outs, memory pressure stalls",
        ),
        _K(
            "scheduler_agent",
            ("scheduler_agent",),
            "node",
            False,
            False,
            (0, 0),
            (20 * MIN, 60 * MIN),
            0.0,
            (),
            ("backendai_async_task_count", "backendai_cpu_usage_percent"),
            "the scheduler agent itself is stuck: task backlog, its CPU at 100%, GPUs fine",
        ),
        _K(
            "ib_port_down",
            ("ib_link", "nic_dropout"),
            "ib",
            True,
            True,
            (0, 0),
            (0, 0),
            0.0,  # a variant of nic_dropout's ending, not a kind of its own in the observed mix
            (),
            ("node_infiniband_state_id", "node_infiniband_physical_state_id"),
            "an IB port goes DOWN (Disabled or Polling) with no precursor and stays down",
        ),
        _K(
            "ib_link_marginal",
            ("ib_link",),
            "ib",
            False,
            False,
            (0, 0),
            (30 * MIN, 90 * MIN),
            0.0,  # a milder form of ib_link_flap: a marginal cable or transceiver
            (),
            ("node_infiniband_symbol_error_total", "node_infiniband_link_error_recovery_total"),
            "a marginal IB link: a few symbol errors and link recoveries, less traffic; the node's NFS "
            "traffic over the fabric slows and retransmits (the symptom shows more than the cause)",
        ),
        _K(
            "ecc_slow_remap",
            ("ecc_hbm",),
            "gpu",
            False,
            False,
            (0, 0),
            (2 * HOUR, 6 * HOUR),
            0.0,
            (),
            ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",),  # the HBM's 1-4 C is too slow to show for sure
            "correctable remapped rows grow 1-6 an hour for hours, HBM 1-4 C warmer; no failure yet",
        ),
        _K(
            "fail_slow",
            ("performance_degradation", "thermal_throttle", "power_throttle"),  # a label names its variant's
            "node",
            False,
            False,
            (0, 0),
            (1 * HOUR, 3 * HOUR),
            0.0,
            (),
            (),  # each series stays among its peers: only the node's pooled offset shows (test_failslow.py)
            "every GPU of the node 4-12% slower for 1-3 h (utilisation, SM activity, power), its IB traffic "
            "likewise; plain, thermally throttled (clocks down, thermal bits, hotter) or power-capped",
        ),
    )
}
# Kinds with variants: the variant (drawn from the seed unless requested) decides the expected diagnosis.
VARIANTS: dict[str, dict[str, str]] = {
    "fail_slow": {"plain": "performance_degradation", "thermal": "thermal_throttle", "power": "power_throttle"},
}


@dataclass(frozen=True, slots=True)
class FaultRequest:
    """What a scenario asks for; unset fields are drawn from the seed."""

    kind: str
    node: str | None = None
    gpu: int | None = None
    at: float | None = None  # failure (hard) or onset (degradation) as a fraction of the run
    variant: str | None = None  # for kinds in VARIANTS

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(KINDS)}")
        if self.variant is not None and self.variant not in VARIANTS.get(self.kind, {}):
            raise ValueError(f"fault kind {self.kind!r} has no variant {self.variant!r}")
        if self.at is not None and not 0.0 < self.at < 1.0:
            raise ValueError(f"fault time 'at' is a fraction of the run in (0, 1), got {self.at}")


@dataclass(frozen=True, slots=True)
class Fault:
    """An injected fault: its label (GUIDE 3.2) and where it sits (indices for the transforms)."""

    kind: str
    node: str  # "cluster" for cluster-wide faults
    component: str
    onset_ts: float
    failure_ts: float | None
    end_ts: float  # failure time of a hard fault, end of a degradation
    expected: tuple[str, ...]
    node_index: int  # -1 for cluster-wide
    gpu: int = 0
    port: int = 0
    mount: int = 0
    xid: int | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "node": self.node,
            "component": self.component,
            "kind": self.kind,
            "onset_ts": self.onset_ts,
            "failure_ts": self.failure_ts,
            "expected": list(self.expected),
            "end_ts": self.end_ts,
        }
        if self.xid is not None:
            out["xid"] = self.xid
        return out


@dataclass(frozen=True, slots=True)
class FaultPlan:
    faults: tuple[Fault, ...]
    events: tuple[Event, ...]  # stalls and restarts caused by hard failures
    membership: Membership


def plan_faults(requests: Sequence[FaultRequest], grid: Grid, layout: Layout, seed: int) -> FaultPlan:
    """Resolve requests to faults on distinct training nodes and derive their cluster-wide effects."""
    rng = np.random.default_rng([seed, 7])
    spec = layout.spec
    span = grid.end - grid.start
    taken: set[int] = set()
    spares = list(layout.spares[spec.light_job_nodes :]) + list(layout.spares[: spec.light_job_nodes])
    faults: list[Fault] = []
    events: list[Event] = []
    leaves: list[tuple[int, float]] = []
    joins: list[tuple[int, float]] = []
    for req in requests:
        kind = KINDS[req.kind]
        node = -1
        if kind.component != "cluster_nfs":
            node = layout.index(req.node) if req.node else _pick(rng, spec.training, taken)
            taken.add(node)
        gpu = req.gpu if req.gpu is not None else int(rng.integers(spec.hardware.gpus))
        port, mount = int(rng.integers(spec.hardware.ib_ports)), 0
        at = grid.start + span * (req.at if req.at is not None else float(rng.uniform(0.35, 0.7)))
        lead = float(rng.uniform(*kind.precursor))
        failure: float | None
        if kind.name == "gpu_hang_cascade":
            onset, failure = at, at + lead
        elif kind.hard:
            failure, onset = at, max(grid.start + 2 * grid.step, at - lead)
        else:
            onset, failure = at, None
        end = failure if failure is not None else min(grid.end - grid.step, onset + float(rng.uniform(*kind.duration)))
        component = {
            "gpu": f"gpu/{gpu}",
            "nvswitch": "nvswitch",
            "ib": f"ib/mlx5_{port}:1",
            "node": "node",
            "nfs": f"nfs/{NFS_MOUNTS[mount][2]}",
            "cluster_nfs": f"nfs/{NFS_MOUNTS[mount][2]}",
        }[kind.component]
        xid = int(rng.choice(kind.xids)) if kind.xids else None
        expected = kind.expected
        if kind.name in VARIANTS:  # its own generator: the draws of other faults stay as they were
            names = list(VARIANTS[kind.name])
            variant = req.variant or names[int(np.random.default_rng([seed, 7, len(faults)]).integers(len(names)))]
            expected = (VARIANTS[kind.name][variant],)
        name = layout.names[node] if node >= 0 else "cluster"
        faults.append(
            Fault(
                kind.name,
                name,
                component,
                round(onset, 3),
                None if failure is None else round(failure, 3),
                round(end, 3),
                expected,
                node,
                gpu,
                port,
                mount,
                xid,
            )
        )
        if kind.stalls and failure is not None and node < spec.training:
            stall = failure if kind.name == "gpu_hang_cascade" else failure + float(rng.uniform(30, 120))
            stall_end = max(stall + 60.0, failure + NCCL_TIMEOUT_S)
            restart_end = stall_end + float(rng.uniform(5, 9)) * MIN
            if stall < grid.end:
                events.append(Event("stall", stall, min(stall_end, grid.end), detail=f"after {kind.name} on {name}"))
            if stall_end < grid.end:
                events.append(Event("restart", stall_end, min(restart_end, grid.end), detail=f"without {name}"))
                leaves.append((node, stall_end))
                if spares:
                    joins.append((spares.pop(0), stall_end))
    return FaultPlan(tuple(faults), tuple(events), Membership(tuple(leaves), tuple(joins)))


def _pick(rng: np.random.Generator, training: int, taken: set[int]) -> int:
    """A training node not yet faulted; rank 0 (index 0) only when nothing else is left."""
    free = [i for i in range(1, training) if i not in taken] or [i for i in range(training) if i not in taken]
    if not free:
        raise ValueError(f"more node faults than training nodes ({training})")
    return int(free[int(rng.integers(len(free)))])
