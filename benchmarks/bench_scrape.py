"""What a scrape round of ``peerwatch serve`` costs: every exporter of the cluster fetched over HTTP,
parsed and stored, per cluster size (the part bench_serve.py leaves out).

    .venv/bin/python benchmarks/bench_scrape.py [--nodes 63 1000] [--rounds 5]

A child process serves a simulated cluster's exporters on loopback (4 per node: node_exporter,
dcgm-exporter, all-smi, Backend.AI; their text as the simulator renders it); this process runs
the service's ``ScrapeSource`` against them, round after round, into a ``SampleBuffer``: fetching
(httpx, 32 at a time), the scrape cache's lookups, and storing each target's samples; beside it,
alternating, the same rounds with every body parsed and relabelled in full ("full", no cache). CPU seconds of this
process per round (all its threads) and wall seconds, medians over ``--rounds`` after one round to
warm up; cores = CPU per round over a 30-s step; the peak RSS of this process (the buffer holds a
round's samples, the series keys and their index). The exporters' own rendering runs in the child
and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import resource
import statistics
import time
from multiprocessing.connection import Connection

from peerwatch.frames.buffer import SampleBuffer
from peerwatch.service.clock import Clock
from peerwatch.service.config import config_from_dict
from peerwatch.service.demo import free_range
from peerwatch.service.live_sources import ScrapeSource
from peerwatch.simulate import Scenario, default_spec, simulate
from peerwatch.simulate.families import target_labels
from peerwatch.simulate.serve import LiveCluster
from peerwatch.simulate.targets import EXPORTERS
from peerwatch.sources.scrape_cache import IntArray, Lines, ScrapeCache

STEP = 30.0


def exporters(nodes: int, out: Connection) -> None:
    """Child: serve the cluster's exporters at its first step (a speed so slow the step never changes);
    send the scrape targets once listening, then serve until the parent closes the pipe."""
    sim = simulate(Scenario("bench", default_spec(nodes), hours=0.05, seed=1))
    live = LiveCluster(sim, speed=1e-9, base_port=free_range(len(EXPORTERS) * sim.layout.n))

    async def main() -> None:
        stop = asyncio.Event()
        server = asyncio.create_task(live.run(stop))
        await asyncio.sleep(1.0)  # the listeners are up
        out.send(
            [
                {"url": f"http://127.0.0.1:{live.port(n, x)}/metrics", "job": e.job, "labels": target_labels(e, name)}
                for n, name in enumerate(sim.layout.names)
                for x, e in enumerate(EXPORTERS)
            ]
        )
        await asyncio.get_running_loop().run_in_executor(None, out.recv)  # the parent is done
        stop.set()
        await server

    asyncio.run(main())


class _NoCache(ScrapeCache):
    """A scrape cache that never knows a body: every round parsed in full, as before the cache."""

    def ids(self, target: object, lines: Lines) -> IntArray | None:
        return None


def measure(nodes: int, rounds: int) -> dict[str, float]:
    here, there = mp.Pipe()
    child = mp.Process(target=exporters, args=(nodes, there))
    child.start()
    targets = here.recv()
    config = config_from_dict({"source": {"scrape": {"targets": targets, "timeout": "60s"}}}, "bench")
    assert config.source.scrape is not None
    sources = {"cache": ScrapeSource(config.source.scrape, STEP, Clock())}
    sources["full"] = ScrapeSource(config.source.scrape, STEP, Clock())
    sources["full"].cache = _NoCache()
    buffers = {name: SampleBuffer(3 * STEP) for name in sources}
    cpu: dict[str, list[float]] = {name: [] for name in sources}
    wall: dict[str, list[float]] = {name: [] for name in sources}
    samples, down = 0, 0
    for r in range(rounds + 1):
        for name, source in sources.items():  # alternating, so that both meet the machine's same moods
            t, w = time.process_time(), time.perf_counter()
            fetch = source.collect(time.time(), buffers[name])
            if r:  # the first round warms up connections, interns every series and fills the cache
                cpu[name].append(time.process_time() - t)
                wall[name].append(time.perf_counter() - w)
            samples, down = fetch.samples, len(fetch.down)  # the simulator has exporters miss scrapes
            buffers[name].release(time.time() + STEP)  # judged: forgotten, as the evaluation does
    here.send("done")
    child.join()
    return {
        "nodes": nodes,
        "targets": len(targets),
        "samples": samples,
        "cpu": statistics.median(cpu["cache"]),
        "wall": statistics.median(wall["cache"]),
        "cpu_full": statistics.median(cpu["full"]),
        "down": down,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[63, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logging.getLogger("peerwatch").setLevel(logging.ERROR)  # the simulated exporters' missed scrapes
    print(f"median of {args.rounds} rounds; 'full': the same rounds alternating, every body parsed in full")
    head = f"{'nodes':>6} {'targets':>8} {'down':>5} {'samples':>9} {'CPU s/round':>12} {'wall s':>7} {'cores':>6}"
    print(head + f" {'full CPU s':>11} {'peak RSS GiB':>13}")
    for nodes in args.nodes:
        r = measure(nodes, args.rounds)
        print(
            f"{r['nodes']:>6.0f} {r['targets']:>8.0f} {r['down']:>5.0f} {r['samples']:>9.0f} {r['cpu']:>12.2f} "
            f"{r['wall']:>7.2f} {r['cpu'] / STEP:>6.3f} {r['cpu_full']:>11.2f} {r['peak']:>13.2f}"
        )


if __name__ == "__main__":
    main()
