"""Metric families as data: name, declared type, help, entity, and how values come from the signals.

Each exporter module holds a table of :class:`Family` rows plus label builders for its entities
(GPU, IB port, mount and operation, ...). :func:`realise` turns one row into a
:class:`SeriesSet`: per-series labels and a (series x steps) value array, with counters
integrated from per-step increments, started at a plausible since-boot value and reset where
the source resets them (agent restart, remount).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray, Labels
from peerwatch.simulate.cluster import Layout
from peerwatch.simulate.phases import Activity
from peerwatch.simulate.signals import AnyArray, Signals
from peerwatch.simulate.targets import EXPORTERS, BoolArray, Exporter, Grid, Schedule


@dataclass(frozen=True, slots=True)
class Src:
    """Everything a value or label function may read."""

    sig: Signals
    layout: Layout
    grid: Grid
    act: Activity
    sched: Schedule
    veth_names: tuple[tuple[str, ...], ...]  # [node][epoch]

    def __getitem__(self, name: str) -> AnyArray:
        return self.sig[name]


ValueFn = Callable[[Src], FloatArray]
MaskFn = Callable[[Src], BoolArray]
LabelFn = Callable[[Src, int], list[dict[str, str]]]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family. ``value`` returns (N, E, T) or (N, T); for ``counter`` rows it returns
    increments per step and the emitted value is their running sum. ``start`` is ``uptime``
    (a since-boot value from the early rate), ``zero``, or a function giving (N, E) initial counts."""

    name: str
    mtype: str  # declared Prometheus type: gauge | counter | untyped
    help: str
    entity: str
    value: ValueFn
    counter: bool = False
    decimals: int | None = None
    start: str | Callable[[Src], FloatArray] = "uptime"
    reset: MaskFn | None = None
    present: MaskFn | None = None


@dataclass(frozen=True, slots=True)
class ExporterTable:
    """An exporter's families and how it labels its targets and entities."""

    exporter: Exporter
    families: tuple[Family, ...]
    entities: Mapping[str, LabelFn]
    base: Callable[[Src, int], dict[str, str]]  # labels on every series of node n (instance, job, ...)

    @property
    def index(self) -> int:
        return EXPORTERS.index(self.exporter)


@dataclass(frozen=True, slots=True, eq=False)
class SeriesSet:
    """The series of one family: ``values[s]`` belongs to node ``nodes[s]`` with ``labels[s]``."""

    name: str
    mtype: str
    help: str
    exporter: int
    nodes: npt.NDArray[np.int64]
    labels: tuple[Labels, ...]
    values: FloatArray  # (S, T)
    present: BoolArray | None  # (S, T); None = always present


def target_labels(exporter: Exporter, node: str) -> dict[str, str]:
    """What Prometheus adds when it scrapes a target."""
    return {"instance": f"{node}:{exporter.port}", "job": exporter.job, **dict(exporter.discovered)}


def integrate(inc: FloatArray, start: FloatArray, reset: BoolArray | None) -> FloatArray:
    """Running sum of non-negative increments from ``start``; at a reset the counter restarts from 0."""
    inc = np.clip(inc, 0.0, None)
    total = np.cumsum(inc, axis=-1)
    if reset is None:
        return total + start[..., None]
    prev = np.concatenate([np.zeros_like(total[..., :1]), total[..., :-1]], axis=-1)
    base = np.maximum.accumulate(np.where(reset, prev, 0.0), axis=-1)  # total is monotone, so is base
    before_first = np.cumsum(reset, axis=-1) == 0
    return total - base + np.where(before_first, start[..., None], 0.0)


def _as3(arr: AnyArray) -> AnyArray:
    return arr[:, None, :] if arr.ndim == 2 else arr


def realise(fam: Family, table: ExporterTable, src: Src, label_cache: dict[str, list[list[Labels]]]) -> SeriesSet:
    """Compute one family for every node: labels, values and presence."""
    n_nodes, steps = src.layout.n, src.grid.steps
    vals = _as3(np.asarray(fam.value(src), dtype=np.float64))
    if vals.shape[0] != n_nodes or vals.shape[2] != steps:
        raise ValueError(f"{fam.name}: value shape {vals.shape} does not fit {n_nodes} nodes x {steps} steps")
    ents = vals.shape[1]
    if fam.counter:
        reset = None if fam.reset is None else np.broadcast_to(_as3(fam.reset(src)), vals.shape)
        if fam.start == "uptime":
            early = vals[..., : min(steps, 60)].mean(axis=-1) / src.grid.step
            start = np.floor(early * src.layout.uptime_s[:, None])
        elif fam.start == "zero":
            start = np.zeros((n_nodes, ents))
        else:
            assert callable(fam.start)
            start = np.broadcast_to(np.asarray(fam.start(src), dtype=np.float64).reshape(n_nodes, -1), (n_nodes, ents))
        vals = integrate(vals, start, reset)
    if fam.decimals is not None:
        vals = np.round(vals, fam.decimals)
    key = f"{table.exporter.key}/{fam.entity}"
    if key not in label_cache:
        label_cache[key] = [labels_for(table, fam.entity, src, n) for n in range(n_nodes)]
    per_node = label_cache[key]
    if any(len(per_node[n]) != ents for n in range(n_nodes)):
        raise ValueError(f"{fam.name}: entity {key!r} has {len(per_node[0])} label sets but {ents} value rows")
    present = None if fam.present is None else np.broadcast_to(_as3(fam.present(src)), vals.shape)
    return SeriesSet(
        name=fam.name,
        mtype=fam.mtype,
        help=fam.help,
        exporter=table.index,
        nodes=np.repeat(np.arange(n_nodes, dtype=np.int64), ents),
        labels=tuple(lab for node_labels in per_node for lab in node_labels),
        values=vals.reshape(n_nodes * ents, steps),
        present=None if present is None else present.reshape(n_nodes * ents, steps),
    )


def labels_for(table: ExporterTable, entity: str, src: Src, n: int) -> list[Labels]:
    """Sorted label tuples of every entity of kind ``entity`` on node ``n``."""
    try:
        fn = table.entities[entity]
    except KeyError:
        raise KeyError(f"{table.exporter.key}: no entity kind {entity!r}") from None
    base = table.base(src, n)
    return [tuple(sorted({**base, **extra}.items())) for extra in fn(src, n)]


def entity_kinds(fn: Callable[[Src, int, str], list[dict[str, str]]], kinds: Sequence[str]) -> dict[str, LabelFn]:
    """One label function per entity kind, from a function that takes the kind as its third argument."""

    def bind(kind: str) -> LabelFn:
        return lambda s, n: fn(s, n, kind)

    return {kind: bind(kind) for kind in kinds}


def only(rows: Sequence[Family], names: set[str]) -> tuple[Family, ...]:
    """The rows whose name is in ``names`` (for tests and small recordings)."""
    return tuple(r for r in rows if r.name in names)
