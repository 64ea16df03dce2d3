"""Scraping exporters' ``/metrics`` directly, labelled the way Prometheus labels them.

Targets are fetched concurrently by a thread pool (the work is waiting on sockets) and parsed in
the caller's thread, in target order, with the lenient exposition parser, so the result and its
problems are deterministic. Every target gets ``up``, ``scrape_duration_seconds`` and
``scrape_samples_scraped`` series; a target that is down or serves garbage gives ``up`` 0 and a
problem, never an exception.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
import numpy as np

from peerwatch.model import ProblemLog, SeriesBlock, SeriesKey, labels_of
from peerwatch.sources.exposition import ExpositionParser, blocks_from_samples

# What Prometheus asks for, minus protobuf and OpenMetrics: plain text is what every exporter serves.
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
MAX_BODY_BYTES = 64 << 20
# On a time-compressed clock (a demo), the data time a scrape round is for, in epoch seconds: the
# simulated exporters (simulate/serve.py) answer with that time's values, so a round that outlasts its
# step's share of wall time (0.5 s at 60x) still reads one step, the one its samples are stamped with.
DATA_TIME_HEADER = "X-Peerwatch-Data-Time"
HEALTH = ("up", "scrape_duration_seconds", "scrape_samples_scraped")  # series Prometheus adds per target


@dataclass(frozen=True, slots=True)
class Target:
    """An exporter endpoint; ``labels`` are added to every sample (Prometheus static_configs labels)."""

    url: str
    job: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    def instance(self) -> str:
        """``host:port`` of the URL, the port filled in from the scheme as Prometheus does."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{host}:{port}"

    def target_labels(self) -> dict[str, str]:
        """Labels put on every series of this target: ``instance``, ``job`` (if any), then ``labels``."""
        out = {"instance": self.instance()}
        if self.job:
            out["job"] = self.job
        out.update(self.labels)
        return {k: v for k, v in out.items() if v}


@dataclass(frozen=True, slots=True)
class TargetResult:
    """How one target's scrape went."""

    target: Target
    up: bool
    timestamp: float  # scrape start, epoch seconds
    duration: float  # seconds
    samples: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """Blocks of all targets (their own samples plus ``up`` and co.), per-target outcomes, problems."""

    blocks: list[SeriesBlock]
    targets: list[TargetResult]
    problems: ProblemLog


@dataclass(frozen=True, slots=True)
class Fetched:
    """One target's answer: its body, or why there is none."""

    started: float
    duration: float
    body: bytes | None
    error: str | None


def scrape(
    targets: Sequence[Target],
    *,
    timeout: float = 10.0,
    concurrency: int = 32,
    problems: ProblemLog | None = None,
    headers: Mapping[str, str] | None = None,
) -> ScrapeResult:
    """Scrape every target once, concurrently; never raises for a target that fails."""
    problems = problems if problems is not None else ProblemLog()
    blocks: list[SeriesBlock] = []
    results: list[TargetResult] = []
    for result, own in scrape_each(
        targets, timeout=timeout, concurrency=concurrency, problems=problems, headers=headers
    ):
        blocks.extend(own)
        results.append(result)
    return ScrapeResult(blocks, results, problems)


def scrape_each(
    targets: Sequence[Target],
    *,
    timeout: float = 10.0,
    concurrency: int = 32,
    problems: ProblemLog | None = None,
    headers: Mapping[str, str] | None = None,
) -> Iterator[tuple[TargetResult, list[SeriesBlock]]]:
    """Scrape every target once, concurrently; each target's outcome and blocks (its own samples,
    then ``up`` and co.) as it is parsed, in the order of ``targets``. A consumer that stores each
    target's blocks before taking the next never holds a whole round's series objects at once."""
    problems = problems if problems is not None else ProblemLog()
    for target, got in fetch_each(targets, timeout=timeout, concurrency=concurrency, headers=headers):
        yield target_blocks(target, got, problems)


