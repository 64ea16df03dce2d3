"""What the catalogue says about a metric family: the row type and its vocabularies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Category(StrEnum):
    """How a family is analysed."""

    error_counter = "error_counter"  # any increase is a fault signal
    discard = "discard"  # packets dropped for want of room or a listener: a fault signal only in bursts
    state = "state"  # a particular value is the signal (XID, link state, PCIe gen)
    utilization = "utilization"
    throughput = "throughput"  # bytes, packets, operations per second
    latency = "latency"
    temperature = "temperature"
    power = "power"
    energy = "energy"
    clock = "clock"
    memory = "memory"
    capacity = "capacity"  # sizes and limits that change rarely
    load = "load"  # load averages, pressure stall, run queue, interrupts
    quantity = "quantity"  # processes, file descriptors, connections, tasks
    info = "info"  # *_info, build info, labels carried as series
    runtime = "runtime"  # Go/Python/process internals of the exporter itself
    time = "time"  # timestamps, uptime, clock offsets
    cooling = "cooling"  # fan speeds, PWM duty, cooling-device throttle state


class Unit(StrEnum):
    """The comparison unit: which entities are peers of one another."""

    node = "node"
    gpu = "gpu"
    gpu_link = "gpu_link"  # one NVLink of one GPU
    nvswitch = "nvswitch"
    ib_port = "ib_port"  # InfiniBand device + port
    network_device = "network_device"  # grouped by interface type (direct0 with direct0)
    nfs_mount = "nfs_mount"  # an NFS export / mountpoint (+ operation as a variant)
    disk = "disk"
    filesystem = "filesystem"
    cpu_core = "cpu_core"
    cpu_socket = "cpu_socket"
    numa_node = "numa_node"  # per-NUMA-node memory and zone statistics
    pci_device = "pci_device"  # a PCIe function (segment:bus:device.function)
    sensor = "sensor"  # hwmon / thermal zones
    service = "service"  # scheduler / manager level, not tied to one node
    exporter = "exporter"  # the exporter process itself


class Direction(StrEnum):
    """Which way is bad."""

    up = "up"
    down = "down"
    both = "both"
    none = "none"


@dataclass(frozen=True, slots=True)
class Family:
    """One catalogue row.

    ``entity_labels`` names the labels that identify the entity within its node, in order;
    each entry may list alternatives separated by ``|`` (exporter versions differ:
    dcgm-exporter ``gpu``, all-smi ``gpu_index`` or the older ``index``).
    ``source`` says how the row was made: ``catalog`` (hand-kept data) or ``rule:<name>``.
    """

    name: str
    exporter: str
    mtype: str  # counter, gauge, histogram, summary, untyped (as declared)
    category: Category
    unit: Unit
    entity_labels: tuple[str, ...] = ()
    bad: Direction = Direction.none
    help: str = ""
    source: str = "catalog"

    @property
    def known(self) -> bool:
        return self.source == "catalog"

    def entity_values(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The entity label values, first present alternative of each; '' where none is present."""
        out = []
        for spec in self.entity_labels:
            out.append(next((labels[a] for a in spec.split("|") if labels.get(a)), ""))
        return tuple(out)

    def component(self, labels: Mapping[str, str]) -> str:
        """The alarm component (GUIDE 3.1) for a series of this family."""
        values = self.entity_values(labels)
        first = values[0] if values else ""
        prefix = _COMPONENT_PREFIX.get(self.unit)
        if prefix is None or not first:
            return "nvswitch" if self.unit is Unit.nvswitch else "node"
        if self.unit is Unit.ib_port and len(values) > 1 and values[1]:
            return f"ib/{first}:{values[1]}"
        if self.unit is Unit.gpu_link:
            return f"gpu/{first}"
        return f"{prefix}/{first}"


_COMPONENT_PREFIX: dict[Unit, str] = {
    Unit.gpu: "gpu",
    Unit.gpu_link: "gpu",
    Unit.ib_port: "ib",
    Unit.nfs_mount: "nfs",
    Unit.disk: "disk",
    Unit.network_device: "net",
}
