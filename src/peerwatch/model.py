"""Data shapes shared by every stage: series keys, sample blocks, problems.

Sources yield :class:`SeriesBlock` (the samples of one series, as numpy arrays) so that
every later stage is vectorised; a single scraped sample is a block of length one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from peerwatch.promtext import escape_label_value

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

log = logging.getLogger("peerwatch")

Labels = tuple[tuple[str, str], ...]
"""Label pairs sorted by name, without ``__name__``: hashable and cheap to compare."""


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """Sorted label pairs of a mapping, dropping ``__name__``."""
    return tuple(sorted((k, v) for k, v in mapping.items() if k != "__name__"))


@dataclass(frozen=True, slots=True)
class SeriesKey:
    """A series: metric name and its labels."""

    name: str
    labels: Labels = ()

    @classmethod
    def of(cls, name: str, labels: Mapping[str, str] | None = None) -> SeriesKey:
        return cls(name, labels_of(labels or {}))

    def get(self, label: str, default: str | None = None) -> str | None:
        for k, v in self.labels:
            if k == label:
                return v
        return default

    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)

    def __reduce__(self) -> tuple[type[SeriesKey], tuple[str, Labels]]:
        # A frozen slots dataclass pickles field by field through setattr: 4x slower than this
        # (series keys cross to and from the child processes: frames/parts.py, offload.py).
        return SeriesKey, (self.name, self.labels)

    def __str__(self) -> str:
        inner = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in self.labels)
        return f"{self.name}{{{inner}}}"


@dataclass(frozen=True, slots=True, eq=False)
class SeriesBlock:
    """Samples of one series: what every source yields.

    ``timestamps`` are epoch seconds (float64), ``values`` float64; both 1-D of equal length.
    ``mtype`` is the Prometheus type the source declared, if it said one (it may lie; see catalog).
    """

    key: SeriesKey
    timestamps: FloatArray
    values: FloatArray
    mtype: str | None = None

    def __len__(self) -> int:
        return int(self.values.shape[0])


@dataclass(frozen=True, slots=True)
class Problem:
    """Input that could not be used, and where it was."""

    where: str  # "file.jsonl:12", a URL, or a series
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class ProblemLog:
    """Collects problems so one bad line or series never stops the rest.

    Keeps the first ``limit`` problems verbatim and counts the others.
    """

    limit: int = 1000
    problems: list[Problem] = field(default_factory=list)
    dropped: int = 0

    def add(self, where: str, message: str) -> None:
        if len(self.problems) < self.limit:
            self.problems.append(Problem(where, message))
            log.warning("%s: %s", where, message)
        else:
            self.dropped += 1

    def __len__(self) -> int:
        return len(self.problems) + self.dropped

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.problems)


def node_of(labels: Mapping[str, str], node_labels: tuple[str, ...] = ("node", "hostname", "Hostname")) -> str:
    """Node identity (GUIDE 3.1): the first of ``node_labels`` present, else the host part of ``instance``."""
    for name in node_labels:
        value = labels.get(name)
        if value:
            return value
    instance = labels.get("instance", "")
    if instance.startswith("["):  # [ipv6]:port
        return instance[1:].split("]", 1)[0]
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


# --- detection ------------------------------------------------------------------------------

DIAGNOSES = (
    "nvlink",
    "nvswitch",
    "ecc_hbm",
    "gpu_fallen_off_bus",
    "gsp_timeout",
    "gpu_hang",
    "ib_link",
    "nic_dropout",
    "nfs_client",
    "nfs_network",
    "nfs_storage",
    "pcie_downgrade",
    "thermal_throttle",
    "power_throttle",
    "node_unreachable",
    "exporter_down",
    "performance_degradation",
    "scheduler_agent",
    "memory_pressure",
    # job-level shapes of training throughput (peerwatch.training), on node "cluster"
    "fabric_failure",
    "gdr_misconfig",
    "gc_stall",
    # peerwatch itself cannot see: the source is unreachable or stalled (node "peerwatch")
    "monitoring_blind",
    "unknown",
)
"""The diagnosis vocabulary of GUIDE 3.1 (extend, never reuse a word for something else)."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """One observation behind a finding, as the ``analyze`` output shows it (GUIDE 3.1)."""

    metric: str
    labels: Labels
    value: float
    peer_median: float | None = None
    robust_z: float | None = None
    note: str = ""

    def __reduce__(self) -> tuple[type[Evidence], tuple[object, ...]]:
        return (Evidence, _fields_of(self))  # see Finding.__reduce__

    def as_json(self) -> dict[str, object]:
        def num(x: float | None) -> float | None:
            return None if x is None or x != x else round(float(x), 4)

        return {
            "metric": self.metric,
            "labels": dict(self.labels),
            "value": num(self.value),
            "peer_median": num(self.peer_median),
            "robust_z": num(self.robust_z),
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class Finding:
    """A detector's verdict on one entity at one step: scored, not yet decided.

    ``score`` is on a robust-z-like scale (0 normal, ~4 notable, 10+ strong) so that findings of
    different detectors can be fused. ``signal`` names what was seen (a family, or a tag such as
    ``xid:79`` or ``vanished``); ``hint`` is a diagnosis the detector is sure of (an XID's meaning).
    """

    ts: float
    node: str
    component: str
    detector: str
    signal: str
    score: float
    evidence: Evidence
    hint: str | None = None

    def __reduce__(self) -> tuple[type[Finding], tuple[object, ...]]:
        # Pickled as its fields in order (the peer detector's child sends back ~45 k on the 63-node
        # reference): dataclasses' own pickling of slotted classes looks up fields() for every
        # object (87 k findings and evidence unpickled in 0.86 s, so in 0.58 s).
        return (Finding, _fields_of(self))


def _fields_of(obj: Finding | Evidence) -> tuple[object, ...]:
    return tuple(getattr(obj, name) for name in obj.__slots__)


ScoreKey = tuple[str, str, str]  # a finding's node, component and metric (the service's scores by place)


@dataclass(frozen=True, slots=True)
class AlarmChange:
    """What an alarm said from one data step on: the values it opened with, or an escalation."""

    ts: float
    severity: str
    diagnosis: str
    action: str
    component: str

    def as_json(self) -> dict[str, object]:
        """One entry of the ``updates`` list of GUIDE 3.1, extended by the component (a change may be
        one of place only: the mount or port named once more evidence came)."""
        return {
            "ts": self.ts,
            "severity": self.severity,
            "diagnosis": self.diagnosis,
            "action": self.action,
            "component": self.component,
        }


@dataclass(frozen=True, slots=True)
class Alarm:
    """An incident on one node and component, with its lifecycle.

    ``component``, ``diagnosis``, ``severity`` and ``action`` are the alarm's latest view; ``changes``
    its history, the first entry the view it opened with (empty: it never changed since it opened).
    """

    id: str
    ts: float  # data time of the step at which it was first raised
    node: str
    component: str
    diagnosis: str
    severity: str  # warning | critical
    score: float
    action: str  # watch | drain | swap
    evidence: tuple[Evidence, ...]
    updated_ts: float
    resolved_ts: float | None = None
    changes: tuple[AlarmChange, ...] = ()

    @property
    def opened(self) -> AlarmChange:
        """The view the alarm opened with."""
        if self.changes:
            return self.changes[0]
        return AlarmChange(self.ts, self.severity, self.diagnosis, self.action, self.component)

    def as_json(self) -> dict[str, object]:
        """Exactly the ``peerwatch analyze`` line of GUIDE 3.1: the values it opened with, and its
        later changes in ``updates`` (one line per alarm, never one per escalation)."""
        first = self.opened
        out: dict[str, object] = {
            "ts": self.ts,
            "node": self.node,
            "component": first.component,
            "diagnosis": first.diagnosis,
            "severity": first.severity,
            "score": round(self.score, 2),
            "action": first.action,
            "evidence": [e.as_json() for e in self.evidence],
        }
        if len(self.changes) > 1:
            out["updates"] = [c.as_json() for c in self.changes[1:]]
        return out