def fetch_each(
    targets: Sequence[Target],
    *,
    timeout: float = 10.0,
    concurrency: int = 32,
    headers: Mapping[str, str] | None = None,
) -> Iterator[tuple[Target, Fetched]]:
    """Every target's body fetched concurrently, handed over in the order of ``targets``; at most
    ``2 * concurrency`` bodies are fetched ahead of the consumer."""
    if not targets:
        return
    hdrs = {"Accept": ACCEPT, "X-Prometheus-Scrape-Timeout-Seconds": f"{timeout:g}", **(headers or {})}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with (
        httpx.Client(timeout=timeout, headers=hdrs, limits=limits, follow_redirects=True) as client,
        ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(targets)))) as pool,
    ):
        ahead: deque[tuple[Target, Future[Fetched]]] = deque()
        for target in targets:
            ahead.append((target, pool.submit(_fetch, client, target.url)))
            if len(ahead) >= 2 * concurrency:
                target, got = ahead.popleft()
                yield target, got.result()
        while ahead:
            target, got = ahead.popleft()
            yield target, got.result()


def target_blocks(target: Target, got: Fetched, problems: ProblemLog) -> tuple[TargetResult, list[SeriesBlock]]:
    """A fetched target's outcome and blocks: its own samples, labelled, then ``up`` and co."""
    own, result = _own_blocks(target, got, problems)
    own.extend(health_blocks(result))
    return result, own


def _fetch(client: httpx.Client, url: str) -> Fetched:
    started, t0 = time.time(), time.perf_counter()
    try:
        with client.stream("GET", url) as resp:
            if resp.status_code != 200:
                return Fetched(started, time.perf_counter() - t0, None, f"HTTP {resp.status_code}")
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    return Fetched(started, time.perf_counter() - t0, None, f"body over {MAX_BODY_BYTES} bytes")
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        return Fetched(started, time.perf_counter() - t0, None, f"{type(exc).__name__}: {exc or 'no detail'}")
    return Fetched(started, time.perf_counter() - t0, b"".join(chunks), None)


def _own_blocks(target: Target, got: Fetched, problems: ProblemLog) -> tuple[list[SeriesBlock], TargetResult]:
    if got.body is None:
        problems.add(target.url, f"scrape failed: {got.error}")
        return [], TargetResult(target, False, got.started, got.duration, 0, got.error)
    before = len(problems)
    parser = ExpositionParser(target.url, strict=False, problems=problems)
    parsed = list(blocks_from_samples(parser.parse_text(got.body), parser.declared_type, got.started))
    if not parsed and len(problems) > before:
        error = f"no samples parsed ({len(problems) - before} problems): not a metrics exposition"
        problems.add(target.url, error)
        return [], TargetResult(target, False, got.started, got.duration, 0, error)
    tl = target.target_labels()
    blocks = [SeriesBlock(_relabel(b.key, tl), b.timestamps, b.values, b.mtype) for b in parsed]
    return blocks, TargetResult(target, True, got.started, got.duration, sum(len(b) for b in blocks))


def _relabel(key: SeriesKey, target_labels: Mapping[str, str]) -> SeriesKey:
    """Target labels win; the sample's own clashing labels become ``exported_<name>`` (honor_labels: false).

    Empty label values are dropped, as Prometheus drops them on ingestion, so a scraped series has
    the same key as the one read back from a TSDB.
    """
    labels = {k: v for k, v in key.labels if v}
    for name in target_labels:
        if name in labels:
            renamed = "exported_" + name
            while renamed in labels or renamed in target_labels:  # first free name, as Prometheus picks
                renamed = "exported_" + renamed
            labels[renamed] = labels.pop(name)
    labels.update(target_labels)
    return SeriesKey(key.name, labels_of(labels))


def health_blocks(result: TargetResult) -> list[SeriesBlock]:
    """``up``, ``scrape_duration_seconds`` and ``scrape_samples_scraped`` at the scrape time."""
    labels = labels_of(result.target.target_labels())
    ts = np.array([result.timestamp])
    values = (1.0 if result.up else 0.0, result.duration, float(result.samples))
    return [
        SeriesBlock(SeriesKey(name, labels), ts, np.array([v]), "gauge") for name, v in zip(HEALTH, values, strict=True)
    ]
