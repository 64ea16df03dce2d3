"""One conformance suite for every detector: deterministic, NaN-proof, and the injected fault scores highest.

Each case builds small frames by hand: 12 nodes x 8 GPUs (or ports, mounts), 80 steps, noise,
one entity with a fault from step 50 (the temporal case has 100 steps more on either side: a trend
needs a past and takes time to show). The detector must score that entity above every healthy
one after onset, give identical findings when run twice, and not crash when a tenth of the
samples are missing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.detect.accumulation import AccumulationDetector
from peerwatch.detect.cluster import ClusterDetector
from peerwatch.detect.context import Context
from peerwatch.detect.counters import CounterDetector
from peerwatch.detect.failslow import FailSlowDetector
from peerwatch.detect.peer import PeerDetector
from peerwatch.detect.presence import PresenceDetector
from peerwatch.detect.states import StateDetector
from peerwatch.detect.temporal import TemporalDetector
from peerwatch.engine import Detector, context_of
from peerwatch.frames import Frame
from streamkit import assert_chunk_invariant

START, STEP, STEPS, NODES, ONSET = 1_764_460_800.0, 30.0, 80, 12, 50
FAULT_NODE, FAULT_GPU = "gpu07", "3"


def frame(name: str, kind: str, rows: list[dict[str, str]], values: np.ndarray, start: float = START) -> Frame:
    return make_frame(name, rows, values, start, STEP, kind)  # type: ignore[arg-type]


def gpu_rows() -> list[dict[str, str]]:
    return [
        {"Hostname": f"gpu{n:02d}", "gpu": str(g), "instance": f"gpu{n:02d}:9400"}
        for n in range(NODES)
        for g in range(8)
    ]


def fault_row(rows: list[dict[str, str]], **match: str) -> int:
    return next(i for i, r in enumerate(rows) if all(r.get(k) == v for k, v in match.items()))


def base_frames(rng: np.random.Generator, start: float = START, steps: int = STEPS) -> dict[str, Frame]:
    """Busy GPUs (so every node is in the training group) and a node_exporter gauge, on the case's grid."""
    rows = gpu_rows()
    util = 97 + rng.normal(0, 1, (len(rows), steps))
    node_rows = [{"instance": f"gpu{n:02d}:9100"} for n in range(NODES)]
    load = 30 + rng.normal(0, 1, (NODES, steps))
    return {
        "DCGM_FI_DEV_GPU_UTIL": frame("DCGM_FI_DEV_GPU_UTIL", "gauge", rows, util, start),
        "node_load1": frame("node_load1", "gauge", node_rows, load, start),
    }


def case_peer(rng: np.random.Generator) -> tuple[dict[str, Frame], str]:
    rows = gpu_rows()
    temp = 60 + rng.normal(0, 0.5, (len(rows), STEPS)) + rng.normal(0, 3, (len(rows), 1))  # fixed offsets
    temp[fault_row(rows, Hostname=FAULT_NODE, gpu=FAULT_GPU), ONSET:] += 12
    return {"DCGM_FI_DEV_GPU_TEMP": frame("DCGM_FI_DEV_GPU_TEMP", "gauge", rows, temp)}, "DCGM_FI_DEV_GPU_TEMP"


def case_temporal(rng: np.random.Generator) -> tuple[dict[str, Frame], str]:
    # A trend needs history: this grid starts 50 min before START and runs 50 min past the others'.
    pre, post = 100, 100
    steps = pre + STEPS + post
    rows = gpu_rows()
    temp = 70 + rng.normal(0, 0.5, (len(rows), steps)) + rng.normal(0, 3, (len(rows), 1))  # fixed offsets
    ramp = np.clip(np.arange(steps) - (pre + ONSET), 0, None) * 6.0 / 120  # 6 C an hour, peers flat
    temp[fault_row(rows, Hostname=FAULT_NODE, gpu=FAULT_GPU)] += ramp
    name = "DCGM_FI_DEV_MEMORY_TEMP"
    return {name: frame(name, "gauge", rows, np.rint(temp), START - pre * STEP)}, name


