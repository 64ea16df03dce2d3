"""Cost of the lemon risk model as the live service would run it, and of the trace evaluation.

    .venv/bin/python benchmarks/bench_risk.py [--nodes 10000] [--faults 20000] [--runs 5] [--trace PATH]

A synthetic fleet: ``--faults`` outages spread over a year on ``--nodes`` nodes, a tenth of the
nodes carrying half of them (lemons). Times ``observe`` per event, ``scores`` (what each scrape of
``peerwatch_node_risk`` costs) and ``ranked``; with ``--trace``, the full time-ordered evaluation of
the InfiniteHBD trace (three rankers). Figures are medians over ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from peerwatch.act.fleet import BASELINES, compare_rankers, risk_ranker
from peerwatch.act.history import DAY, END, START, FaultEvent, load_history
from peerwatch.act.risk import RiskModel

T0 = 1_711_756_800.0


def synthetic_events(nodes: int, faults: int) -> list[FaultEvent]:
    rng = np.random.default_rng(2)
    lemons = max(1, nodes // 10)
    who = np.where(rng.random(faults) < 0.5, rng.integers(0, lemons, faults), rng.integers(0, nodes, faults))
    start = np.sort(rng.uniform(0, 365 * DAY, faults))
    length = rng.exponential(DAY, faults)
    events = [FaultEvent(T0 + s, f"node{w:05d}", START) for s, w in zip(start, who, strict=True)]
    events += [FaultEvent(T0 + s + d, f"node{w:05d}", END) for s, d, w in zip(start, length, who, strict=True)]
    return sorted(events, key=lambda e: e.ts)


def median_time(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--faults", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trace", type=Path, default=None)
    args = parser.parse_args()

    events = synthetic_events(args.nodes, args.faults)
    names = [f"node{i:05d}" for i in range(args.nodes)]

    def replay() -> RiskModel:
        model = RiskModel(nodes=names)
        for e in events:
            model.observe(e)
        return model

    t_observe = median_time(replay, args.runs)
    model = replay()
    at = events[-1].ts + 60.0
    t_scores = median_time(lambda: model.scores(at), args.runs)
    t_ranked = median_time(lambda: model.ranked(at), args.runs)
    print(f"fleet of {args.nodes} nodes, {len(events)} events")
    print(f"  observe: {t_observe / len(events) * 1e6:.1f} µs per event ({len(events) / t_observe:,.0f} events/s)")
    print(f"  scores:  {t_scores * 1e3:.1f} ms for the whole fleet")
    print(f"  ranked:  {t_ranked * 1e3:.1f} ms for the whole fleet")
    if args.trace:
        history = load_history(args.trace)
        rankers = {**BASELINES, "risk model": risk_ranker()}
        t_eval = median_time(lambda: compare_rankers(history, rankers), args.runs)
        print(f"trace evaluation ({len(history.faults())} faults, 3 rankers): {t_eval:.2f} s")


if __name__ == "__main__":
    main()
