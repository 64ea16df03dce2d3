"""What detectors see: each frame with its catalogue row and, per series, node, component and peer key.

The peer key says which series are comparable: the same metric and the same variant labels
(CPU mode, NFS operation, interface type...), on different entities. Labels that only name the
node, the exporter instance or the device's identity (UUID, bus id) are not part of it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from peerwatch.catalog.load import Catalog
from peerwatch.catalog.roles import Roles
from peerwatch.catalog.schema import Category, Family, Unit
from peerwatch.detect.grouped import fold_into
from peerwatch.frames import Frame
from peerwatch.model import BoolArray, FloatArray, SeriesKey

IntArray = npt.NDArray[np.int64]

# Labels that identify where a series comes from, not what it measures.
IDENTITY_LABELS = frozenset(
    {
        "instance", "job", "node", "hostname", "Hostname", "exported_instance", "exported_job",
        "UUID", "uuid", "gpu_uuid", "pci_bus_id", "modelName", "model_name", "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_PROCESS_NAME", "err_msg", "mountaddr", "agent_id", "service_group", "cpu_model",
        "container", "namespace", "pod", "pod_uid", "firmware_version", "board_id", "hca_type",
        "le", "quantile",
    }
)  # fmt: skip
# Virtual interfaces (per container or job, bridges, overlays, tunnels): no NIC hardware behind
# them, named per container or per job, so compared as one type and never by their own name.
_INTERFACE_TYPES = (
    (
        re.compile(
            r"^(veth|cali|lxc|cilium|docker|br-|br\d|bridge|virbr|vnet|vxlan|geneve|genev_sys|flannel|cni|weave"
            r"|kube-|nodelocaldns|tap|tun|gre|erspan|ipip|ip6tnl|ip_vti|sit|wg|ovs-|dummy|nlmon|ifb)"
        ),
        "container",
    ),
    (re.compile(r"^lo$"), "loopback"),
)
VIRTUAL = frozenset({"container", "loopback"})  # interface types with no hardware behind them
_COUNTERS = frozenset({Category.error_counter, Category.discard})


# Units whose entities are only comparable to the same entity elsewhere: an IB port with the same
# port on other nodes, a mount with the same mount, a disk with the same disk. GPUs and CPU cores
# are all alike, and interfaces are compared by type.
PEER_BY_ENTITY = frozenset({Unit.ib_port, Unit.nfs_mount, Unit.disk, Unit.filesystem, Unit.sensor, Unit.pci_device})


def interface_type(device: str) -> str:
    """``direct0`` stays itself (compared only with ``direct0``); container interfaces are one type."""
    for pattern, kind in _INTERFACE_TYPES:
        if pattern.match(device):
            return kind
    return device


@dataclass(frozen=True, eq=False)
class Series:
    """One frame prepared for detection."""

    frame: Frame
    family: Family
    node_index: IntArray  # (series,) index into Context.nodes
    components: tuple[str, ...]
    peer_key: IntArray  # (series,) series with equal keys are peers; -1: never compared

    @property
    def values(self) -> FloatArray:
        return self.frame.values


@dataclass(frozen=True, eq=False)
class Context:
    """Every frame on one grid, the nodes, and their workload group at each step."""

    series: tuple[Series, ...]
    nodes: tuple[str, ...]
    start: float
    step: float
    steps: int
    groups: IntArray  # (nodes, steps) workload group of each node; -1 unknown
    # (nodes, steps) whether the node takes part in a cluster transition (a job restart, stall or
    # checkpoint) or is settling after one: its soft findings are held (detect/transitions.py)
    held: BoolArray | None = None
    # A recording's stretch (engine.analyze_segments): a step where nothing at all reports is a gap
    # in the data, not every node down; live, it is the monitoring gone blind.
    recorded: bool = False
    roles: Roles = field(default_factory=Roles.default)  # the catalogue's roles: which families detectors read

    @property
    def timestamps(self) -> FloatArray:
        return self.start + self.step * np.arange(self.steps, dtype=np.float64)

    def by_name(self) -> Mapping[str, Series]:
        return {s.frame.name: s for s in self.series}


def per_node(s: Series) -> Series:
    """The mean over a node's entities of each variant (CPU mode across a node's cores).

    Hundreds of cores per node give a noisy core a chance at every step; what a stray process or
    a slow node changes is the node's CPU time as a whole.
    """
    ok = np.flatnonzero(s.node_index >= 0)
    pair = s.node_index[ok] * (int(s.peer_key.max(initial=0)) + 1) + s.peer_key[ok]
    _, first_pos, target = np.unique(pair, return_index=True, return_inverse=True)
    # In order of first appearance, so that rows appended in a later chunk (stream.py) add rows here
    # after the existing ones.
    order = np.argsort(first_pos, kind="stable")
    first = ok[first_pos[order]]  # a representative row of each (node, variant)
    target = np.argsort(order)[target]
    values_in = s.values[ok]
    present = ~np.isnan(values_in)
    total = np.zeros((first.size, s.values.shape[1]))
    count = np.zeros_like(total)
    fold_into(np.add, total, target, np.where(present, values_in, 0.0))
    fold_into(np.add, count, target, present)
    with np.errstate(all="ignore"):
        values = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    own = {alt for spec in s.family.entity_labels for alt in spec.split("|")}
    keys = tuple(
        SeriesKey(s.frame.name, tuple((k, v) for k, v in s.frame.keys[r].labels if k not in own)) for r in first
    )
    frame = replace(
        s.frame,
        keys=keys,
        nodes=tuple(s.frame.nodes[r] for r in first),
        values=values,
        last_seen=np.full(first.size, np.nan),
    )
    return Series(
        frame=frame,
        family=s.family,
        node_index=s.node_index[first],
        components=("node",) * first.size,
        peer_key=s.peer_key[first],
    )


def prepare(
    frames: Mapping[str, Frame],
    catalog: Catalog,
    known: tuple[str, ...] | None = None,
    cache: dict[str, Series] | None = None,
) -> tuple[list[Series], tuple[str, ...]]:
    """Series of every frame with node indices, components and peer keys (not yet grouped).

    Nodes are sorted, or with ``known`` (a streamed run's nodes so far) those first and new ones
    after. ``cache`` keeps each frame's preparation for the next chunk of a stream, whose rows are
    those of the last chunk unless some were appended (stream.py)."""
    seen = {n for f in frames.values() for n in f.nodes if n}
    nodes = sorted(seen) if known is None else [*known, *sorted(seen - set(known))]
    index = {n: i for i, n in enumerate(nodes)}
    out = []
    for name in sorted(frames):
        frame = frames[name]
        kept = cache.get(name) if cache is not None else None
        if kept is not None and len(kept.frame.keys) == len(frame.keys):
            series = replace(kept, frame=frame)
        else:
            series = _prepare_frame(frame, catalog, index)
        if cache is not None:
            cache[name] = series
        out.append(series)
    return out, tuple(nodes)


def _prepare_frame(frame: Frame, catalog: Catalog, index: Mapping[str, int]) -> Series:
    labels = frozenset(k for key in frame.keys for k, _ in key.labels)
    family = catalog.classify(frame.name, labels, frame.declared_type)
    own = {alt for spec in family.entity_labels for alt in spec.split("|")}
    # Label names that make no peer group: identity, and the entity's own unless peers are compared
    # entity by entity. Components are many series' (gpu/0 on every node): made once each.
    dropped = IDENTITY_LABELS | (frozenset() if family.unit in PEER_BY_ENTITY else own)
    component_of: dict[tuple[tuple[str, str], ...], str] = {}
    comps, keys = [], []
    peer_keys: dict[tuple[tuple[str, str], ...], int] = {}
    for key in frame.keys:
        entity = tuple(kv for kv in key.labels if kv[0] in own)
        comp = component_of.get(entity)
        if comp is None:
            comp = component_of[entity] = sys.intern(family.component(dict(entity)))  # one string per component
        comps.append(comp)
        variant = tuple(kv for kv in key.labels if kv[0] not in dropped)
        if family.unit is Unit.network_device:
            kind = interface_type(family.entity_values(dict(entity))[0] if family.entity_labels else "")
            # No hardware behind it: its errors and drops (frames of protocols nobody listens to,
            # a container's start and stop) say nothing about the node's NICs.
            if kind == "loopback" or (kind in VIRTUAL and family.category in _COUNTERS):
                keys.append(-1)
                continue
            variant = (*variant, ("iftype", kind))
        keys.append(peer_keys.setdefault(variant, len(peer_keys)))
    return Series(
        frame=frame,
        family=family,
        node_index=np.array([index.get(n, -1) for n in frame.nodes], dtype=np.int64),
        components=tuple(comps),
        peer_key=np.array(keys, dtype=np.int64),
    )