def case_counter(rng: np.random.Generator) -> tuple[dict[str, Frame], str]:
    rows = [
        {"instance": f"gpu{n:02d}:9100", "device": f"mlx5_{p}", "port": "1"} for n in range(NODES) for p in range(8)
    ]
    rate = np.zeros((len(rows), STEPS))
    rate[fault_row(rows, instance=f"{FAULT_NODE}:9100", device="mlx5_3"), ONSET::4] = 1 / 30
    rate[5, 10] = 1 / 30  # one isolated, harmless symbol error elsewhere
    name = "node_infiniband_symbol_error_total"
    return {name: frame(name, "rate", rows, rate)}, name


def case_accumulation(rng: np.random.Generator) -> tuple[dict[str, Frame], str]:
    rows = gpu_rows()
    rate = np.zeros((len(rows), STEPS))
    rate[fault_row(rows, Hostname=FAULT_NODE, gpu=FAULT_GPU), ONSET::4] = 1 / 30  # a remap every 2 minutes
    rate[5, 10] = 1 / 30  # one isolated remap elsewhere
    rate[9, 60] = 40 / 30  # and one jump of many rows at once
    name = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
    return {name: frame(name, "rate", rows, rate)}, name


def case_state(rng: np.random.Generator) -> tuple[dict[str, Frame], str]:
    rows = [
        {"instance": f"gpu{n:02d}:9100", "device": f"mlx5_{p}", "port": "1"} for n in range(NODES) for p in range(8)
    ]
    state = np.full((len(rows), STEPS), 4.0)
    state[fault_row(rows, instance=f"{FAULT_NODE}:9100", device="mlx5_3"), ONSET:] = 1.0
    state[7, :] = 1.0  # a port down all along (never cabled): not news
    return {
        "node_infiniband_state_id": frame("node_infiniband_state_id", "gauge", rows, state)
    }, "node_infiniband_state_id"


def case_presence(rng: np.random.Generator) -> tuple[dict[str, Frame], str]:
    rows = gpu_rows()
    power = 700 + rng.normal(0, 10, (len(rows), STEPS))
    util = 97 + rng.normal(0, 1, (len(rows), STEPS))
    for values in (power, util):  # the GPU vanishes from every family; the node's other GPUs stay
        values[fault_row(rows, Hostname=FAULT_NODE, gpu=FAULT_GPU), ONSET:] = np.nan
    return {
        "DCGM_FI_DEV_POWER_USAGE": frame("DCGM_FI_DEV_POWER_USAGE", "gauge", rows, power),
        "DCGM_FI_DEV_GPU_UTIL": frame("DCGM_FI_DEV_GPU_UTIL", "gauge", rows, util),
    }, "absent:gpu"


def case_cluster(rng: np.random.Generator) -> tuple[dict[str, Frame], str]:
    rows = [
        {"instance": f"gpu{n:02d}:9100", "export": "nfs1:/data", "operation": "READ", "mountaddr": "10.0.0.1"}
        for n in range(NODES)
    ]
    req = 100 + rng.normal(0, 2, (NODES, STEPS))
    rtt = req * 0.002 * (1 + rng.normal(0, 0.05, (NODES, STEPS)))
    rtt[:, ONSET:] *= 30  # the storage server: every client at once
    names = (
        "node_mountstats_nfs_operations_requests_total",
        "node_mountstats_nfs_operations_response_time_seconds_total",
    )
    return {names[0]: frame(names[0], "rate", rows, req), names[1]: frame(names[1], "rate", rows, rtt)}, names[1]


