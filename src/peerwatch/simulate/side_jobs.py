"""Work that is not the main job: nodes with their own unsynchronised load, and a small second job.

Real clusters have dev nodes and small jobs beside the big one. Each side node (``ClusterSpec.
side_nodes``) runs work of its own for most of the run: its own level (20-80 % of full load), its
own rhythm (a sine or an on/off duty cycle, period 2-40 min, drawn per node), its own noise and
pauses at moments nobody else shares. The second job's nodes (``second_job_nodes``) share one
load: a level of 55-90 %, a slow common wander and checkpoints of their own, all at once.

The result is a share of full load per node and step (NaN: not on side work); the profiles turn
it into utilisation, power, heat, clocks and traffic between the idle and the compute phase
(``profiles.mixed``), so every signal of such a node follows its own load.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.simulate.cluster import Layout
from peerwatch.simulate.events import Event
from peerwatch.simulate.targets import Grid


@dataclass(frozen=True, slots=True)
class SideJobs:
    load: FloatArray  # (N, T) share of full load on side work; NaN where a node is not on any
    events: tuple[Event, ...]


def _span(rng: np.random.Generator, t0: float, t1: float) -> tuple[float, float]:
    """Most side work runs all along; some starts or ends inside the run."""
    s = t0 if rng.random() < 0.5 else t0 + float(rng.uniform(0.05, 0.3)) * (t1 - t0)
    e = t1 if rng.random() < 0.6 else t0 + float(rng.uniform(0.7, 0.95)) * (t1 - t0)
    return s, e


def _lone_load(rng: np.random.Generator, times: FloatArray, step: float) -> tuple[FloatArray, str]:
    level = float(rng.uniform(0.2, 0.8))
    period = 60.0 * float(rng.uniform(2.0, 40.0))
    amp = float(rng.uniform(0.03, 0.2))
    phase = float(rng.uniform(0.0, 1.0))
    pos = np.mod(times / period + phase, 1.0)
    if rng.random() < 0.5:
        shape, wave = "sine", np.sin(2 * np.pi * pos)
    else:  # bursts: load for part of each period, less for the rest
        duty = float(rng.uniform(0.3, 0.8))
        shape, wave = "bursts", np.where(pos < duty, 1.0, -1.0)
    sd = float(rng.uniform(0.01, 0.06))
    noise = np.zeros(times.size)
    keep = np.exp(-step / 120.0)  # noise that persists a couple of minutes, as a job's phases do
    shocks = rng.normal(0.0, sd, times.size)
    for k in range(1, times.size):
        noise[k] = keep * noise[k - 1] + np.sqrt(1 - keep**2) * shocks[k]
    load = level + amp * wave + noise
    for _ in range(int(rng.poisson((times[-1] - times[0]) / 3600.0))):  # its own pauses, about hourly
        s = float(rng.uniform(times[0], times[-1]))
        load[(times >= s) & (times < s + 60.0 * float(rng.uniform(1.0, 5.0)))] = 0.05
    detail = f"own work: level {100 * level:.0f}%, {shape} every {period / 60:.0f} min ±{100 * amp:.0f}%"
    return np.clip(load, 0.02, 1.0), detail


def _second_load(rng: np.random.Generator, times: FloatArray, nodes: int) -> tuple[FloatArray, str]:
    level = float(rng.uniform(0.55, 0.9))
    wander = float(rng.uniform(0.02, 0.06)) * np.sin(2 * np.pi * times / (60.0 * float(rng.uniform(30, 90))))
    shared = level + wander
    every = 60.0 * float(rng.uniform(20.0, 50.0))
    s = times[0] + every * float(rng.uniform(0.2, 1.0))
    while s < times[-1]:  # its own checkpoints, every node at once
        shared[(times >= s) & (times < s + 60.0 * float(rng.uniform(1.5, 4.0)))] = 0.1
        s += every * float(rng.uniform(0.9, 1.1))
    load = shared[None, :] + rng.normal(0.0, float(rng.uniform(0.005, 0.02)), (nodes, times.size))
    detail = f"second synchronous job: level {100 * level:.0f}%, checkpoint every {every / 60:.0f} min"
    return np.clip(load, 0.02, 1.0), detail


def plan_side_jobs(grid: Grid, layout: Layout, seed: int) -> SideJobs:
    """The side work of a run, drawn from ``seed`` (nothing when the spec has no side or second-job nodes)."""
    spec = layout.spec
    load = np.full((layout.n, grid.steps), np.nan)
    events: list[Event] = []
    if spec.side_nodes == 0 and spec.second_job_nodes == 0:
        return SideJobs(load, ())
    rng = np.random.default_rng([seed, 13])
    times, t0, t1 = grid.times, grid.start, grid.end
    first = spec.training
    if spec.second_job_nodes:
        rows = np.arange(first, first + spec.second_job_nodes)
        s, e = _span(rng, t0, t1)
        on = (times >= s) & (times < e)
        values, detail = _second_load(rng, times, rows.size)
        load[rows[:, None], np.flatnonzero(on)[None, :]] = values[:, on]
        events += [Event("second_job", s, e, node=layout.names[i], detail=detail) for i in rows]
    for i in range(first + spec.second_job_nodes, first + spec.second_job_nodes + spec.side_nodes):
        s, e = _span(rng, t0, t1)
        on = (times >= s) & (times < e)
        values, detail = _lone_load(rng, times, grid.step)
        load[i, on] = values[on]
        events.append(Event("side_job", s, e, node=layout.names[i], detail=detail))
    return SideJobs(load, tuple(events))
