"""Scrape targets and their schedule: which sample of which exporter exists at which time.

Every (node, exporter) target has its own scrape phase and millisecond jitter, misses a few per
cent of scrapes, and restarts now and then (``up`` = 0 for a scrape or two). Real clusters look
like this (GUIDE 7), so a recording that shared timestamps across exporters would be too easy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from peerwatch.model import FloatArray

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Exporter:
    """One exporter kind: the job name Prometheus gives it and the port it listens on."""

    key: str
    job: str
    port: int
    discovered: tuple[tuple[str, str], ...] = ()  # target labels its service discovery adds


EXPORTERS: tuple[Exporter, ...] = (
    Exporter("node", "node-exporter", 9100),
    Exporter("dcgm", "dcgm-exporter", 9400),
    Exporter("allsmi", "all-smi", 9090),  # all-smi's documented `api --port 9090`
    # Backend.AI's own Prometheus set-up discovers its agents over HTTP with a service_group label.
    Exporter("backendai", "backendai-agent", 6003, (("service_group", "agent"),)),
)
EXPORTER_INDEX: dict[str, int] = {e.key: i for i, e in enumerate(EXPORTERS)}

MISSED_RATE = 0.015  # scrape skipped entirely: no sample, no `up`
FAILED_RATE = 0.004  # scrape attempted and failed: `up` = 0
RESTART_PER_HOUR = 0.004  # exporter process restarts per target-hour


@dataclass(frozen=True, slots=True)
class Grid:
    """The simulation's step grid: ``steps`` steps of ``step`` seconds from ``start``."""

    start: float
    step: float
    steps: int

    @property
    def times(self) -> FloatArray:
        return self.start + self.step * np.arange(self.steps, dtype=np.float64)

    @property
    def end(self) -> float:
        return self.start + self.step * self.steps

    def index(self, ts: float) -> int:
        """The step at or after ``ts``, clipped to the grid."""
        return int(np.clip(np.ceil((ts - self.start) / self.step), 0, self.steps))


@dataclass(frozen=True, slots=True)
class Schedule:
    """Scrape times and outcomes per target: arrays of shape (nodes, exporters, steps)."""

    times: FloatArray  # when Prometheus scraped (phase + jitter), seconds
    attempted: BoolArray  # Prometheus tried (False = skipped: no `up` sample either)
    ok: BoolArray  # the exporter answered (False with attempted = `up` 0)
    restarts: tuple[tuple[int, int, float, float], ...]  # (node, exporter, start_ts, end_ts)

    def with_down(self, node: int, exporter: int | None, k0: int, k1: int | None = None) -> Schedule:
        """A copy where the target(s) fail from step ``k0`` to ``k1`` (node down or exporter stopped)."""
        ok = self.ok.copy()
        sel = slice(None) if exporter is None else exporter
        ok[node, sel, k0:k1] = False
        return Schedule(self.times, self.attempted, ok, self.restarts)


def plan_schedule(grid: Grid, nodes: int, seed: int, restart_rate: float = RESTART_PER_HOUR) -> Schedule:
    """Draw scrape phases, jitter, missed and failed scrapes and exporter restarts."""
    rng = np.random.default_rng([seed, 2])
    x = len(EXPORTERS)
    phase = rng.uniform(0.0, grid.step, (nodes, x, 1))
    jitter = rng.normal(0.0, 0.004, (nodes, x, grid.steps))  # a few ms
    times = np.round(grid.times[None, None, :] + phase + jitter, 3)
    attempted = rng.random((nodes, x, grid.steps)) >= MISSED_RATE
    ok = rng.random((nodes, x, grid.steps)) >= FAILED_RATE
    hours = grid.steps * grid.step / 3600.0
    count = rng.poisson(restart_rate * hours * nodes * x)
    restarts = []
    for _ in range(int(count)):
        n, e = int(rng.integers(nodes)), int(rng.integers(x))
        k0 = int(rng.integers(grid.steps))
        k1 = min(grid.steps, k0 + int(rng.integers(1, 3)))  # down for a minute or so
        ok[n, e, k0:k1] = False
        restarts.append((n, e, float(grid.times[k0]), float(grid.start + grid.step * k1)))
    restarts.sort()
    return Schedule(times, attempted, ok, tuple(restarts))
