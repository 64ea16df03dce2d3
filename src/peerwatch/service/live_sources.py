"""Where the live service gets its samples: a TSDB read step by step, or exporters scraped directly.

Both fill the same :class:`SampleBuffer` and say, per attempt, up to which data time the buffer is
complete and whether the source failed. A source never raises for a failed attempt: the failure
is the attempt's ``error`` (the whole source) or ``down`` (single scrape targets), which the
service turns into a "monitoring blind" alarm.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from peerwatch.alarms.errors import ConfigError
from peerwatch.frames.buffer import SampleBuffer
from peerwatch.model import ProblemLog, SeriesBlock
from peerwatch.service.clock import Clock
from peerwatch.service.config import ScrapeConfig, TsdbConfig
from peerwatch.service.discovery import FileDiscovery
from peerwatch.sources.scrape import (
    DATA_TIME_HEADER,
    HEALTH,
    Fetched,
    Target,
    TargetResult,
    fetch_each,
    health_blocks,
    target_blocks,
)
from peerwatch.sources.scrape_cache import ScrapeCache, split_lines
from peerwatch.sources.tsdb import TSDBClient, TSDBError


@dataclass(frozen=True, slots=True)
class Fetch:
    """One collection attempt."""

    at: float  # data time of the attempt
    complete_until: float  # the buffer holds every sample up to this data time that it will get
    samples: int  # new samples added
    targets: int = 0  # scrape targets tried (0 for a TSDB)
    down: tuple[tuple[str, str], ...] = ()  # (target URL, why) of failed scrapes
    error: str | None = None  # the whole source failed
    backlog: bool = False  # the source holds more up to ``at`` than this read took: collect again now


class LiveSource(Protocol):
    """A source the service polls once per step."""

    name: str
    catch_up: bool  # a late poll still covers its own step (each poll is one step's data)

    def next_due(self, after: float) -> float:
        """Data time of the next attempt after data time ``after``."""
        ...

    def collect(self, now: float, buffer: SampleBuffer) -> Fetch:
        """Fetch what is new at data time ``now`` into ``buffer``."""
        ...

    def close(self) -> None: ...


class ScrapeSource:
    """Exporters scraped once per step, at mid-step so a round never straddles a step boundary.

    On a time-compressed clock every sample of a round is stamped with the round's scheduled data
    time (exporter-supplied timestamps are wall times and would not fit), so a round that starts
    late still lands in its own step; the round tells the exporters that time (``DATA_TIME_HEADER``),
    which the simulated ones answer for.
    """

    def __init__(self, config: ScrapeConfig, step: float, clock: Clock, extra: Sequence[Target] = ()) -> None:
        self.config, self.step, self.clock = config, step, clock
        self.static = [Target(t.url, t.job, dict(t.labels)) for t in config.targets] + list(extra)
        self.discovery = FileDiscovery(config.file_sd)
        self.catch_up = True
        self.cache = ScrapeCache()
        self.name = f"scrape of {len(self.static)} targets" + (
            f" and {len(config.file_sd)} file_sd files" if config.file_sd else ""
        )

    def targets(self) -> list[Target]:
        seen: dict[str, Target] = {t.url: t for t in self.static}
        for t in self.discovery.targets():
            seen.setdefault(t.url, t)
        return list(seen.values())

    def next_due(self, after: float) -> float:
        half = self.step / 2
        return (math.floor((after - half) / self.step) + 1) * self.step + half

    def collect(self, now: float, buffer: SampleBuffer) -> Fetch:
        targets = self.targets()
        complete = math.ceil(now / self.step) * self.step
        if not targets:
            errors = "; ".join(self.discovery.errors.values()) or "no targets configured or discovered"
            return Fetch(now, complete, 0, error=errors)
        # A round must end within its step, in wall seconds (a time-compressed step is short).
        timeout = min(self.config.timeout, max(0.2, 0.8 * self.step / self.clock.speed))
        added = 0
        down: list[tuple[str, str]] = []
        problems = ProblemLog(limit=50)
        # Each target's samples go to the buffer as it is parsed: a round's million series objects
        # never live at once (they would stay in the interpreter's arenas as slack).
        headers = None if self.clock.real else {DATA_TIME_HEADER: repr(now)}
        for target, got in fetch_each(targets, timeout=timeout, headers=headers):
            result, n = self._take(target, got, now, buffer, problems)
            added += n
            if not result.up:
                down.append((result.target.url, result.error or "down"))
        self.cache.retain({_cache_key(t) for t in targets})  # targets gone from discovery
        error = f"all {len(targets)} scrape targets failed" if len(down) == len(targets) else None
        return Fetch(now, complete, added, len(targets), tuple(down), error)

    def _take(
        self, target: Target, got: Fetched, now: float, buffer: SampleBuffer, problems: ProblemLog
    ) -> tuple[TargetResult, int]:
        """One target's samples into ``buffer``: through the scrape cache if it knows every line."""
        key = _cache_key(target)
        lines = split_lines(got.body) if got.body is not None else None
        if lines is not None and (ids := self.cache.ids(key, lines)) is not None:
            result = TargetResult(target, True, got.started, got.duration, len(ids))
            if not self.clock.real:
                ts = np.full(len(ids), now)
            elif lines.stamps is None:
                ts = np.full(len(ids), got.started)
            else:
                ts = np.where(np.isnan(lines.stamps), got.started, lines.stamps)
            added = buffer.add_ids(ids, ts, lines.values)
            return result, added + buffer.add(self._stamped(health_blocks(result), now))
        before = len(problems)
        result, blocks = target_blocks(target, got, problems)
        added = buffer.add(self._stamped(blocks, now))
        own = blocks[: len(blocks) - len(HEALTH)]
        if lines is not None and result.up and len(problems) == before and all(len(b) == 1 for b in own):
            values = np.array([b.values[0] for b in own])
            self.cache.learn(key, lines, buffer.ids_of(b.key for b in own), values)
        else:
            self.cache.forget(key)
        return result, added

    def _stamped(self, blocks: Iterable[SeriesBlock], ts: float) -> Iterable[SeriesBlock]:
        if self.clock.real:
            return blocks
        return [SeriesBlock(b.key, np.full(len(b), ts), b.values, b.mtype) for b in blocks]

    def close(self) -> None:
        pass