def case_failslow(rng: np.random.Generator) -> tuple[dict[str, Frame], str]:
    # A whole node 10% slower on every GPU: utilisation, power and its IB ports (a node's offset needs
    # 20 minutes of its past before it is judged, and the shift some steps to add up).
    rows = gpu_rows()
    work = np.ones((len(rows), STEPS))
    work[[i for i, r in enumerate(rows) if r["Hostname"] == FAULT_NODE], ONSET:] = 0.9
    util = np.rint(97 * work + rng.normal(0, 1, work.shape))
    power = (140 + 700 * work) * (1 + rng.normal(0, 0.03, (len(rows), 1))) + rng.normal(0, 8, work.shape)
    ports = [
        {"instance": f"gpu{n:02d}:9100", "device": f"mlx5_{p}", "port": "1"} for n in range(NODES) for p in range(4)
    ]
    ib = 18e9 * np.repeat(work[::8], 4, axis=0) * (1 + rng.normal(0, 0.04, (len(ports), STEPS)))
    ib_name = "node_infiniband_port_data_received_bytes_total"
    return {
        "DCGM_FI_DEV_GPU_UTIL": frame("DCGM_FI_DEV_GPU_UTIL", "gauge", rows, util),
        "DCGM_FI_DEV_POWER_USAGE": frame("DCGM_FI_DEV_POWER_USAGE", "gauge", rows, power),
        ib_name: frame(ib_name, "rate", ports, ib),
    }, "failslow"


CASES: list[tuple[Callable[[], Detector], Callable[[np.random.Generator], tuple[dict[str, Frame], str]], str]] = [
    (PeerDetector, case_peer, FAULT_NODE),
    (TemporalDetector, case_temporal, FAULT_NODE),
    (CounterDetector, case_counter, FAULT_NODE),
    (AccumulationDetector, case_accumulation, FAULT_NODE),
    (StateDetector, case_state, FAULT_NODE),
    (PresenceDetector, case_presence, FAULT_NODE),
    (ClusterDetector, case_cluster, "cluster"),
    (FailSlowDetector, case_failslow, FAULT_NODE),
]


def case_context(build: Callable[..., tuple[dict[str, Frame], str]], holes: float = 0.0) -> tuple[Context, str]:
    rng = np.random.default_rng(3)
    frames, signal = build(rng)
    grid = next(iter(frames.values()))
    frames = {**base_frames(rng, grid.start, grid.steps), **frames}
    if holes:
        mask_rng = np.random.default_rng(9)
        for f in frames.values():
            f.values[mask_rng.random(f.values.shape) < holes] = np.nan
    return context_of(frames, Catalog.default()), signal


def run(make: Callable[[], Detector], build: Callable[..., tuple[dict[str, Frame], str]], holes: float = 0.0):  # type: ignore[no-untyped-def]
    ctx, signal = case_context(build, holes)
    return make().scan(ctx, None)[0], signal


@pytest.mark.parametrize(("make", "build", "culprit"), CASES, ids=[c[0].__name__ for c in CASES])
def test_injected_fault_scores_above_every_healthy_entity(make, build, culprit) -> None:  # type: ignore[no-untyped-def]
    findings, signal = run(make, build)
    after = [f for f in findings if f.ts >= START + ONSET * STEP and f.signal == signal]
    assert after, "the fault left no finding"
    best = max(after, key=lambda f: f.score)
    assert best.node == culprit
    healthy = [f.score for f in findings if f.node != culprit and f.signal == signal]
    assert best.score > max(healthy, default=0.0)
    assert all(f.ts >= START + (ONSET - 1) * STEP for f in findings if f.node == culprit and f.signal == signal)


@pytest.mark.parametrize(("make", "build", "culprit"), CASES, ids=[c[0].__name__ for c in CASES])
def test_deterministic_and_nan_proof(make, build, culprit) -> None:  # type: ignore[no-untyped-def]
    first, _ = run(make, build)
    again, _ = run(make, build)
    assert first == again
    holed, signal = run(make, build, holes=0.1)
    assert all(np.isfinite(f.score) for f in holed)
    if make is not PresenceDetector:  # a tenth missing at random is exactly what presence must not over-read
        assert any(f.node == culprit and f.signal == signal for f in holed)


