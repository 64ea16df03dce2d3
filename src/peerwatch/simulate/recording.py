"""Run a scenario end to end and write it: VictoriaMetrics JSON lines (or Prometheus text) + ``labels.json``.

Order of a run: layout -> scrape schedule -> benign events -> fault plan (with the stalls and
restarts hard failures cause) -> activity -> healthy signals -> fault transforms -> exporter
families -> samples where the target was scraped and the entity existed. Every stage draws from
its own generator seeded with ``(seed, stage)``, so the same seed gives byte-identical files.
"""

from __future__ import annotations

import gzip
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import BinaryIO

import numpy as np
import orjson

from peerwatch.model import SeriesBlock, SeriesKey
from peerwatch.simulate import fam_allsmi, fam_backendai, fam_dcgm, fam_node
from peerwatch.simulate.cluster import Layout, build_layout
from peerwatch.simulate.events import Event, plan_benign
from peerwatch.simulate.families import ExporterTable, SeriesSet, Src, realise, target_labels
from peerwatch.simulate.fault_kit import Ctx, Down
from peerwatch.simulate.faults import Fault, plan_faults
from peerwatch.simulate.glitches import glitch, restarted_exporters
from peerwatch.simulate.gpu_baseline import gpu_signals
from peerwatch.simulate.host_baseline import host_signals
from peerwatch.simulate.library import inject
from peerwatch.simulate.phases import build_activity
from peerwatch.simulate.rates import draw_faults
from peerwatch.simulate.scenario import Scenario
from peerwatch.simulate.side_jobs import plan_side_jobs
from peerwatch.simulate.signals import Signals
from peerwatch.simulate.targets import EXPORTER_INDEX, EXPORTERS, BoolArray, Grid, Schedule, plan_schedule
from peerwatch.sources.replay import write_vm_jsonl

TABLES: tuple[ExporterTable, ...] = (fam_node.TABLE, fam_dcgm.TABLE, fam_allsmi.TABLE, fam_backendai.TABLE)


@dataclass(frozen=True, eq=False)
class Simulation:
    """A simulated run: everything needed to emit its series and its ground truth."""

    scenario: Scenario
    layout: Layout
    grid: Grid
    src: Src
    faults: tuple[Fault, ...]
    events: tuple[Event, ...]

    @property
    def schedule(self) -> Schedule:
        return self.src.sched

    def scraped(self) -> BoolArray:
        """(N, exporters, T): the target answered a scrape at that step."""
        return self.schedule.attempted & self.schedule.ok

    def series(self, names: Collection[str] | None = None) -> Iterator[SeriesSet]:
        """Every family of every exporter (or those in ``names``), then the XID family and ``up``."""
        cache: dict[str, list[list[tuple[tuple[str, str], ...]]]] = {}
        for table in TABLES:
            for fam in table.families:
                if names is None or fam.name in names:
                    yield realise(fam, table, self.src, cache)
        if names is None or fam_dcgm.XID_NAME in names:
            yield from fam_dcgm.xid_series(self.src)
        if names is None or "up" in names:
            yield self._up()

    def _up(self) -> SeriesSet:
        n, x = self.layout.n, len(EXPORTERS)
        labels = tuple(
            tuple(sorted(target_labels(EXPORTERS[e], self.layout.names[i]).items())) for i in range(n) for e in range(x)
        )
        ok = self.schedule.ok.reshape(n * x, -1).astype(np.float64)
        return SeriesSet(
            "up",
            "gauge",
            "1 if the target was scraped successfully, else 0",
            -1,
            np.repeat(np.arange(n, dtype=np.int64), x),
            labels,
            ok,
            self.schedule.attempted.reshape(n * x, -1),
        )

    def blocks(
        self, names: Collection[str] | None = None, steps: slice = slice(None), sets: Iterable[SeriesSet] | None = None
    ) -> Iterator[SeriesBlock]:
        """One block per series with the samples Prometheus would have stored (on grid ``steps``;
        from ``sets`` when the series are already realised)."""
        scraped, times = self.scraped(), self.schedule.times
        x_count = len(EXPORTERS)
        window = np.zeros(self.grid.steps, dtype=bool)
        window[steps] = True
        for ss in self.series(names) if sets is None else sets:
            for s in range(len(ss.labels)):
                n = int(ss.nodes[s])
                x = ss.exporter if ss.exporter >= 0 else s % x_count
                mask = scraped[n, x] & window if ss.exporter >= 0 else window
                if ss.present is not None:
                    mask = mask & ss.present[s]
                if not mask.any():
                    continue
                yield SeriesBlock(SeriesKey(ss.name, ss.labels[s]), times[n, x][mask], ss.values[s][mask], ss.mtype)

    def labels(self) -> dict[str, object]:
        """Ground truth in the GUIDE 3.2 shape, plus the scenario's identity."""
        spares = [self.layout.names[i] for i in self.layout.spares]
        return {
            "scenario": self.scenario.name,
            "description": self.scenario.description,
            "seed": self.scenario.seed,
            "start_ts": self.grid.start,
            "end_ts": self.grid.end,
            "step": self.grid.step,
            "nodes": list(self.layout.names),
            "spares": spares,
            "faults": [f.as_json() for f in self.faults],
            "events": [e.as_json() for e in self.events],
        }


