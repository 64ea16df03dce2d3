"""What the sinks share: one checked POST, Alertmanager's time format, and the delivery counts that
the service's ``/metrics`` reports per sink."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

import httpx


def post_checked(
    http: httpx.Client, url: str, content: bytes, ok: Collection[int], headers: Mapping[str, str] | None = None
) -> httpx.Response:
    """POST ``content``; any status outside ``ok`` raises ``httpx.HTTPStatusError`` with the start of the body."""
    resp = http.post(url, content=content, headers=dict(headers or {}))
    if resp.status_code not in ok:
        raise httpx.HTTPStatusError(f"HTTP {resp.status_code}: {resp.text[:300]}", request=resp.request, response=resp)
    return resp


def iso(wall: float) -> str:
    """Epoch seconds as RFC 3339 in UTC with milliseconds, as Alertmanager's API writes times."""
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class SinkStats:
    """A sink's deliveries so far: an Alertmanager post, a write-back push, a webhook change."""

    sink: str  # the ``sink`` label: alertmanager, writeback, webhook
    sends: int = 0  # deliveries tried (a webhook change with its retries is one)
    errors: int = 0  # of which failed
    last_success: float | None = None  # wall time of the newest delivery that succeeded

    def after(self, ok: bool, wall: float) -> SinkStats:
        """These counts after one more delivery."""
        return replace(
            self,
            sends=self.sends + 1,
            errors=self.errors + (not ok),
            last_success=wall if ok else self.last_success,
        )


class Metered(Protocol):
    """A sink that counts its deliveries (its own thread replaces ``stats`` after each one)."""

    @property
    def stats(self) -> SinkStats: ...


class WallClock(Protocol):
    """The service's clock (service/clock.py) as a sink reads it: the wall time of a data time."""

    def wall(self, data: float) -> float: ...