@pytest.mark.parametrize(("make", "build", "culprit"), CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("holes", [0.0, 0.1])
def test_scanning_in_chunks_finds_what_one_scan_finds(make, build, culprit, holes: float) -> None:  # type: ignore[no-untyped-def]
    ctx, _ = case_context(build, holes)
    assert assert_chunk_invariant(make(), ctx, [17, 50, 51, ctx.steps - 2]) > 0
    assert_chunk_invariant(make(), ctx, range(1, ctx.steps))  # the live service: one step at a time


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_column_quantile_matches_numpy_with_nan_inside(q: float) -> None:
    import warnings

    from peerwatch.detect.peer import column_quantile

    rng = np.random.default_rng(int(q * 10))
    x = rng.normal(size=(40, 25))
    x[rng.random(x.shape) < 0.3] = np.nan
    x[:, 3] = np.nan  # a column with nothing
    x[1:, 4] = np.nan  # a column with one value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.nanquantile(x, q, axis=0)
    np.testing.assert_allclose(column_quantile(x, q), want, equal_nan=True)


def test_the_whole_cluster_silent_at_once_is_the_monitoring_not_dead_nodes() -> None:
    rng = np.random.default_rng(1)
    frames = base_frames(rng)
    for f in frames.values():
        f.values[:, ONSET:] = np.nan  # the scraper stopped
    findings = PresenceDetector().scan(context_of(frames, Catalog.default()), None)[0]
    # No node is unreachable; whether peerwatch is blind is the service's to judge (alarms/blind.py).
    assert findings == []


@pytest.mark.parametrize("steps", [1, 2, 3, 5])
def test_sustained_is_a_causal_median_even_on_a_window_shorter_than_it(steps: int) -> None:
    from peerwatch.detect.peer import sustained

    x = np.array([[0.0, 9.0, 0.0, 9.0, 9.0, 9.0, np.nan][:steps]])
    out = sustained(x, 3)
    padded = [0.0, 0.0, *np.nan_to_num(x[0]).tolist()]
    want = [float(np.median(padded[i : i + 3])) for i in range(steps)]
    np.testing.assert_array_equal(out[0], want)


@pytest.mark.parametrize("window", [2, 3, 4, 5, 7])
def test_sustained_is_numpys_median_of_the_window_to_the_bit(window: int) -> None:
    from peerwatch.detect.peer import sustained

    rng = np.random.default_rng(window)
    for cols in (1, 2, window + 3, 40):
        x = np.abs(rng.normal(size=(6, cols))) * (rng.random((6, cols)) > 0.3)
        x[0, 0] = np.nan
        layers = np.zeros((window, *x.shape))
        for k in range(min(window, cols)):
            layers[k][:, k:] = np.nan_to_num(x)[:, : cols - k]
        assert repr(sustained(x, window).tolist()) == repr(np.median(layers, axis=0).tolist())


def test_cpu_cores_are_compared_as_the_node_mean_per_mode() -> None:
    from peerwatch.detect.context import per_node

    rows = [
        {"instance": f"gpu{n:02d}:9100", "cpu": str(c), "mode": m}
        for n in range(2)
        for c in range(3)
        for m in ("idle", "user")
    ]
    values = np.arange(len(rows) * 2, dtype=float).reshape(len(rows), 2)
    values[0, 0] = np.nan  # a missing core sample is left out of the mean, not counted as 0
    frames = {"node_cpu_seconds_total": make_frame("node_cpu_seconds_total", rows, values, START, STEP, "rate")}
    (s,) = [x for x in context_of(frames, Catalog.default()).series if x.frame.name == "node_cpu_seconds_total"]
    agg = per_node(s)
    got = {(k.get("instance"), k.get("mode")): list(v) for k, v in zip(agg.frame.keys, agg.values, strict=True)}
    assert all(k.get("cpu") is None for k in agg.frame.keys) and agg.components == ("node",) * 4
    assert got[("gpu00:9100", "idle")] == [np.mean([4.0, 8.0]), np.mean([1.0, 5.0, 9.0])]
    assert got[("gpu01:9100", "user")] == [np.mean([14.0, 18.0, 22.0]), np.mean([15.0, 19.0, 23.0])]