def simulate(scenario: Scenario) -> Simulation:
    """Build the whole run of a scenario in memory (arrays of nodes x entities x steps)."""
    spec, seed = scenario.spec, scenario.seed
    layout = build_layout(spec, seed)
    grid = Grid(scenario.start_ts, spec.scrape_interval, max(2, round(scenario.hours * 3600 / spec.scrape_interval)))
    sched = plan_schedule(grid, layout.n, seed, scenario.exporter_restarts_per_hour)
    light = layout.spares[: spec.light_job_nodes]
    benign = plan_benign(grid, layout.names, light, scenario.benign, seed)
    requests = list(scenario.faults)
    if scenario.random_faults:
        requests += draw_faults(spec.training * spec.hardware.gpus, scenario.hours, seed, limit=spec.training // 2)
    plan = plan_faults(requests, grid, layout, seed)
    events = sorted([*benign, *plan.events], key=lambda e: (e.start_ts, e.kind))
    side = plan_side_jobs(grid, layout, seed)
    events = sorted([*events, *side.events], key=lambda e: (e.start_ts, e.kind))
    act = build_activity(grid, spec.training, events, plan.membership, seed, layout.names, side.load)
    dcgm_times = sched.times[:, EXPORTER_INDEX["dcgm"], :]
    arrays = {**gpu_signals(layout, grid, act, dcgm_times, seed), **host_signals(layout, grid, act, events, seed)}
    glitch(arrays, events, layout, grid)
    sig = Signals(MappingProxyType(arrays))
    sig, downs = inject(sig, plan.faults, Ctx(grid, layout, np.random.default_rng([seed, 99])), seed)
    agent = EXPORTER_INDEX["backendai"]
    downs += tuple(
        Down(layout.index(e.node), agent, grid.index(e.start_ts), grid.index(e.end_ts) + 1)
        for e in events
        if e.kind == "agent_restart" and e.node is not None
    )
    with_job, with_job_events = restarted_exporters(events, layout.names, grid, scenario.benign.restart_exporters, seed)
    downs += with_job
    sched = _apply_downs(sched, downs, np.random.default_rng([seed, 8]))
    restarts = tuple(
        Event("exporter_restart", s, e, node=layout.names[n], detail=EXPORTERS[x].job) for n, x, s, e in sched.restarts
    )
    veth = _veth_names(layout.n, act.epoch.max() + 1, seed)
    src = Src(sig, layout, grid, act, sched, veth)
    all_events = tuple(sorted([*events, *restarts, *with_job_events], key=lambda e: (e.start_ts, e.kind, e.node or "")))
    return Simulation(scenario, layout, grid, src, plan.faults, all_events)


def _apply_downs(sched: Schedule, downs: tuple[Down, ...], rng: np.random.Generator) -> Schedule:
    ok = sched.ok.copy()
    for d in downs:
        sel = slice(None) if d.exporter is None else d.exporter
        window = ok[d.node, sel, d.k0 : d.k1]
        fail = rng.random(window.shape) < d.every
        ok[d.node, sel, d.k0 : d.k1] = window & ~fail
    return Schedule(sched.times, sched.attempted, ok, sched.restarts)


def _veth_names(nodes: int, epochs: int, seed: int) -> tuple[tuple[str, ...], ...]:
    """A new random ``veth`` name per node and job epoch, as container runtimes create them."""
    raw = np.random.default_rng([seed, 9]).integers(0, 16**7, (nodes, epochs))
    return tuple(tuple(f"veth{int(v):07x}" for v in row) for row in raw)


@dataclass(frozen=True, slots=True)
class Written:
    """What :func:`write_recording` produced."""

    metrics: Path
    labels: Path
    series: int
    samples: int


def write_recording(sim: Simulation, out: Path, fmt: str = "vm-jsonl", compress: bool = False) -> Written:
    """Write ``metrics.jsonl`` (or ``metrics.prom``), optionally gzipped, and ``labels.json`` into ``out``."""
    if fmt not in ("vm-jsonl", "prom"):
        raise ValueError(f"unknown recording format {fmt!r}; use vm-jsonl or prom")
    out.mkdir(parents=True, exist_ok=True)
    name = "metrics.jsonl" if fmt == "vm-jsonl" else "metrics.prom"
    path = out / (name + (".gz" if compress else ""))
    counter = _Counting(sim.blocks())
    with _open(path, compress) as fh:
        if fmt == "vm-jsonl":
            write_vm_jsonl(counter, fh)
        else:
            from peerwatch.simulate.exposition import write_prom_text

            write_prom_text(counter, fh)
    labels = out / "labels.json"
    labels.write_bytes(orjson.dumps(sim.labels(), option=orjson.OPT_INDENT_2) + b"\n")
    return Written(path, labels, counter.series, counter.samples)


@contextmanager
def _open(path: Path, compress: bool) -> Iterator[BinaryIO]:
    with path.open("wb") as raw:
        if not compress:
            yield raw
            return
        # mtime=0 and no file name keep gzip output byte-identical across runs
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=1) as gz:
            yield gz  # type: ignore[misc]


class _Counting:
    """Passes blocks through while counting series and samples."""

    def __init__(self, blocks: Iterator[SeriesBlock]) -> None:
        self._blocks = blocks
        self.series = 0
        self.samples = 0

    def __iter__(self) -> Iterator[SeriesBlock]:
        for b in self._blocks:
            self.series += 1
            self.samples += len(b)
            yield b
