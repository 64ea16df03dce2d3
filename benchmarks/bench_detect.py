"""Detection speed: per step on the reference cluster, at 12,500 nodes, and side by side with VictoriaMetrics.

    .venv/bin/python benchmarks/bench_detect.py [--hours 2] [--runs 3] [--scale-nodes 12500] [--vm-url URL]

1. The reference cluster (63 nodes, every simulated family) for ``--hours``: frames are built once,
   then the whole engine (detectors + policy + diagnosis) runs over all steps; the median time
   divided by the number of steps is the amortised cost of one step. A live step re-evaluates a
   trailing window; its cost (window of 60 steps) is reported too.
2. 12,500 nodes x 8 GPUs (100,000 GPUs): synthetic GPU and node families over a 60-step window,
   one evaluation; time and peak memory (ru_maxrss of this process).
3. With ``--vm-url``: the same reference recording imported into that VictoriaMetrics, and one
   step of the equivalent peer statistics there (``outliers_mad(3, family)`` for every family at
   one instant), timed in the same run, as a ratio.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import httpx
import numpy as np

from peerwatch.catalog.load import Catalog
from peerwatch.engine import analyze_frames, kind_by_catalog
from peerwatch.frames import Frame, FrameBuilder
from peerwatch.model import SeriesKey
from peerwatch.simulate import Scenario, default_spec, simulate
from peerwatch.sources.replay import write_vm_jsonl


def reference_frames(hours: float) -> tuple[dict[str, Frame], Scenario]:
    scenario = Scenario("bench", default_spec(63), hours=hours, seed=1)
    sim = simulate(scenario)
    catalog = Catalog.default()
    builder = FrameBuilder(30.0, kind_of=kind_by_catalog(catalog), node_labels_for=catalog.node_labels, now=2e9)
    return builder.add_all(sim.blocks()).build(), scenario


def run_engine(frames: dict[str, Frame]) -> tuple[float, int]:
    """CPU seconds of one whole evaluation (the one-core figure on a shared machine), alarms."""
    t = time.process_time()
    alarms = analyze_frames(frames, catalog=Catalog.default())
    return time.process_time() - t, len(alarms)


def window(frames: dict[str, Frame], steps: int) -> dict[str, Frame]:
    out = {}
    for name, f in frames.items():
        cut = f.values[:, -steps:]
        out[name] = Frame(f.name, f.kind, f.start + f.step * (f.steps - cut.shape[1]), f.step, f.keys, f.nodes, cut,
                          f.last_seen, f.declared_type)  # fmt: skip
    return out


def scale_frames(nodes: int, steps: int) -> dict[str, Frame]:
    """GPU and node families shaped like dcgm-exporter's and node_exporter's, one GPU running hot."""
    rng = np.random.default_rng(0)
    gpu_keys = tuple(
        SeriesKey.of("x", {"Hostname": f"n{n:05d}", "gpu": str(g), "instance": f"n{n:05d}:9400"})
        for n in range(nodes)
        for g in range(8)
    )
    node_keys = tuple(SeriesKey.of("x", {"instance": f"n{n:05d}:9100"}) for n in range(nodes))
    gpu_nodes = tuple(k.get("Hostname") or "" for k in gpu_keys)
    host_nodes = tuple((k.get("instance") or "").split(":")[0] for k in node_keys)
    frames = {}
    gpu_families = {"DCGM_FI_DEV_GPU_UTIL": 97.0, "DCGM_FI_DEV_GPU_TEMP": 60.0, "DCGM_FI_DEV_POWER_USAGE": 800.0,
                    "DCGM_FI_DEV_SM_CLOCK": 1950.0, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.55,
                    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 2e5, "DCGM_FI_DEV_MEMORY_TEMP": 70.0,
                    "DCGM_FI_PROF_SM_ACTIVE": 0.7}  # fmt: skip
    for name, level in gpu_families.items():
        values = level * (1 + 0.01 * rng.standard_normal((len(gpu_keys), steps)))
        values[7, steps // 2 :] *= 1.3
        keys = tuple(SeriesKey(name, k.labels) for k in gpu_keys)
        frames[name] = Frame(name, "gauge", 1.7e9, 30.0, keys, gpu_nodes, values, np.full(len(keys), 1.7e9))
    for name, level in {"node_load1": 30.0, "node_procs_running": 50.0, "backendai_async_task_count": 47.0}.items():
        values = level * (1 + 0.05 * rng.standard_normal((nodes, steps)))
        keys = tuple(SeriesKey(name, k.labels) for k in node_keys)
        frames[name] = Frame(name, "gauge", 1.7e9, 30.0, keys, host_nodes, values, np.full(nodes, 1.7e9))
    return frames


def vm_step(url: str, frames: dict[str, Frame], at: float) -> float:
    """Seconds for VictoriaMetrics to compute outliers_mad over every family at one instant."""
    with httpx.Client(timeout=300.0) as client:
        t = time.perf_counter()  # the server's time: wall clock of the requests, one at a time
        for name in frames:
            query = f'outliers_mad(3, {{__name__="{name}"}})'
            r = client.get(f"{url}/api/v1/query", params={"query": query, "time": at})
            r.raise_for_status()
        return time.perf_counter() - t


def import_to_vm(url: str, scenario: Scenario) -> None:
    import io

    buf = io.BytesIO()
    write_vm_jsonl(simulate(scenario).blocks(), buf)
    with httpx.Client(timeout=600.0) as client:
        client.post(f"{url}/api/v1/import", content=buf.getvalue()).raise_for_status()
        client.get(f"{url}/internal/force_flush")
    time.sleep(3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale-nodes", type=int, default=12_500)
    ap.add_argument("--vm-url")
    args = ap.parse_args()

    frames, scenario = reference_frames(args.hours)
    steps = next(iter(frames.values())).steps
    series = sum(len(f.keys) for f in frames.values())
    full = [run_engine(frames)[0] for _ in range(args.runs)]
    live = [run_engine(window(frames, 60))[0] for _ in range(args.runs)]
    print(f"reference cluster: 63 nodes, {len(frames)} metrics, {series:,} series, {steps} steps")
    per_step = 1000 * statistics.median(full) / steps
    print(f"  whole run: median {statistics.median(full):.2f} s = {per_step:.1f} ms per step")
    print(f"  live step (60-step window): median {1000 * statistics.median(live):.0f} ms")
    if args.vm_url:
        import_to_vm(args.vm_url, scenario)
        at = scenario.start_ts + scenario.hours * 3600 - 60
        vm = [vm_step(args.vm_url, frames, at) for _ in range(args.runs)]
        ours = statistics.median(full) / steps
        vm_ms = 1000 * statistics.median(vm)
        print(f"  VictoriaMetrics outliers_mad over every metric, one step: median {vm_ms:.0f} ms")
        print(f"  = {statistics.median(vm) / ours:.1f}x peerwatch's amortised step")

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    big = scale_frames(args.scale_nodes, 60)
    t, _ = run_engine(big)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    rows = sum(len(f.keys) for f in big.values())
    print(f"scale: {args.scale_nodes:,} nodes ({8 * args.scale_nodes:,} GPUs), {rows:,} series x 60 steps")
    print(f"  {t:.1f} s for the window = {1000 * t / 60:.0f} ms per step; peak RSS {peak:.1f} GiB")
    print(f"  (RSS before building them: {before:.1f} GiB)")


if __name__ == "__main__":
    main()
