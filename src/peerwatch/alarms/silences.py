"""Acknowledgements and Alertmanager silences, kept in step both ways.

- An alarm acknowledged in peerwatch (API or dashboard) gets a silence in Alertmanager: matchers
  are the alert's identifying labels (``alertname``, ``alarm_id``, ``node``, ``component`` and the
  configured ones), ``createdBy`` who acknowledged, ``comment`` why, ``endsAt`` far ahead; it is
  expired when the alarm resolves.
- An alarm whose alert Alertmanager reports silenced (``status.silencedBy`` of ``/api/v2/alerts``:
  Alertmanager does the matching, whatever matchers the person used) is acknowledged in peerwatch
  by the silence's author, with its comment. peerwatch never expires a silence it did not make.

What each alarm's silence is, is kept in the store's meta (``silence/<alarm id>``), so a restart
neither makes a second silence nor forgets to expire one; Alertmanager being down only delays it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx
import orjson

from peerwatch.alarms.delivery import iso, post_checked
from peerwatch.alarms.errors import ServiceError
from peerwatch.alarms.store import StepChanges, Store, StoredAlarm
from peerwatch.promtext import escape_label_value

SILENCE_FOR = 365 * 86400.0  # "until resolved": peerwatch expires it then; a unique alarm_id matches nothing else
VIEW = frozenset({"diagnosis", "severity"})  # alert labels that describe the alarm; the others identify it
MADE, ADOPTED, EXPIRED = "made", "adopted", "expired"  # meta states: ours, someone's in Alertmanager, ours ended


@dataclass(frozen=True, slots=True)
class Silence:
    id: str
    created_by: str
    comment: str


def meta_key(alarm_id: str) -> str:
    return f"silence/{alarm_id}"


class Silences:
    """One round of keeping acknowledgements and silences in step, over Alertmanager's API v2."""

    def __init__(self, base_url: str, http: httpx.Client, scope: Mapping[str, str]) -> None:
        """``scope``: labels every alert of this peerwatch carries (its alertname and configured labels), so
        that several peerwatch instances can share one Alertmanager."""
        self.base, self.http = base_url, http
        self.filter = [f'{k}="{escape_label_value(v)}"' for k, v in sorted(scope.items())]

    def sync(
        self,
        store: Store,
        alarms: Sequence[StoredAlarm],
        labels: Mapping[str, Mapping[str, str]],
        wall: float,
    ) -> int:
        """Bring ``alarms`` (open and recently resolved; ``labels``: each one's alert labels) and
        Alertmanager's silences in step; returns the changes made. Raises ``httpx.HTTPError``."""
        kept = {s.id: store.meta(meta_key(s.id)) for s in alarms}
        changes = 0
        opened = [s for s in alarms if s.open and kept[s.id] is None]
        silenced = self._silenced() if opened else {}
        for s in opened:
            found = silenced.get(s.id)
            if found is not None:
                if s.ack_by is None:
                    note = f"{found.comment} (Alertmanager silence {found.id})".strip()
                    try:
                        store.acknowledge(s.id, found.created_by or "alertmanager", note, wall)
                    except ServiceError:  # resolved meanwhile: nothing to acknowledge
                        continue
                self._remember(store, s.id, ADOPTED, found.id)
            elif s.ack_by is not None:
                self._remember(store, s.id, MADE, self._create(s, labels[s.id], wall))
            else:
                continue
            changes += 1
        for s in alarms:
            state, _, silence_id = (kept[s.id] or "").partition(" ")
            if not s.open and state == MADE:
                self._expire(silence_id)
                self._remember(store, s.id, EXPIRED, silence_id)
                changes += 1
        return changes

    def _silenced(self) -> dict[str, Silence]:
        """Alarm id -> a silence that mutes its alert now (the first Alertmanager names)."""
        resp = self.http.get(f"{self.base}/api/v2/alerts", params={"filter": self.filter})
        resp.raise_for_status()
        muted = {
            str(a["labels"]["alarm_id"]): list(a["status"]["silencedBy"])
            for a in resp.json()
            if a.get("status", {}).get("silencedBy") and "alarm_id" in a.get("labels", {})
        }
        if not muted:
            return {}
        resp = self.http.get(f"{self.base}/api/v2/silences")
        resp.raise_for_status()
        by_id = {
            str(x["id"]): Silence(str(x["id"]), str(x.get("createdBy", "")), str(x.get("comment", "")))
            for x in resp.json()
        }
        return {alarm: by_id[ids[0]] for alarm, ids in muted.items() if ids[0] in by_id}

    def _create(self, s: StoredAlarm, labels: Mapping[str, str], wall: float) -> str:
        body = {
            "matchers": [
                {"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in labels.items() if k not in VIEW
            ],
            "startsAt": iso(wall),
            "endsAt": iso(wall + SILENCE_FOR),
            "createdBy": s.ack_by or "peerwatch",
            "comment": s.ack_note or f"acknowledged in peerwatch by {s.ack_by}",
        }
        resp = post_checked(
            self.http, f"{self.base}/api/v2/silences", orjson.dumps(body), (200,), {"Content-Type": "application/json"}
        )
        return str(resp.json()["silenceID"])

    def _expire(self, silence_id: str) -> None:
        resp = self.http.delete(f"{self.base}/api/v2/silence/{silence_id}")
        # 500 "silence not found": Alertmanager lost it (no persistent storage); nothing left to expire.
        if resp.status_code != 200 and "not found" not in resp.text:
            resp.raise_for_status()

    @staticmethod
    def _remember(store: Store, alarm_id: str, state: str, silence_id: str) -> None:
        store.commit(StepChanges(meta={meta_key(alarm_id): f"{state} {silence_id}"}))
