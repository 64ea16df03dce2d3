"""Where the warm-up's peak memory comes from: the peak RSS after each stage of each slice judged.

    .venv/bin/python benchmarks/bench_warmup.py [--nodes 250] [--chunk 5] [--slice 5]

The warm-up of ``bench_serve.py`` (a TSDB source's 2-hour backlog: the child's simulated samples
handed over ``--slice`` steps at a time, each slice judged ``--chunk`` steps at a time), with the
evaluator's stages wrapped: storing a slice in the buffer, building frames, the streamed engine's
scan, the dashboard's history. For each stage: how often it raised the process's peak RSS
(ru_maxrss), the first and last raises (chunk, GiB before, GiB after), and the RSS after its last
call; then the warm-up's CPU, its peak and the RSS at its end.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time
from collections.abc import Callable
from typing import Any

from bench_serve import SLICE, STEP, feed, rss_gib
from peerwatch.frames.buffer import SampleBuffer
from peerwatch.model import SeriesBlock
from peerwatch.service import evaluation
from peerwatch.service.evaluation import Evaluator
from peerwatch.service.memory import return_freed_memory


def _peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--chunk", type=int, default=evaluation.CHUNK_STEPS, help="steps judged at a time")
    parser.add_argument("--slice", type=int, default=SLICE, help="steps read at a time (TsdbSource.READ_STEPS)")
    parser.add_argument("--window", type=float, default=7200.0)
    args = parser.parse_args()
    evaluation.CHUNK_STEPS = args.chunk
    return_freed_memory()  # as ``peerwatch serve`` does
    warm = round(args.window / STEP)
    bounds = [(a, min(a + args.slice, warm)) for a in range(0, warm, args.slice)]
    recv, send = mp.Pipe(duplex=False)
    child = mp.Process(target=feed, args=(args.nodes, (warm + 2) * STEP / 3600, bounds, send, None))
    child.start()
    send.close()
    buffer = SampleBuffer(args.window + 2 * STEP)
    evaluator = Evaluator(STEP, args.window, ())
    stages: dict[str, list[tuple[float, float, float]]] = {}

    def wrapped(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **kw: Any) -> Any:
            before = _peak()
            out = f(*a, **kw)
            stages.setdefault(name, []).append((before, _peak(), rss_gib()))
            return out

        return call

    evaluator.cells.cells = wrapped("cells", evaluator.cells.cells)  # type: ignore[method-assign]
    evaluator.framer.frames = wrapped("frames", evaluator.framer.frames)  # type: ignore[method-assign]
    evaluator.engine.scan = wrapped("scan", evaluator.engine.scan)  # type: ignore[method-assign]
    evaluator.history.add = wrapped("history", evaluator.history.add)  # type: ignore[method-assign]
    cpu = 0.0
    for _ in bounds:
        before = _peak()
        while (piece := recv.recv()) is not None:
            buffer.add(SeriesBlock(*x) for x in piece)
        stages.setdefault("store", []).append((before, _peak(), rss_gib()))
        t = time.process_time()
        evaluator.evaluate(buffer, buffer.newest or 0.0, buffer.newest or 0.0)
        cpu += time.process_time() - t
    child.join()
    print(f"{args.nodes} nodes, {buffer.series} series, slices of {args.slice} steps judged {args.chunk} at a time")
    for name, calls in stages.items():
        raises = [(i, round(a, 2), round(b, 2)) for i, (a, b, _) in enumerate(calls) if b > a + 0.005]
        shown = raises if len(raises) <= 6 else raises[:3] + raises[-3:]
        print(f"  {name}: raised the peak {len(raises)} times {shown}; RSS after its last call {calls[-1][2]:.2f} GiB")
    print(f"warm-up CPU {cpu:.0f} s, peak {_peak():.2f} GiB, RSS at its end {rss_gib():.2f} GiB")


if __name__ == "__main__":
    main()
