"""The simulated cluster: its size and hardware (a typed spec) and the concrete layout derived from it.

Default: the reference cluster, 63 DGX B200 nodes x 8 GPUs, 60 training nodes (HSDP, 6 replicas of
10-node FSDP groups) and 3 idle spares. Everything a node carries (GPUs, InfiniBand ports, NICs,
NFS mounts, disks, CPUs) is named here once so every exporter labels it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray


@dataclass(frozen=True, slots=True)
class Hardware:
    """Physical constants of one node model (DGX B200 by default)."""

    gpu_model: str = "NVIDIA B200"
    gpus: int = 8
    fb_total_mib: float = 183_359.0  # what NVML reports for a 192 GB B200
    gpu_tdp_w: float = 1000.0
    gpu_idle_w: float = 140.0
    sm_clock_max: float = 1965.0
    mem_clock: float = 3996.0
    pcie_gen_max: int = 5
    pcie_width: int = 16
    ib_ports: int = 8  # mlx5_0..7, 400 Gb/s each
    ib_rate_bytes: float = 400e9 / 8
    sockets: int = 2
    cores: int = 112
    threads: int = 224
    mem_bytes: float = 2.0 * 2**40
    driver: str = "570.133.20"
    cuda: str = "12.8"


B200 = Hardware()

NFS_MOUNTS: tuple[tuple[str, str, str], ...] = (
    # (export, mountaddr, mountpoint): datasets and checkpoints on one filer, home on another
    ("10.40.0.11:/data", "10.40.0.11", "/data"),
    ("10.40.0.12:/home", "10.40.0.12", "/home"),
)
NFS_OPS: tuple[str, ...] = ("READ", "WRITE", "GETATTR", "ACCESS", "LOOKUP", "OPEN")
DISKS: tuple[str, ...] = ("nvme0n1", "nvme1n1")
FIXED_NETDEVS: tuple[str, ...] = ("direct0", "net0", "lo")  # storage NIC, management NIC, loopback
CPU_MODES: tuple[str, ...] = ("user", "system", "idle", "iowait", "irq", "softirq")


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Size and mix of the simulated cluster.

    ``cpu_series`` limits how many logical CPUs get ``node_cpu_seconds_total`` series (a real
    node_exporter reports all 224; 16 keep recordings small while keeping the per-CPU shape).
    ``old_exporter_fraction`` of nodes run an older dcgm-exporter (``Hostname`` label, XID
    without ``err_code``/``err_msg``). ``light_job_nodes`` spares run a lighter job for a while.
    ``side_nodes`` are neither in the main job nor spares: each runs unsynchronised work of its own
    (a dev node, a small job); ``second_job_nodes`` run a small synchronous job of their own
    (``simulate.side_jobs``). Node order: main job, second job, side nodes, spares.
    """

    nodes: int = 63
    spares: int = 3
    hardware: Hardware = B200
    replicas: int = 6
    fsdp_nodes: int = 10
    cpu_series: int = 16
    old_exporter_fraction: float = 0.3
    light_job_nodes: int = 1
    scrape_interval: float = 30.0
    side_nodes: int = 0
    second_job_nodes: int = 0

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError(f"a cluster needs at least 2 nodes to have peers, got {self.nodes}")
        if not 0 <= self.spares < self.nodes:
            raise ValueError(f"spares must be in [0, nodes), got {self.spares} of {self.nodes}")
        if self.light_job_nodes > self.spares:
            raise ValueError(f"light_job_nodes ({self.light_job_nodes}) cannot exceed spares ({self.spares})")
        side = self.side_nodes + self.second_job_nodes
        if min(self.side_nodes, self.second_job_nodes) < 0 or (side and self.training < 2):
            raise ValueError(
                f"side_nodes ({self.side_nodes}) and second_job_nodes ({self.second_job_nodes}) must be >= 0 "
                f"and leave at least 2 of {self.nodes - self.spares} non-spare nodes in the main job"
            )
        if not 0 < self.cpu_series <= self.hardware.threads:
            raise ValueError(f"cpu_series must be in [1, {self.hardware.threads}], got {self.cpu_series}")
        if self.scrape_interval <= 0:
            raise ValueError(f"scrape_interval must be positive, got {self.scrape_interval}")

    @property
    def training(self) -> int:
        return self.nodes - self.spares - self.side_nodes - self.second_job_nodes


