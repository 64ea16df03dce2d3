"""Replay of a VictoriaMetrics JSON-lines recording into frames, side by side with a plain baseline.

    .venv/bin/python benchmarks/bench_replay.py [--nodes 63] [--series 100] [--steps 720] [--runs 5]

The baseline is what one would write without peerwatch: ``json.loads`` per line and a Python
loop that places each sample on the step grid. Both read the same file in the same run; the
figures are medians over ``--runs``. Peak memory is measured with tracemalloc in a separate run
of each reader (tracemalloc slows Python code, so it is not timed).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from peerwatch.frames import FrameBuilder
from peerwatch.model import ProblemLog, SeriesBlock, SeriesKey
from peerwatch.sources.replay import read_recording, write_vm_jsonl

T0 = 1_764_460_800.0


def make_recording(path: Path, nodes: int, series: int, steps: int, chunk: int) -> int:
    """A recording shaped like VictoriaMetrics' export: each series split in blocks of ``chunk`` samples."""
    rng = np.random.default_rng(1)
    phase = rng.uniform(0, 30, (nodes, series))  # every target scrapes at its own phase
    n = 0
    with path.open("wb") as out:
        for start in range(0, steps, chunk):
            width = min(chunk, steps - start)
            ts = T0 + 30.0 * np.arange(start, start + width)
            for node in range(nodes):
                for s in range(series):
                    key = SeriesKey.of(f"metric_{s % 20}", {"instance": f"gpu{node:03d}:9400", "gpu": str(s // 20)})
                    jitter = rng.integers(-20, 20, width) / 1000.0
                    vals = np.round(rng.normal(100, 5, width), 3)
                    write_vm_jsonl([SeriesBlock(key, ts + phase[node, s] + jitter, vals)], out)
                    n += width
    return n


def peerwatch_reader(path: Path) -> int:
    builder = FrameBuilder(30.0, problems=ProblemLog(), now=T0 + 86_400)
    builder.add_all(read_recording(path, builder.problems))
    frames = builder.build()
    return sum(int(f.values.size) for f in frames.values())


def baseline_reader(path: Path) -> int:
    """json + a per-sample Python loop into per-metric dicts of rows, then numpy arrays."""
    grid: dict[str, dict[tuple[tuple[str, str], ...], dict[int, float]]] = {}
    with path.open() as f:
        for line in f:
            obj = json.loads(line)
            metric = obj["metric"]
            name = metric.pop("__name__")
            rows = grid.setdefault(name, {}).setdefault(tuple(sorted(metric.items())), {})
            for ts, v in zip(obj["timestamps"], obj["values"], strict=True):
                rows[-int(-ts // 30_000)] = float(v)  # ceil to the step
    cells = 0
    for rows_by_key in grid.values():
        lo = min(min(r) for r in rows_by_key.values())
        hi = max(max(r) for r in rows_by_key.values())
        arr = np.full((len(rows_by_key), hi - lo + 1), np.nan)
        for i, r in enumerate(rows_by_key.values()):
            for k, v in r.items():
                arr[i, k - lo] = v
        cells += arr.size
    return cells


def timed(fn: Callable[[Path], int], path: Path, runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each run; on a shared machine CPU time is the one-core figure."""
    wall, cpu = [], []
    for _ in range(runs):
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        fn(path)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def peak_mib(fn: Callable[[Path], int], path: Path) -> float:
    gc.collect()
    tracemalloc.start()
    fn(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=63)
    ap.add_argument("--series", type=int, default=100, help="series per node")
    ap.add_argument("--steps", type=int, default=720)
    ap.add_argument("--chunk", type=int, default=240, help="samples per export line")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline-runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rec.jsonl"
        samples = make_recording(path, args.nodes, args.series, args.steps, args.chunk)
        size = path.stat().st_size / 2**20
        ours, ours_cpu = timed(peerwatch_reader, path, args.runs)
        base, base_cpu = timed(baseline_reader, path, args.baseline_runs)
        frame_mib = peerwatch_reader(path) * 8 / 2**20
        ours_mem, base_mem = peak_mib(peerwatch_reader, path), peak_mib(baseline_reader, path)
    mo, mb = statistics.median(ours), statistics.median(base)
    co, cb = statistics.median(ours_cpu), statistics.median(base_cpu)
    print(f"recording: {samples:,} samples, {args.nodes * args.series:,} series, {size:.0f} MiB JSON lines")
    print(f"{'reader':<28}{'wall s':>8}{'CPU s':>8}{'samples/CPU s':>16}{'peak MiB':>10}")
    print(f"{'peerwatch (simdjson+numpy)':<28}{mo:>8.2f}{co:>8.2f}{samples / co:>16,.0f}{ours_mem:>10.0f}")
    print(f"{'baseline (json+python)':<28}{mb:>8.2f}{cb:>8.2f}{samples / cb:>16,.0f}{base_mem:>10.0f}")
    print(f"speed-up: {cb / co:.1f}x (CPU); frame values: {frame_mib:.0f} MiB; peak/frames: {ours_mem / frame_mib:.1f}")


if __name__ == "__main__":
    main()
