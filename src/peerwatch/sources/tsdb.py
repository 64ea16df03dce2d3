"""Client for the Prometheus and VictoriaMetrics HTTP APIs: PromQL queries and raw-sample reads.

:meth:`TSDBClient.read` is the main entry: it returns the raw samples (not interpolated) of some
series selectors over a time range, read from VictoriaMetrics' ``/api/v1/export`` (JSON lines or
CSV) or, on Prometheus, from instant queries of range selectors. Large reads are cut into time
windows and, when the server lists more than ``max_series`` series for a selector, into narrower
selectors (see :mod:`peerwatch.sources.tsdb_plan`), so a high-cardinality family never hits the
server's limits. A chunk that fails after retries is a problem; the others still arrive.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import httpx
import numpy as np
import orjson

from peerwatch.model import ProblemLog, SeriesBlock, SeriesKey, labels_of
from peerwatch.redact import redact_url
from peerwatch.sources.replay import read_vm_jsonl
from peerwatch.sources.tsdb_decode import csv_format, merge_blocks, prom_blocks, vm_csv_blocks
from peerwatch.sources.tsdb_http import HttpOptions, SecretError, http_client, tenant_url
from peerwatch.sources.tsdb_plan import split_selector, time_windows

Kind = Literal["prometheus", "victoriametrics"]
VMFormat = Literal["json", "csv"]
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_PROBE = '{__name__="peerwatch_kind_probe"}'


class TSDBError(Exception):
    """A TSDB request that failed for good: names the URL, the query and why."""

    def __init__(self, url: str, query: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {query}: {reason}")
        self.url, self.query, self.reason, self.status = url, query, reason, status


def _ms(t: float) -> int:
    return round(t * 1000.0)


def _sec(ms: int) -> str:
    return f"{ms / 1000:.3f}"  # exact: ms / 1000 is the double nearest the decimal


class TSDBClient:
    """A Prometheus-API server (Prometheus, VictoriaMetrics, or anything speaking the same API).

    ``kind`` is detected on first use unless given: VictoriaMetrics answers ``/api/v1/export``,
    Prometheus does not. Times are epoch seconds. Connection errors, 5xx and 429 are retried
    ``retries`` times with exponential backoff starting at ``backoff`` seconds. ``http`` adds
    headers, credentials, TLS settings and a VictoriaMetrics cluster tenant; messages show the URL
    with any password masked.
    """

    def __init__(
        self,
        url: str,
        *,
        kind: Kind | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        window: float = 6 * 3600.0,
        max_series: int = 2000,
        vm_format: VMFormat = "json",
        problems: ProblemLog | None = None,
        http: HttpOptions | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"TSDB URL must start with http:// or https://, got {url!r}")
        if window <= 0 or max_series <= 0 or retries < 0 or backoff < 0:
            raise ValueError(f"need window > 0, max_series > 0, retries >= 0, backoff >= 0 (for {url})")
        if vm_format not in ("json", "csv"):
            raise ValueError(f"vm_format must be 'json' or 'csv', got {vm_format!r}")
        self.url = tenant_url(url, http.tenant if http else None)
        self.shown = redact_url(self.url)  # for messages: never a password
        self._kind = kind
        self.retries, self.backoff = retries, backoff
        self.window, self.max_series, self.vm_format = window, max_series, vm_format
        self.problems = problems if problems is not None else ProblemLog()
        try:
            self._http = http_client(http, timeout)
        except ValueError as exc:
            raise TSDBError(self.shown, "TLS setup", str(exc)) from None
        self.requests = 0  # HTTP requests sent, retries included: for logs and tests

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TSDBClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, str | Sequence[str]], query: str) -> httpx.Response:
        """GET with retries; a final failure is a TSDBError naming the URL and ``query``.

        GET rather than POST: VictoriaMetrics 1.79 ignores form bodies on its export and series APIs.
        """
        url = self.url + path
        reason, status = "no attempt", None
        shown = self.shown + path
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            self.requests += 1
            try:
                resp = self._http.get(url, params=params)
            except SecretError as exc:  # a missing token file: retrying at once will not bring it back
                raise TSDBError(shown, query, str(exc)) from None
            except httpx.TransportError as exc:
                reason, status = f"{type(exc).__name__}: {exc or 'no detail'}", None
                continue
            if resp.status_code == 200:
                return resp
            reason, status = f"HTTP {resp.status_code}: {_server_error(resp)}", resp.status_code
            if resp.status_code not in _RETRY_STATUS:
                break
        tries = f" (after {self.retries + 1} attempts)" if status is None or status in _RETRY_STATUS else ""
        raise TSDBError(shown, query, reason + tries, status)

    def _api(self, path: str, params: Mapping[str, str | Sequence[str]], query: str) -> Any:
        """The ``data`` of a JSON API answer."""
        resp = self._get(path, params, query)
        try:
            doc = orjson.loads(resp.content)
        except orjson.JSONDecodeError as exc:
            raise TSDBError(self.shown + path, query, f"answer is not JSON: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise TSDBError(self.shown + path, query, f"server says {doc!r:.300}")
        return doc.get("data")

    @property
    def kind(self) -> Kind:
        """``victoriametrics`` or ``prometheus``, detected once."""
        if self._kind is None:
            try:
                self._get("/api/v1/export", {"match[]": _PROBE, "start": "0", "end": "1"}, "detect server kind")
                self._kind = "victoriametrics"
            except TSDBError as exc:
                if exc.status not in (400, 404, 405):  # unreachable, refused (401/403), or failing
                    raise
                self._kind = "prometheus"
        return self._kind

    # -- PromQL API --------------------------------------------------------------------------

    def query(self, promql: str, at: float) -> list[SeriesBlock]:
        """Instant query at ``at``: one block per series (a range selector gives raw samples)."""
        data = self._api("/api/v1/query", {"query": promql, "time": _sec(_ms(at))}, promql)
        return prom_blocks(data, f"{self.shown} {promql}", self.problems)

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[SeriesBlock]:
        """Range query: one block per series, evaluated every ``step`` seconds."""
        params = {"query": promql, "start": _sec(_ms(start)), "end": _sec(_ms(end)), "step": f"{step:g}"}
        return prom_blocks(self._api("/api/v1/query_range", params, promql), f"{self.shown} {promql}", self.problems)

    def series(self, match: str | Sequence[str], start: float, end: float) -> list[SeriesKey]:
        """Series matching the selector(s) with samples in ``[start, end]``."""
        return [SeriesKey(m.get("__name__", ""), labels_of(m)) for m in self._series_labels(match, start, end)]

    def _series_labels(self, match: str | Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        matches = [match] if isinstance(match, str) else list(match)
        params = {"match[]": matches, "start": _sec(_ms(start)), "end": _sec(_ms(end))}
        data = self._api("/api/v1/series", params, " ".join(matches))
        return [dict(m) for m in data or []]

    def label_values(self, label: str, match: str | Sequence[str] | None = None) -> list[str]:
        """Values of ``label``, optionally only on series matching ``match``."""
        params: dict[str, str | Sequence[str]] = {}
        if match is not None:
            params["match[]"] = [match] if isinstance(match, str) else list(match)
        return [str(v) for v in self._api(f"/api/v1/label/{label}/values", params, f"values of {label}") or []]

    def metric_names(self) -> list[str]:
        """All metric names the server knows."""
        return self.label_values("__name__")

    # -- raw reads ---------------------------------------------------------------------------

    def read(self, matchers: Sequence[str], start: float, end: float) -> Iterator[SeriesBlock]:
        """Raw samples of the series matching each selector, with timestamps in ``[start, end]``.

        A series may come as several blocks (one per time window of ``window`` seconds), in time
        order. A chunk that fails is recorded in ``problems`` and the rest are still read; a
        server that cannot be reached at all raises :class:`TSDBError` at once.
        """
        start_ms, end_ms = _ms(start), _ms(end)
        _ = self.kind  # detect now, so an unreachable server fails here and not chunk by chunk
        windows = time_windows(start_ms, end_ms, max(1, _ms(self.window)))
        for matcher in matchers:
            for selector, labels in self._plan(matcher, start, end):
                for window in windows:
                    try:
                        yield from self._read_chunk(selector, labels, window)
                    except TSDBError as exc:
                        self.problems.add(f"{exc.url} {selector} [{_sec(window[0])}, {_sec(window[1])})", exc.reason)

    def _plan(self, matcher: str, start: float, end: float) -> list[tuple[str, list[Mapping[str, str]] | None]]:
        """Selectors to read for ``matcher``; their series are None when the server would not list them."""
        try:
            listed = self._series_labels(matcher, start, end)
        except TSDBError as exc:
            if exc.status == 400 or exc.status == 422:  # a bad selector: reading it would fail the same way
                self.problems.add(f"{exc.url} {matcher}", exc.reason)
                return []
            self.problems.add(f"{exc.url} {matcher}", f"cannot list series, reading unsplit: {exc.reason}")
            return [(matcher, None)]
        if not listed:
            return []
        return [(sel, list(members)) for sel, members in split_selector(matcher, listed, self.max_series)]

    def _read_chunk(
        self, selector: str, series: list[Mapping[str, str]] | None, window: tuple[int, int]
    ) -> list[SeriesBlock]:
        where = f"{self.shown} {selector} [{_sec(window[0])}, {_sec(window[1])})"
        if self.kind == "victoriametrics":
            # Export bounds are inclusive; the window filter below makes them half-open.
            params: dict[str, str | Sequence[str]] = {
                "match[]": selector,
                "start": _sec(window[0]),
                "end": _sec(window[1] - 1),
            }
            if self.vm_format == "csv" and series is not None:
                params["format"], columns = csv_format(k for s in series for k in s)
                body = self._get("/api/v1/export/csv", params, selector).content
                return merge_blocks(vm_csv_blocks(body, columns, where, self.problems, window))
            lines = self._get("/api/v1/export", params, selector).content.splitlines()
            return merge_blocks(_clipped(read_vm_jsonl(lines, where, self.problems), window))
        # A range selector one ms wider than the window at its last ms: raw samples, whichever side
        # of the range Prometheus treats as open (2.x closed, 3.x left-open); the filter trims it.
        query = f"{selector}[{window[1] - window[0]}ms]"
        data = self._api("/api/v1/query", {"query": query, "time": _sec(window[1] - 1)}, query)
        return merge_blocks(prom_blocks(data, where, self.problems, window))


def _clipped(blocks: Iterable[SeriesBlock], window: tuple[int, int]) -> Iterator[SeriesBlock]:
    """Blocks trimmed to the half-open ms window, empty ones dropped."""
    for block in blocks:
        ms = np.rint(block.timestamps * 1000.0)
        keep = (ms >= window[0]) & (ms < window[1])
        if keep.all():
            yield block
        elif keep.any():
            yield SeriesBlock(block.key, block.timestamps[keep], block.values[keep], block.mtype)


def _server_error(resp: httpx.Response) -> str:
    """The server's own words: Prometheus' JSON ``error``, else the start of the body."""
    try:
        doc = orjson.loads(resp.content)
        if isinstance(doc, dict) and doc.get("error"):
            return str(doc["error"])
    except orjson.JSONDecodeError:
        pass
    return resp.text.strip()[:500] or resp.reason_phrase
