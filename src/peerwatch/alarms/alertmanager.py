"""Alertmanager sink: every open alarm as a firing alert, every recently resolved one as resolved.

Like Prometheus, the whole set is re-sent every ``resend_interval`` (and at once after a change),
with ``endsAt`` four intervals ahead, so an Alertmanager that restarts, or a peerwatch that dies,
heals by itself. The store is the truth; nothing is queued. Labels: ``alertname``, ``node``,
``component``, ``diagnosis``, ``severity``, ``alarm_id`` (plus configured ones); when an alarm's
labels change (its diagnosis settles), the old label set is sent as resolved. ``generatorURL`` is
the alarm's dashboard page, ``runbook_url`` the runbook of its diagnosis. After each post,
acknowledgements and silences are brought in step both ways (silences.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx
import orjson

from peerwatch.alarms.config import AlertmanagerConfig
from peerwatch.alarms.delivery import SinkStats, WallClock, iso, post_checked
from peerwatch.alarms.silences import Silences
from peerwatch.alarms.store import Store, StoredAlarm

ALERTNAME = "PeerwatchAlarm"
OWN_LABELS = ("alertname", "node", "component", "diagnosis", "severity", "alarm_id")  # win over configured ones
ALARM_PAGE = "/dashboard/alarms/{id}"  # the dashboard's alarm page (peerwatch.web.routes), under api.url


@dataclass(frozen=True, slots=True)
class SyncResult:
    sent: int
    error: str | None = None


class AlertmanagerSink:
    """Sends the store's alarms to Alertmanager's ``/api/v2/alerts``."""

    def __init__(self, config: AlertmanagerConfig, clock: WallClock, api_url: str | None = None) -> None:
        self.config, self.clock, self.api_url = config, clock, api_url
        self.url = config.url + "/api/v2/alerts"
        self._http = httpx.Client(timeout=config.timeout)
        scope = {k: v for k, v in config.labels.items() if k not in OWN_LABELS} | {"alertname": ALERTNAME}
        self.silences = Silences(config.url, self._http, scope)
        self.sent = 0  # alerts
        self.stats = SinkStats("alertmanager")  # posts
        self.last_error: str | None = None

    @property
    def errors(self) -> int:
        return self.stats.errors

    def labels(self, s: StoredAlarm) -> dict[str, str]:
        """The alert's identity: the alarm as it opened. An escalation (another diagnosis, warning to
        critical) updates the annotations of the same alert; it is not a new alert, not a new page."""
        a, first = s.alarm, s.alarm.opened
        core = {
            "alertname": ALERTNAME,
            "node": a.node,
            "component": first.component,
            "diagnosis": first.diagnosis,
            "severity": first.severity,
            "alarm_id": a.id,
        }
        return {**self.config.labels, **core}

    def annotations(self, s: StoredAlarm) -> dict[str, str]:
        a = s.alarm
        notes = "; ".join(e.note for e in a.evidence if e.note)
        changed = "" if not a.changes else f", since {iso(self.clock.wall(a.changes[-1].ts))}"
        out = {
            "summary": f"{a.node} {a.component}: {a.diagnosis} ({a.severity}, action {a.action}{changed})",
            "diagnosis_now": a.diagnosis,
            "severity_now": a.severity,
            "description": notes or f"score {a.score:.1f}",
            "action": a.action,
            "score": f"{a.score:.2f}",
            "opened_ts": f"{a.ts:.3f}",
            "evidence": orjson.dumps([e.as_json() for e in a.evidence]).decode(),
        }
        runbook = self.config.runbook_url(a.diagnosis)
        if runbook is not None:
            out["runbook_url"] = runbook  # of the diagnosis now: the alert's labels keep the first one
        return out

    def alert(self, s: StoredAlarm, wall: float, labels: Mapping[str, str] | None = None) -> dict[str, object]:
        """One alert; ``labels`` given: that (outdated) label set, sent as resolved now."""
        starts = self.clock.wall(s.alarm.ts)
        if labels is not None:
            ends = wall
        elif s.alarm.resolved_ts is None:
            ends = wall + 4 * self.config.resend_interval
        else:
            ends = min(wall, self.clock.wall(s.alarm.resolved_ts))
        body: dict[str, object] = {
            "labels": dict(labels) if labels is not None else self.labels(s),
            "annotations": self.annotations(s),
            "startsAt": iso(min(starts, wall)),
            "endsAt": iso(max(ends, min(starts, wall) + 0.001)),
        }
        if self.api_url:
            body["generatorURL"] = self.api_url + ALARM_PAGE.format(id=s.id)
        return body

    def sync(self, store: Store, wall: float | None = None) -> SyncResult:
        """Send every open alarm and every alarm resolved in the last ``resolved_for`` seconds."""
        wall = time.time() if wall is None else wall
        alarms = store.alarms(resolved_wall_after=wall - self.config.resolved_for, limit=10_000)
        alerts, changed = self._alerts(alarms, wall)
        if not alerts:
            return SyncResult(0)
        try:
            post_checked(self._http, self.url, orjson.dumps(alerts), (200,), {"Content-Type": "application/json"})
        except httpx.HTTPError as exc:
            self.stats = self.stats.after(False, time.time())
            self.last_error = f"{self.url}: {type(exc).__name__}: {exc}"
            return SyncResult(0, self.last_error)
        self.stats = self.stats.after(True, time.time())
        for s in changed:
            store.mark_sent(s.id, self.labels(s))
        self.sent += len(alerts)
        try:
            self.silences.sync(store, alarms, {s.id: self.labels(s) for s in alarms}, wall)
        except httpx.HTTPError as exc:  # the alerts went; acknowledgements wait for the next round
            self.last_error = f"{self.config.url} silences: {type(exc).__name__}: {exc}"
            return SyncResult(len(alerts), self.last_error)
        self.last_error = None
        return SyncResult(len(alerts))

    def _alerts(self, alarms: Sequence[StoredAlarm], wall: float) -> tuple[list[dict[str, object]], list[StoredAlarm]]:
        alerts, changed = [], []
        for s in alarms:
            alerts.append(self.alert(s, wall))
            labels = self.labels(s)
            if s.sent_labels != labels:
                changed.append(s)
                if s.sent_labels:
                    alerts.append(self.alert(s, wall, s.sent_labels))
        return alerts, changed

    def close(self) -> None:
        self._http.close()
