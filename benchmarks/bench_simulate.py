"""Simulator speed: a 6-hour recording of the 63-node reference cluster, written as VictoriaMetrics JSON lines.

    .venv/bin/python benchmarks/bench_simulate.py [--nodes 63] [--hours 6] [--runs 1] [--gzip] [--keep DIR]

Reports wall time (simulation and writing together), series, samples, samples/s and file size.
Target (issue 3): under a minute on one core. The file goes to a temporary folder unless --keep.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording
from peerwatch.simulate.events import Benign


def run_once(nodes: int, hours: float, out: Path, compress: bool) -> tuple[float, int, int, int]:
    scenario = Scenario(
        "bench",
        default_spec(nodes),
        hours,
        seed=1,
        faults=(FaultRequest("nvlink_xid", at=0.4), FaultRequest("ecc_hbm", at=0.7), FaultRequest("ib_link_flap")),
        benign=Benign(restarts=1, agent_restarts=1, remounts=1),
    )
    t0 = time.perf_counter()
    written = write_recording(simulate(scenario), out, compress=compress)
    wall = time.perf_counter() - t0
    return wall, written.series, written.samples, written.metrics.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=63)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args()
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        for _ in range(args.runs):
            wall, series, samples, size = run_once(args.nodes, args.hours, out, args.gzip)
            walls.append(wall)
    wall = statistics.median(walls)
    print(
        f"{args.nodes} nodes x {args.hours} h: {wall:.1f} s wall (median of {args.runs}), {series} series, "
        f"{samples:,} samples, {samples / wall / 1e6:.2f} M samples/s, {size / 1e6:.0f} MB"
        f"{' gzip' if args.gzip else ''}"
    )


if __name__ == "__main__":
    main()
