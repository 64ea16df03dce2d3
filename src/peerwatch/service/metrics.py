"""peerwatch's own ``/metrics``: scores, risk, open alarms and its own health, as Prometheus text."""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from peerwatch import __version__
from peerwatch.alarms.delivery import Metered, SinkStats
from peerwatch.alarms.store import StoredAlarm
from peerwatch.detect.workload import WorkloadGroup
from peerwatch.model import DIAGNOSES, ScoreKey
from peerwatch.promtext import escape_help, sample_line

SEVERITIES = ("warning", "critical")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Health:
    """The service's own state, as the runner last saw it."""

    evaluations: int = 0
    evaluated_until: float | None = None
    evaluation_seconds: float = 0.0
    blind: bool = False
    targets: int = 0
    targets_down: int = 0
    buffer_series: int = 0
    buffer_samples: int = 0
    am_sent: int = 0
    am_errors: int = 0
    scores: Mapping[ScoreKey, float] = field(default_factory=dict)
    groups: Mapping[str, WorkloadGroup] = field(default_factory=dict)  # node -> workload group at the last step
    # The sinks themselves, read when rendered: a copy of Health made by another thread can then never
    # carry older counts (a counter going back would read as a reset).
    sinks: Sequence[Metered] = ()


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, mtype: str, help_: str, samples: Iterable[tuple[Mapping[str, str], float]]) -> None:
        self.lines += [f"# HELP {name} {escape_help(help_)}", f"# TYPE {name} {mtype}"]
        self.lines += (sample_line(name, labels.items(), value) for labels, value in samples)


def render(health: Health, open_alarms: Sequence[StoredAlarm], risk: Mapping[str, float]) -> str:
    """The exposition text of every peerwatch metric."""
    t = _Text()
    t.family(
        "peerwatch_build_info",
        "gauge",
        "Always 1: the running peerwatch's version and Python's, as labels.",
        [({"version": __version__, "python": platform.python_version()}, 1.0)],
    )
    t.family(
        "peerwatch_anomaly_score",
        "gauge",
        "Strongest finding per node, component and metric at the last evaluated step (absent: nothing found).",
        (({"node": n, "component": c, "metric": m}, round(v, 4)) for (n, c, m), v in sorted(health.scores.items())),
    )
    t.family(
        "peerwatch_node_risk",
        "gauge",
        "Lemon risk: how much likelier than a node with no history this node is to fail next.",
        (({"node": n}, round(v, 6)) for n, v in sorted(risk.items())),
    )
    counts = Counter((s.alarm.diagnosis, s.alarm.severity) for s in open_alarms)
    # Every pair listed, 0 included: an alerting rule on a count sees it fall rather than vanish.
    pairs = sorted({(d, s) for d in DIAGNOSES for s in SEVERITIES} | set(counts))
    t.family(
        "peerwatch_open_alarms",
        "gauge",
        "Open alarms by diagnosis and severity.",
        (({"diagnosis": d, "severity": s}, float(counts[(d, s)])) for d, s in pairs),
    )
    t.family(
        "peerwatch_monitoring_blind", "gauge", "1 while the source fails or is stale.", [({}, float(health.blind))]
    )
    t.family("peerwatch_evaluations_total", "counter", "Evaluations run.", [({}, float(health.evaluations))])
    if health.evaluated_until is not None:
        t.family(
            "peerwatch_evaluated_until_timestamp_seconds",
            "gauge",
            "Data time of the last evaluated step.",
            [({}, health.evaluated_until)],
        )
    t.family(
        "peerwatch_evaluation_duration_seconds",
        "gauge",
        "Wall time of the last evaluation.",
        [({}, round(health.evaluation_seconds, 4))],
    )
    t.family(
        "peerwatch_scrape_targets", "gauge", "Scrape targets tried in the last round.", [({}, float(health.targets))]
    )
    t.family(
        "peerwatch_scrape_targets_down",
        "gauge",
        "Targets that failed in the last round.",
        [({}, float(health.targets_down))],
    )
    t.family("peerwatch_buffer_series", "gauge", "Series in the sample window.", [({}, float(health.buffer_series))])
    t.family("peerwatch_buffer_samples", "gauge", "Samples in the sample window.", [({}, float(health.buffer_samples))])
    t.family(
        "peerwatch_alertmanager_alerts_sent_total",
        "counter",
        "Alerts posted to Alertmanager.",
        [({}, float(health.am_sent))],
    )
    t.family(
        "peerwatch_alertmanager_errors_total",
        "counter",
        "Failed posts to Alertmanager.",
        [({}, float(health.am_errors))],
    )
    _sink_families(t, [sink.stats for sink in health.sinks])
    return "\n".join(t.lines) + "\n"


def _sink_families(t: _Text, stats: Sequence[SinkStats]) -> None:
    t.family(
        "peerwatch_sink_sends_total",
        "counter",
        "Deliveries tried per sink: Alertmanager posts, write-back pushes, webhook changes (retries included).",
        (({"sink": s.sink}, float(s.sends)) for s in stats),
    )
    t.family(
        "peerwatch_sink_errors_total",
        "counter",
        "Deliveries that failed per sink (a webhook change after its last retry, or refused).",
        (({"sink": s.sink}, float(s.errors)) for s in stats),
    )
    t.family(
        "peerwatch_sink_last_success_timestamp_seconds",
        "gauge",
        "Wall time of the newest delivery that succeeded per sink (absent before the first).",
        (({"sink": s.sink}, s.last_success) for s in stats if s.last_success is not None),
    )
