"""Scores of alarms against scenario labels: per scenario, then summed over scenarios.

Counts are summed first and rates computed from the sums (never an average of per-scenario
rates), so a long scenario weighs as much as its faults and node-hours say. Lead and detection
times are pooled over all detected faults before taking medians and percentiles.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from peerwatch.evaluate.alarms import AlarmLike, as_points
from peerwatch.evaluate.labels import CLUSTER, ScenarioLabels
from peerwatch.evaluate.match import FaultOutcome, match

LEAD_PERCENTILE = 10.0  # p10: 90% of detected failures were seen at least this long before


@dataclass(frozen=True, slots=True)
class ScenarioScore:
    """One scenario: each fault's outcome and the alarm counts."""

    name: str
    node_hours: float
    outcomes: tuple[FaultOutcome, ...]
    node_alarms: int
    node_alarms_matched: int
    cluster_alarms: int
    cluster_alarms_matched: int

    def as_json(self) -> dict[str, object]:
        return {
            "scenario": self.name,
            "node_hours": round(self.node_hours, 3),
            "alarms": AlarmTally.of([self]).as_json(),
            "faults": [_outcome_json(o) for o in self.outcomes],
        }


def score(alarms: Sequence[AlarmLike], labels: ScenarioLabels) -> ScenarioScore:
    """Score one scenario's alarms (engine :class:`Alarm`s or ``analyze`` JSON objects) per GUIDE 3.2."""
    m = match(as_points(alarms, labels.name), labels)
    cluster = np.array([a.node == CLUSTER for a in m.alarms], dtype=bool)
    return ScenarioScore(
        labels.name,
        labels.node_hours,
        m.outcomes,
        int((~cluster).sum()),
        int((m.matched & ~cluster).sum()),
        int(cluster.sum()),
        int((m.matched & cluster).sum()),
    )


def _outcome_json(o: FaultOutcome) -> dict[str, object]:
    f = o.fault
    out: dict[str, object] = {
        "kind": f.kind,
        "node": f.node,
        "component": f.component,
        "onset_ts": f.onset_ts,
        "failure_ts": f.failure_ts,
        "detected": o.detected,
        "matching_alarms": o.matches,
    }
    if o.first is not None:
        out |= {
            "first_ts": o.first.ts,
            "first_component": o.first.component,
            "first_diagnosis": o.first.diagnosis,
            "lead_s": o.lead_s,
            "detect_s": o.detect_s,
            "localised": o.localised,
            "diagnosed": o.diagnosed,
        }
    return out


def _ratio(num: int | float, den: int | float) -> float | None:
    return float(num) / den if den else None


@dataclass(frozen=True, slots=True)
class FaultTally:
    """Summed fault counts of one kind (or all kinds) and the rates derived from them.

    ``localisation`` and ``diagnosis`` are shares of the *detected* faults; ``lead_*`` are over
    detected faults that have a ``failure_ts``; ``sudden`` counts faults without precursor and
    ``sudden_fast`` those of them detected within two steps of onset.
    """

    faults: int = 0
    detected: int = 0
    localised: int = 0
    diagnosed: int = 0
    sudden: int = 0
    sudden_fast: int = 0
    leads: tuple[float, ...] = ()
    detect_times: tuple[float, ...] = ()

    @classmethod
    def of(cls, outcomes: Iterable[FaultOutcome]) -> FaultTally:
        outs = list(outcomes)
        return cls(
            len(outs),
            sum(o.detected for o in outs),
            sum(o.localised for o in outs),
            sum(o.diagnosed for o in outs),
            sum(o.sudden for o in outs),
            sum(o.sudden and o.fast for o in outs),
            tuple(lead for o in outs if (lead := o.lead_s) is not None),
            tuple(d for o in outs if (d := o.detect_s) is not None),
        )

    @property
    def recall(self) -> float | None:
        return _ratio(self.detected, self.faults)

    @property
    def localisation(self) -> float | None:
        return _ratio(self.localised, self.detected)

    @property
    def diagnosis(self) -> float | None:
        return _ratio(self.diagnosed, self.detected)

    @property
    def lead_median(self) -> float | None:
        return float(np.median(self.leads)) if self.leads else None

    @property
    def lead_p10(self) -> float | None:
        return float(np.percentile(self.leads, LEAD_PERCENTILE)) if self.leads else None

    @property
    def detect_median(self) -> float | None:
        return float(np.median(self.detect_times)) if self.detect_times else None

    def as_json(self) -> dict[str, object]:
        return {
            "faults": self.faults,
            "detected": self.detected,
            "recall": self.recall,
            "localisation_accuracy": self.localisation,
            "diagnosis_accuracy": self.diagnosis,
            "lead_s_median": self.lead_median,
            "lead_s_p10": self.lead_p10,
            "lead_n": len(self.leads),
            "detect_s_median": self.detect_median,
            "sudden": self.sudden,
            "sudden_detected_within_2_steps": self.sudden_fast,
        }


@dataclass(frozen=True, slots=True)
class AlarmTally:
    """Summed alarm counts and node-hours; precision and false-alarm rate are over node alarms."""

    scenarios: int = 0
    node_hours: float = 0.0
    node_alarms: int = 0
    node_alarms_matched: int = 0
    cluster_alarms: int = 0
    cluster_alarms_matched: int = 0

    @classmethod
    def of(cls, scores: Iterable[ScenarioScore]) -> AlarmTally:
        s = list(scores)
        return cls(
            len(s),
            sum(x.node_hours for x in s),
            sum(x.node_alarms for x in s),
            sum(x.node_alarms_matched for x in s),
            sum(x.cluster_alarms for x in s),
            sum(x.cluster_alarms_matched for x in s),
        )

    @property
    def false_alarms(self) -> int:
        return self.node_alarms - self.node_alarms_matched

    @property
    def precision(self) -> float | None:
        return _ratio(self.node_alarms_matched, self.node_alarms)

    @property
    def false_per_1000_node_hours(self) -> float | None:
        r = _ratio(self.false_alarms, self.node_hours)
        return None if r is None else 1000.0 * r

    def as_json(self) -> dict[str, object]:
        return {
            "scenarios": self.scenarios,
            "node_hours": round(self.node_hours, 3),
            "node_alarms": self.node_alarms,
            "node_alarms_matched": self.node_alarms_matched,
            "false_alarms": self.false_alarms,
            "precision": self.precision,
            "false_alarms_per_1000_node_hours": self.false_per_1000_node_hours,
            "cluster_alarms": self.cluster_alarms,
            "cluster_alarms_matched": self.cluster_alarms_matched,
        }


@dataclass(frozen=True, slots=True)
class Summary:
    """Scores summed over scenarios: per fault kind, over all faults, and the alarm figures."""

    kinds: dict[str, FaultTally] = field(default_factory=dict)
    overall: FaultTally = FaultTally()
    alarms: AlarmTally = AlarmTally()

    def as_json(self) -> dict[str, object]:
        return {
            "overall": self.overall.as_json(),
            "alarms": self.alarms.as_json(),
            "kinds": {k: t.as_json() for k, t in self.kinds.items()},
        }


def summarise(scores: Sequence[ScenarioScore]) -> Summary:
    """Sum the counts of several scenarios, then compute every rate from the sums."""
    outcomes = [o for s in scores for o in s.outcomes]
    kinds = sorted({o.fault.kind for o in outcomes})
    return Summary(
        {k: FaultTally.of(o for o in outcomes if o.fault.kind == k) for k in kinds},
        FaultTally.of(outcomes),
        AlarmTally.of(scores),
    )
