"""Webhook sink: one JSON POST per alarm change (``opened``, ``updated``, ``resolved``).

The store is the truth, as for Alertmanager: each sync compares the open and recently resolved
alarms with what the webhook last heard of them, and posts the differences in the order they are
found. What it heard is kept in the store's meta, so a restart loses no change (it may repeat the
posts of a sync it interrupted).
A post is retried with backoff on a connection error, 429 or 5xx; after the last try the sync
stops there (the rest waits for the next sync, keeping the order). Any other status is counted
as an error and the change dropped: the receiver refused it and would refuse it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import httpx
import orjson

from peerwatch.alarms.alertmanager import SyncResult
from peerwatch.alarms.config import WebhookConfig
from peerwatch.alarms.delivery import SinkStats
from peerwatch.alarms.store import StepChanges, Store, StoredAlarm

META_KEY = "webhook_heard"
RESOLVED_WINDOW = 86_400.0  # resolutions not posted within a day (wall time) are given up on
BACKOFF = (1.0, 2.0, 4.0)
Heard = tuple[bool, str, str, str, str]  # open, component, diagnosis, severity, action


def heard(s: StoredAlarm) -> Heard:
    """What the webhook is told of an alarm: a change of any of it is a post."""
    a = s.alarm
    return (s.open, a.component, a.diagnosis, a.severity, a.action)


def body(s: StoredAlarm, state: str) -> dict[str, object]:
    """The GUIDE 3.1 alarm line plus ``id``, ``state`` and ``resolved_ts``."""
    return {"id": s.id, **s.alarm.as_json(), "state": state, "resolved_ts": s.alarm.resolved_ts}


def change(s: StoredAlarm, before: Heard | None) -> str | None:
    """``opened``, ``updated``, ``resolved`` or None (nothing the webhook has not heard)."""
    now = heard(s)
    if before is None:
        return "opened" if s.open else "resolved"
    if before == now or not before[0]:
        return None
    return "resolved" if not s.open else "updated"


class WebhookSink:
    """Posts alarm changes to ``webhook.url`` with ``webhook.headers``."""

    def __init__(
        self, config: WebhookConfig, backoff: Sequence[float] = BACKOFF, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.config, self.backoff, self.sleep = config, tuple(backoff), sleep
        self._http = httpx.Client(timeout=config.timeout)
        self.sent = 0
        self.stats = SinkStats("webhook")  # changes posted, each with its retries
        self.last_error: str | None = None

    @property
    def errors(self) -> int:
        return self.stats.errors

    def sync(self, store: Store, wall: float | None = None) -> SyncResult:
        """Post every change since the last sync; returns how many were posted and the last error."""
        wall = time.time() if wall is None else wall
        alarms = store.alarms(resolved_wall_after=wall - RESOLVED_WINDOW, limit=10_000)
        kept = store.meta(META_KEY)
        if kept is None:  # first run: tell the receiver what is open, not a day of old resolutions
            known: dict[str, Heard] = {s.id: heard(s) for s in alarms if not s.open}
        else:
            known = {k: tuple(v) for k, v in orjson.loads(kept).items()}
        posted, error = 0, None
        for s in sorted(alarms, key=lambda s: (s.opened_wall, s.id)):
            state = change(s, known.get(s.id))
            if state is not None:
                error, retry = self._post(body(s, state))
                self.stats = self.stats.after(error is None, time.time())
                if error is not None and retry:
                    break
                posted += error is None
            known[s.id] = heard(s)
        ids = {s.id for s in alarms}
        kept_now = orjson.dumps({k: v for k, v in known.items() if k in ids}).decode()
        if kept_now != kept:
            store.commit(StepChanges(meta={META_KEY: kept_now}))
        self.sent += posted
        self.last_error = error
        return SyncResult(posted, error)

    def _post(self, payload: dict[str, object]) -> tuple[str | None, bool]:
        """Post with retries: (error or None, whether a later sync should try again)."""
        content = orjson.dumps(payload)
        headers = {"Content-Type": "application/json", **self.config.headers}
        error = ""
        for attempt in range(len(self.backoff) + 1):
            if attempt:
                self.sleep(self.backoff[attempt - 1])
            try:
                resp = self._http.post(self.config.url, content=content, headers=headers)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code < 300:
                return None, False
            error = f"HTTP {resp.status_code}: {resp.text[:300]}"
            if resp.status_code != 429 and resp.status_code < 500:
                return f"{self.config.url}: {error} (alarm {payload['id']}, {payload['state']}: dropped)", False
        return f"{self.config.url}: {error} after {len(self.backoff) + 1} tries", True

    def close(self) -> None:
        self._http.close()
