"""What one live step of ``peerwatch serve`` costs, per cluster size: CPU per step and memory held.

    .venv/bin/python benchmarks/bench_serve.py [--nodes 63 1000] [--window 7200] [--steps 8] [--compare 63]

For each size a child process simulates the cluster (every family, benign events) and hands its
samples over slice by slice, a thousand series at a time (as the scrape source stores them, target
by target); this process runs the service's ``Evaluator``: the warm-up (the window, fed in 10-step
slices as a TSDB source reads it), then ``--steps`` single 30-s steps, each timed in CPU seconds
(median reported). RSS is the measuring process's after the last step (the engine's state and the
samples not yet judged), peak RSS its highest (ru_maxrss, also holding a slice's raw samples before
they are judged); the simulation lives in another process. Scraping and parsing exporter text are
not included (bench_exposition.py has the parser's rate).

``--compare N``: at N nodes, also the design before the streamed engine, side by side in the same
run: every step, frames rebuilt from the window's samples and the whole engine re-run over the
window (median of 3 steps). Each measurement runs in a process of its own.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time
from multiprocessing.connection import Connection
from pathlib import Path

from peerwatch.catalog.load import Catalog
from peerwatch.engine import analyze_frames, kind_by_catalog
from peerwatch.frames import FrameBuilder
from peerwatch.model import SeriesBlock
from peerwatch.service.buffer import SampleBuffer
from peerwatch.service.evaluation import Evaluator
from peerwatch.service.live_sources import TsdbSource
from peerwatch.service.memory import return_freed_memory
from peerwatch.simulate import Scenario, default_spec, simulate

STEP = 30.0
SLICE = TsdbSource.READ_STEPS  # warm-up steps handed over at a time, as a TSDB source reads its backlog
PIECE = 1000  # series handed to the buffer at a time: about one exporter target of a node


def feed(nodes: int, hours: float, bounds: list[tuple[int, int]], out: Connection) -> None:
    """Child: simulate, then send the samples of each grid slice ``[a, b)`` as lists of (key, ts,
    values, type) tuples of ``PIECE`` series each (as a scrape hands them over target by target),
    then None."""
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
    out.close()


def measure(nodes: int, window: float, steps: int, design: str, out: Connection) -> None:
    """Runs in its own process, so that its peak RSS is its own; sends the figures to ``out``."""
    return_freed_memory()  # as ``peerwatch serve`` does
    warm = round(window / STEP)
    bounds = [(a, min(a + SLICE, warm)) for a in range(0, warm, SLICE)] + [
        (k, k + 1) for k in range(warm, warm + steps)
    ]
    hours = (warm + steps + 2) * STEP / 3600
    recv, send = mp.Pipe(duplex=False)
    child = mp.Process(target=feed, args=(nodes, hours, bounds, send))
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
        if design == "stream":
            assert evaluator.evaluate(buffer, end, end) is not None
        elif i >= len(bounds) - steps:  # the window design: frames rebuilt, the engine over the window
            catalog = Catalog.default()
            builder = FrameBuilder(STEP, kind_of=kind_by_catalog(catalog), node_labels_for=catalog.node_labels, now=end)
            analyze_frames(builder.add_all(buffer.blocks(end - window, end)).build(), catalog=catalog)
        cpu = time.process_time() - t
        if i < len(bounds) - steps:
            warm_cpu += cpu
        else:
            step_cpu.append(cpu)
    child.join()
    out.send(
        {
            "nodes": nodes,
            "series": buffer.series,
            "warmup_cpu_s": warm_cpu,
            "cpu_s_per_step": statistics.median(step_cpu),
            "cores_at_30s": statistics.median(step_cpu) / STEP,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "rss_gib": int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**30,
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
    args = parser.parse_args()
    print(f"window {args.window:g} s, step {STEP:g} s, median of {args.steps} steps")
    head = ("design", "nodes", "series", "warm-up CPU s", "CPU s/step", "cores", "RSS GiB", "peak RSS GiB")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (7, 6, 9, 14, 11, 6, 8, 13), strict=True)))
    for nodes in sorted(args.nodes):
        for design in ("stream", "window") if nodes in args.compare else ("stream",):
            r = run(nodes, args.window, args.steps if design == "stream" else 3, design)
            print(
                f"{design:>7} {r['nodes']:>6.0f} {r['series']:>9.0f} {r['warmup_cpu_s']:>14.1f} "
                f"{r['cpu_s_per_step']:>11.3f} {r['cores_at_30s']:>6.3f} {r['rss_gib']:>8.2f} "
                f"{r['peak_rss_gib']:>13.2f}"
            )


if __name__ == "__main__":
    main()