def _cache_key(target: Target) -> tuple[str, tuple[tuple[str, str], ...]]:
    # Its labels too: the same URL relabelled by discovery gives other series.
    return target.url, tuple(sorted(target.target_labels().items()))


class TsdbSource:
    """A Prometheus or VictoriaMetrics read step by step: the whole window first, then what is new.

    A step is read ``delay`` seconds after it ends (ingestion latency); each read goes back two
    steps more than the last one ended, for samples that arrived late (the buffer drops repeats).
    A read spans at most ``READ_STEPS`` new steps: the window at start-up (or a gap after an
    outage) comes as a backlog of reads, each judged before the next is read, so the raw samples
    of a 1,000-node cluster's two hours are never all in memory at once.
    """

    READ_STEPS = 5

    def __init__(self, config: TsdbConfig, step: float, window: float) -> None:
        self.config, self.step, self.window = config, step, window
        self.name = config.shown_url
        self.catch_up = False  # each read takes everything since the last one
        try:
            self.client = TSDBClient(
                config.url,
                kind=config.kind,
                timeout=config.timeout,
                retries=1,
                vm_format=config.format,
                http=config.http_options(),
            )
        except TSDBError as exc:  # a CA file or client certificate that cannot be used
            raise ConfigError(f"source.tsdb: {exc.reason}") from None
        self.read_until: float | None = None

    def next_due(self, after: float) -> float:
        d = self.config.delay
        return (math.floor((after - d) / self.step) + 1) * self.step + d

    def collect(self, now: float, buffer: SampleBuffer) -> Fetch:
        end = math.floor((now - self.config.delay) / self.step) * self.step
        new = end - self.window if self.read_until is None else max(end - self.window, self.read_until)
        stop = min(end, new + self.READ_STEPS * self.step)
        start = new if self.read_until is None else max(end - self.window, self.read_until - 2 * self.step)
        problems = ProblemLog(limit=50)
        self.client.problems = problems
        try:
            # The read is half-open; a sample exactly at ``stop`` belongs to the last step: read it now.
            added = buffer.add(self.client.read(self.config.matchers, start, stop + 0.001))
        except TSDBError as exc:
            return Fetch(now, end, 0, error=str(exc))
        if not added and problems.problems:
            return Fetch(now, end, 0, error=str(problems.problems[0]))
        self.read_until = stop
        return Fetch(now, stop, added, backlog=stop < end)

    def close(self) -> None:
        self.client.close()
