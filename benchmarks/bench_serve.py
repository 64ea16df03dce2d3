"""What one live step of ``peerwatch serve`` costs, per cluster size: CPU per step and memory held.

    .venv/bin/python benchmarks/bench_serve.py [--nodes 63 1000] [--window 7200] [--steps 8] [--compare 63]

For each size a child process simulates the cluster (every family, benign events) and hands its
samples over slice by slice, a thousand series at a time (as the scrape source stores them, target
by target); this process runs the service's ``Evaluator``: the warm-up (the window, fed in 5-step
slices as a TSDB source reads it), then ``--steps`` single 30-s steps, each timed in CPU seconds
(median reported). RSS is the measuring process's after the last step (the engine's state and the
samples not yet judged), peak RSS its highest (ru_maxrss, also holding a slice's raw samples before
they are judged); the simulation lives in another process. Scraping and parsing exporter text are
not included (bench_exposition.py has the parser's rate).

``--designs stream scrape``: also (or only) the design ``scrape``: after the same warm-up, the
child serves the cluster's exporters over HTTP (4 per node, at the step this process sets, their
text rendered beforehand) and each step is a real scrape round by the service's ``ScrapeSource``
(fetch, the scrape cache's lookups or a full parse, store) followed by the evaluation, both in the
CPU per step: the whole of ``serve`` on a scrape source. Each step's CPU, the round's part and the
RSS go to stderr as they are measured.

``--compare N``: at N nodes, also the design before the streamed engine, side by side in the same
run: every step, frames rebuilt from the window's samples and the whole engine re-run over the
window (median of 3 steps). Each measurement runs in a process of its own.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import resource
import statistics
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path

from peerwatch.catalog.load import Catalog
from peerwatch.engine import analyze_frames, kind_by_catalog
from peerwatch.frames import FrameBuilder
from peerwatch.frames.buffer import SampleBuffer
from peerwatch.model import SeriesBlock
from peerwatch.service.clock import Clock
from peerwatch.service.config import config_from_dict
from peerwatch.service.demo import free_range
from peerwatch.service.evaluation import Evaluator
from peerwatch.service.live_sources import ScrapeSource, TsdbSource
from peerwatch.service.memory import return_freed_memory
from peerwatch.simulate import Scenario, Simulation, default_spec, simulate
from peerwatch.simulate.families import target_labels
from peerwatch.simulate.serve import LiveCluster, serve_in_thread
from peerwatch.simulate.targets import EXPORTERS

STEP = 30.0
SLICE = TsdbSource.READ_STEPS  # warm-up steps handed over at a time, as a TSDB source reads its backlog
PIECE = 1000  # series handed to the buffer at a time: about one exporter target of a node


class _Stepped(LiveCluster):
    """The simulated exporters at the step the measuring process sets, their text rendered beforehand
    for ``steps`` (so that serving costs this process next to nothing beside the one measured)."""

    def __init__(self, sim: Simulation, k: Synchronized[int], steps: range) -> None:
        super().__init__(sim, base_port=free_range(len(EXPORTERS) * sim.layout.n))
        self.k = k
        self.bodies = {
            (n, x, j): super(_Stepped, self).render(n, x, j)
            for j in steps
            for n in range(sim.layout.n)
            for x in range(len(EXPORTERS))
        }
        self.targets = []  # the rows, no longer needed

    def step(self, now: float | None = None) -> int:
        return self.k.value

    def render(self, node: int, exporter: int, k: int) -> str | None:
        return self.bodies[node, exporter, k]


def feed(
    nodes: int,
    hours: float,
    bounds: list[tuple[int, int]],
    out: Connection,
    serve: tuple[Synchronized[int], Event, range] | None,
) -> None:
    """Child: simulate, then send the samples of each grid slice ``[a, b)`` as lists of (key, ts,
    values, type) tuples of ``PIECE`` series each (as a scrape hands them over target by target),
    then None. With ``serve`` (step, done, steps): then serve the exporters at that step (one of
    ``steps``), send the grid's start and the scrape targets, and serve until done."""
    sim = simulate(Scenario("bench", default_spec(nodes), hours=hours, seed=1))
    sets = list(sim.series())
    for a, b in bounds:
        piece = []
        for x in sim.blocks(steps=slice(a, b), sets=sets):
            piece.append((x.key, x.timestamps, x.values, x.mtype))
            if len(piece) == PIECE:
                out.send(piece)
                piece = []
        out.send(piece)
        out.send(None)
    if serve is not None:
        del sets
        live = _Stepped(sim, serve[0], serve[2])
        gc.freeze()  # the simulation's millions of objects: no collector passes over them while serving
        _, stop = serve_in_thread(live)
        targets = [
            {"url": f"http://127.0.0.1:{live.port(n, x)}/metrics", "job": e.job, "labels": target_labels(e, name)}
            for n, name in enumerate(sim.layout.names)
            for x, e in enumerate(EXPORTERS)
        ]
        out.send((sim.grid.start, targets))
        serve[1].wait()
        stop()
    out.close()