def default_spec(nodes: int) -> ClusterSpec:
    """The reference mix scaled to ``nodes``: about 5% spares (at least 1), one light-job spare."""
    if nodes == 63:
        return ClusterSpec()
    spares = max(1, round(nodes * 3 / 63))
    return ClusterSpec(nodes=nodes, spares=spares, light_job_nodes=min(1, spares))


@dataclass(frozen=True, slots=True)
class Layout:
    """Names and fixed per-entity properties of a concrete cluster (drawn once from the seed)."""

    spec: ClusterSpec
    names: tuple[str, ...]
    uuids: tuple[tuple[str, ...], ...]  # [node][gpu]
    old_exporter: tuple[bool, ...]  # node runs a dcgm-exporter with the `Hostname` label
    uptime_s: FloatArray  # (N,) seconds since boot at the start of the run
    gpu_temp_offset: FloatArray  # (N, G) degrees: some GPUs always run hotter (not a fault)
    gpu_power_scale: FloatArray  # (N, G) silicon lottery: a few per cent more or less power
    cpu_weight: FloatArray  # (N, C) share of CPU load on each reported logical CPU
    old_sbe: FloatArray  # (N, G) months-old aggregate ECC counts on some healthy GPUs
    old_remap: FloatArray  # (N, G) old correctable remapped rows

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def spares(self) -> tuple[int, ...]:
        return tuple(range(self.spec.nodes - self.spec.spares, self.spec.nodes))

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"no node named {name!r} in this cluster ({self.names[0]}..{self.names[-1]})") from None


PCI_BUSES: tuple[str, ...] = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")  # DGX B200 GPU slots


def pci_bus_id(gpu: int) -> str:
    return f"00000000:{PCI_BUSES[gpu % len(PCI_BUSES)]}:00.0"


def _uuid(r: npt.NDArray[np.uint64]) -> str:
    a, b, c, d = (int(x) for x in r)
    return f"GPU-{a:08x}-{b & 0xFFFF:04x}-{c & 0xFFFF:04x}-{(b >> 16) & 0xFFFF:04x}-{(d << 16) | (c >> 16):012x}"


def build_layout(spec: ClusterSpec, seed: int) -> Layout:
    """Draw the fixed properties of every node and GPU; same seed, same layout."""
    rng = np.random.default_rng([seed, 1])
    n, g = spec.nodes, spec.hardware.gpus
    width = max(3, len(str(n)))
    names = tuple(f"gpu{i + 1:0{width}d}" for i in range(n))
    raw = rng.integers(0, 2**32, size=(n, g, 4), dtype=np.uint64)
    uuids = tuple(tuple(_uuid(r) for r in raw[i]) for i in range(n))
    old = tuple(bool(x) for x in rng.random(n) < spec.old_exporter_fraction)
    temp = rng.normal(0.0, 1.2, (n, g))
    hot = rng.random((n, g)) < 0.06
    temp[hot] += rng.uniform(4.0, 7.0, int(hot.sum()))
    power = 1.0 + rng.normal(0.0, 0.02, (n, g))
    weight = rng.gamma(4.0, 1.0, (n, spec.cpu_series))
    weight /= weight.mean(axis=1, keepdims=True)
    old_sbe = np.where(rng.random((n, g)) < 0.08, rng.integers(1, 400, (n, g)), 0).astype(np.float64)
    old_remap = np.where(rng.random((n, g)) < 0.05, rng.integers(1, 4, (n, g)), 0).astype(np.float64)
    return Layout(
        spec=spec,
        names=names,
        uuids=uuids,
        old_exporter=old,
        uptime_s=rng.uniform(3, 90, n) * 86_400.0,
        gpu_temp_offset=temp,
        gpu_power_scale=power,
        cpu_weight=weight,
        old_sbe=old_sbe,
        old_remap=old_remap,
    )
