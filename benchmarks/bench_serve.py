"""What one live step of ``peerwatch serve`` costs: the evaluation of its window, per cluster size.

    .venv/bin/python benchmarks/bench_serve.py [--nodes 63 126] [--window 7200] [--runs 3]

For each size, the simulator's run (every family, benign events) fills the service's sample
buffer with one window, as the collector would have; then ``Evaluator.evaluate`` (buffer ->
frames -> detectors -> policy, exactly what the service runs every step) is timed in CPU seconds,
median of ``--runs``. Reported: CPU seconds per step, the cores that takes at 30-s steps, the
series and samples held, and the peak RSS of this process after the size (ru_maxrss: buffer,
frames and the detectors' arrays). Scraping and parsing the exporters' text are not included
(see bench_exposition.py for the parser's rate).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from peerwatch.service.buffer import SampleBuffer
from peerwatch.service.evaluation import Evaluator
from peerwatch.simulate import Scenario, default_spec, simulate

STEP = 30.0


def measure(nodes: int, window: float, runs: int) -> dict[str, float]:
    scenario = Scenario("bench", default_spec(nodes), hours=window / 3600 + 0.1, seed=1)
    buffer = SampleBuffer(window + 2 * STEP)
    buffer.add(simulate(scenario).blocks())
    end = buffer.newest
    assert end is not None
    evaluator = Evaluator(STEP, window, ())
    seconds = []
    for _ in range(runs):
        t = time.process_time()
        evaluator.evaluate(buffer, end, end)
        seconds.append(time.process_time() - t)
    cpu = statistics.median(seconds)
    return {
        "nodes": nodes,
        "series": buffer.series,
        "samples": buffer.samples,
        "cpu_s_per_step": cpu,
        "cores_at_30s": cpu / STEP,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[63, 126])
    parser.add_argument("--window", type=float, default=7200.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"window {args.window:g} s, step {STEP:g} s, median of {args.runs} runs")
    print(f"{'nodes':>6} {'series':>9} {'samples':>11} {'CPU s/step':>11} {'cores':>6} {'peak RSS GiB':>13}")
    for nodes in sorted(args.nodes):  # ascending, so the peak RSS belongs to the size just measured
        r = measure(nodes, args.window, args.runs)
        print(
            f"{r['nodes']:>6.0f} {r['series']:>9.0f} {r['samples']:>11.0f} {r['cpu_s_per_step']:>11.2f} "
            f"{r['cores_at_30s']:>6.2f} {r['peak_rss_gib']:>13.2f}"
        )


if __name__ == "__main__":
    main()