def rss_gib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**30


def measure(nodes: int, window: float, steps: int, design: str, out: Connection) -> None:
    """Runs in its own process, so that its peak RSS is its own; sends the figures to ``out``."""
    return_freed_memory()  # as ``peerwatch serve`` does
    warm = round(window / STEP)
    bounds = [(a, min(a + SLICE, warm)) for a in range(0, warm, SLICE)]
    if design != "scrape":
        bounds += [(k, k + 1) for k in range(warm, warm + steps)]
    hours = (warm + steps + 2) * STEP / 3600
    recv, send = mp.Pipe(duplex=False)
    serve = (mp.Value("i", warm), mp.Event(), range(warm, warm + steps)) if design == "scrape" else None
    child = mp.Process(target=feed, args=(nodes, hours, bounds, send, serve))
    child.start()
    send.close()
    buffer = SampleBuffer(window + 2 * STEP)
    evaluator = Evaluator(STEP, window, ())
    warm_cpu, step_cpu = 0.0, []
    for i, _ in enumerate(bounds):
        while (piece := recv.recv()) is not None:
            buffer.add(SeriesBlock(*x) for x in piece)
        end = buffer.newest
        assert end is not None
        t = time.process_time()
        if design != "window":
            assert evaluator.evaluate(buffer, end, end) is not None
        elif i >= len(bounds) - steps:  # the window design: frames rebuilt, the engine over the window
            catalog = Catalog.default()
            builder = FrameBuilder(STEP, kind_of=kind_by_catalog(catalog), node_labels_for=catalog.node_labels, now=end)
            analyze_frames(builder.add_all(buffer.blocks(end - window, end)).build(), catalog=catalog)
        cpu = time.process_time() - t
        if design == "scrape" or i < len(bounds) - steps:
            warm_cpu += cpu
        else:
            step_cpu.append(cpu)
    if serve is not None:  # each step: a scrape round of every exporter, then the evaluation
        start, targets = recv.recv()
        config = config_from_dict({"source": {"scrape": {"targets": targets, "timeout": "60s"}}}, "bench")
        assert config.source.scrape is not None
        source = ScrapeSource(config.source.scrape, STEP, Clock(start=start, origin=time.time()))
        for k in range(warm, warm + steps):
            serve[0].value = k
            t = time.process_time()
            fetch = source.collect(start + k * STEP + STEP / 2, buffer)  # stamped mid-step, as serve does
            scraped = time.process_time()
            assert evaluator.evaluate(buffer, fetch.complete_until, fetch.at) is not None
            step_cpu.append(time.process_time() - t)
            print(
                f"  scrape step {k}: {step_cpu[-1]:.2f} s CPU (round {scraped - t:.2f}), RSS {rss_gib():.2f} GiB",
                file=sys.stderr,
                flush=True,
            )
        serve[1].set()
    child.join()
    out.send(
        {
            "nodes": nodes,
            "series": buffer.series,
            "warmup_cpu_s": warm_cpu,
            "cpu_s_per_step": statistics.median(step_cpu),
            "cores_at_30s": statistics.median(step_cpu) / STEP,
            "peakrss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "rss_gib": rss_gib(),
        }
    )


def run(nodes: int, window: float, steps: int, design: str) -> dict[str, float]:
    recv, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=measure, args=(nodes, window, steps, design, send))
    proc.start()
    result: dict[str, float] = recv.recv()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[63, 1000])
    parser.add_argument("--window", type=float, default=7200.0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--compare", type=int, nargs="*", default=[63])
    parser.add_argument("--designs", nargs="+", choices=("stream", "scrape"), default=["stream"], help="see above")
    args = parser.parse_args()
    print(f"window {args.window:g} s, step {STEP:g} s, median of {args.steps} steps")
    head = ("design", "nodes", "series", "warm-up CPU s", "CPU s/step", "cores", "RSS GiB", "peak RSS GiB")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (7, 6, 9, 14, 11, 6, 8, 13), strict=True)))
    for nodes in sorted(args.nodes):
        for design in (*args.designs, "window") if nodes in args.compare else args.designs:
            r = run(nodes, args.window, 3 if design == "window" else args.steps, design)
            print(
                f"{design:>7} {r['nodes']:>6.0f} {r['series']:>9.0f} {r['warmup_cpu_s']:>14.1f} "
                f"{r['cpu_s_per_step']:>11.3f} {r['cores_at_30s']:>6.3f} {r['rss_gib']:>8.2f} "
                f"{r['peakrss_gib']:>13.2f}"
            )


if __name__ == "__main__":
    main()
