"""The matching rule of GUIDE 3.2: which alarm detects which fault, and how well it named it.

An alarm detects a fault when it is on the fault's node (``"cluster"`` for cluster-wide faults)
and its ``ts`` lies in ``[onset_ts - EARLY_S, end + LATE_S]``, where ``end`` is ``failure_ts``,
else the fault's ``end_ts`` (end of a degradation), else the end of the recording. The first
matching alarm (earliest ``ts``; input order breaks ties) is the one judged for lead time,
localisation and diagnosis. One alarm may match several faults; every matching alarm is a true
alarm for precision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from peerwatch.evaluate.alarms import AlarmPoint
from peerwatch.evaluate.labels import FaultLabel, ScenarioLabels

EARLY_S = 60.0
LATE_S = 120.0
FAST_STEPS = 2  # a fault without precursor counts as caught fast within this many steps of onset

BoolArray = npt.NDArray[np.bool_]


def window(fault: FaultLabel, recording_end: float) -> tuple[float, float]:
    """The closed interval of alarm times that detect ``fault``."""
    if fault.failure_ts is not None:
        end = fault.failure_ts
    else:
        end = fault.end_ts if fault.end_ts is not None else recording_end
    return fault.onset_ts - EARLY_S, end + LATE_S


def _split(component: str) -> tuple[str, str]:
    kind, _, rest = component.partition("/")
    return kind, rest


def _nfs_path(target: str) -> str:
    # an export "host:/path" names the same mount as its path; a mountpoint starts with "/"
    return target.split(":", 1)[1] if ":" in target and not target.startswith("/") else target


def localised(fault_component: str, alarm_component: str) -> bool:
    """Whether an alarm's component names the fault's component.

    ``ib/dev:port`` is matched by ``ib/dev:port`` or the whole device ``ib/dev`` (and ``ib/dev`` by
    any port of it); ``nfs/X`` by the same mountpoint or export, an export ``host:/p`` counting as
    path ``/p``; everything else (``gpu/N``, ``nvswitch``, ``node``, ``disk/…``, ``net/…``) exactly.
    """
    if fault_component == alarm_component:
        return True
    fkind, ftarget = _split(fault_component)
    akind, atarget = _split(alarm_component)
    if fkind != akind or not ftarget or not atarget:
        return False
    if fkind == "ib":
        fdev, _, fport = ftarget.partition(":")
        adev, _, aport = atarget.partition(":")
        return fdev == adev and (not fport or not aport or fport == aport)
    if fkind == "nfs":
        return _nfs_path(ftarget) == _nfs_path(atarget)
    return False


@dataclass(frozen=True, slots=True)
class FaultOutcome:
    """How one fault fared: its first matching alarm (None: missed) and how many alarms matched."""

    fault: FaultLabel
    first: AlarmPoint | None
    matches: int
    step: float

    @property
    def detected(self) -> bool:
        return self.first is not None

    @property
    def lead_s(self) -> float | None:
        """``failure_ts - ts`` of the first match (negative: raised after the failure)."""
        if self.first is None or self.fault.failure_ts is None:
            return None
        return self.fault.failure_ts - self.first.ts

    @property
    def detect_s(self) -> float | None:
        """Time to detect: ``ts - onset_ts`` of the first match (down to ``-EARLY_S``)."""
        return None if self.first is None else self.first.ts - self.fault.onset_ts

    @property
    def localised(self) -> bool:
        return self.first is not None and localised(self.fault.component, self.first.component)

    @property
    def diagnosed(self) -> bool:
        return self.first is not None and self.first.diagnosis in self.fault.expected

    @property
    def sudden(self) -> bool:
        """No precursor: the fault fails within one step of its first sign."""
        f = self.fault
        return f.failure_ts is not None and f.failure_ts - f.onset_ts <= self.step

    @property
    def fast(self) -> bool:
        """Detected within ``FAST_STEPS`` steps of onset."""
        d = self.detect_s
        return d is not None and d <= FAST_STEPS * self.step


@dataclass(frozen=True, slots=True)
class Matching:
    """Alarms (sorted by time), which of them matched any fault, and each fault's outcome."""

    alarms: tuple[AlarmPoint, ...]
    matched: BoolArray
    outcomes: tuple[FaultOutcome, ...]


def match(alarms: Sequence[AlarmPoint], labels: ScenarioLabels) -> Matching:
    """Apply the matching rule to every fault of ``labels``, vectorised over alarms."""
    order = sorted(range(len(alarms)), key=lambda i: alarms[i].ts)  # stable: input order breaks ties
    points = tuple(alarms[i] for i in order)
    ts = np.fromiter((a.ts for a in points), dtype=np.float64, count=len(points))
    nodes = np.array([a.node for a in points], dtype=object)
    matched = np.zeros(len(points), dtype=bool)
    outcomes = []
    for fault in labels.faults:
        lo, hi = window(fault, labels.end_ts)
        hit = (nodes == fault.node) & (ts >= lo) & (ts <= hi)
        matched |= hit
        idx = np.flatnonzero(hit)
        first = points[int(idx[0])] if idx.size else None
        outcomes.append(FaultOutcome(fault, first, int(idx.size), labels.step))
    return Matching(points, matched, tuple(outcomes))
