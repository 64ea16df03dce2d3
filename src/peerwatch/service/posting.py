"""One checked POST for the sinks that push to a receiver (Alertmanager, VictoriaMetrics write-back)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import httpx


def post_checked(
    http: httpx.Client, url: str, content: bytes, ok: Collection[int], headers: Mapping[str, str] | None = None
) -> httpx.Response:
    """POST ``content``; any status outside ``ok`` raises ``httpx.HTTPStatusError`` with the start of the body."""
    resp = http.post(url, content=content, headers=dict(headers or {}))
    if resp.status_code not in ok:
        raise httpx.HTTPStatusError(f"HTTP {resp.status_code}: {resp.text[:300]}", request=resp.request, response=resp)
    return resp
