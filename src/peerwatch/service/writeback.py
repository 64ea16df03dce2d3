"""VictoriaMetrics write-back: each evaluated step's scores, risk and open alarms, stamped with that step.

The samples are the lines ``metrics.render`` gives ``/metrics`` (so the two cannot disagree), with
the data time of the step as their timestamp, posted as Prometheus text to
``/api/v1/import/prometheus``. Open alarms are counted by diagnosis and severity; a pair that had
alarms at the previous push and has none now is written once as 0, so a graph drops instead of
going stale. A failed push is counted and reported, never raised: the next step is pushed anyway.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence

import httpx

from peerwatch.alarms.alertmanager import SyncResult
from peerwatch.alarms.delivery import SinkStats, post_checked
from peerwatch.alarms.store import StoredAlarm
from peerwatch.promtext import sample_line
from peerwatch.service.config import WritebackConfig
from peerwatch.service.metrics import Health, render

FAMILIES = ("peerwatch_anomaly_score", "peerwatch_node_risk")  # taken as /metrics renders them
OPEN_ALARMS = "peerwatch_open_alarms"
PATH = "/api/v1/import/prometheus"


class WriteBack:
    """Pushes peerwatch's own series to a VictoriaMetrics, once per evaluated step."""

    def __init__(self, config: WritebackConfig) -> None:
        self.config = config
        self.url = config.url + PATH
        self._http = httpx.Client(timeout=config.timeout)
        self.last_step: float | None = None
        self.pushed = 0  # samples
        self.stats = SinkStats("writeback")  # pushes
        self.last_error: str | None = None
        self._open_keys: set[tuple[str, str]] = set()

    @property
    def errors(self) -> int:
        return self.stats.errors

    def due(self, health: Health) -> bool:
        """True when ``health`` holds a step not pushed yet."""
        return health.evaluated_until is not None and health.evaluated_until != self.last_step

    def payload(self, health: Health, open_alarms: Sequence[StoredAlarm], risk: Mapping[str, float]) -> list[str]:
        """The sample lines for the step ``health.evaluated_until`` (millisecond timestamps)."""
        if health.evaluated_until is None:
            return []
        ms = round(health.evaluated_until * 1000)
        lines = [
            f"{line} {ms}"
            for line in render(health, open_alarms, risk).splitlines()
            if line.startswith(tuple(f"{name}{{" for name in FAMILIES))
        ]
        counts = Counter((s.alarm.diagnosis, s.alarm.severity) for s in open_alarms)
        for d, s in sorted(set(counts) | self._open_keys):
            lines.append(sample_line(OPEN_ALARMS, (("diagnosis", d), ("severity", s)), counts[(d, s)], ms))
        return lines

    def push(self, health: Health, open_alarms: Sequence[StoredAlarm], risk: Mapping[str, float]) -> SyncResult:
        """Post the step's samples; a failure is counted in ``errors`` and returned, not raised."""
        lines = self.payload(health, open_alarms, risk)
        if not lines:
            return SyncResult(0)
        try:
            post_checked(self._http, self.url, ("\n".join(lines) + "\n").encode(), (200, 204))
        except httpx.HTTPError as exc:
            self.stats = self.stats.after(False, time.time())
            self.last_error = f"{self.url}: {type(exc).__name__}: {exc}"
            return SyncResult(0, self.last_error)
        self.stats = self.stats.after(True, time.time())
        self.last_step = health.evaluated_until
        self._open_keys = {(s.alarm.diagnosis, s.alarm.severity) for s in open_alarms}
        self.pushed += len(lines)
        self.last_error = None
        return SyncResult(len(lines))

    def close(self) -> None:
        self._http.close()
