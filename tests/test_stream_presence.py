"""Presence scanned in chunks: every kind of silence, memory running out, targets and GPUs that appear later."""

from __future__ import annotations

import numpy as np
import pytest

from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.detect.presence import PresenceDetector, PresenceSettings
from peerwatch.detect.stream import columns
from peerwatch.engine import context_of
from peerwatch.frames import Frame
from streamkit import assert_chunk_invariant

START, STEP, STEPS, NODES, GPUS = 1_764_460_800.0, 30.0, 100, 8, 4


def cluster(holes: float = 0.0) -> dict[str, Frame]:
    """DCGM and node_exporter targets with their ``up``, and one of each silence (node-major rows)."""
    rng = np.random.default_rng(4)
    nodes = [f"gpu{n:02d}" for n in range(NODES)]
    gpu_rows = [
        {"Hostname": n, "gpu": str(g), "instance": f"{n}:9400", "job": "dcgm"} for n in nodes for g in range(GPUS)
    ]
    node_rows = [{"instance": f"{n}:9100", "job": "node"} for n in nodes]
    up_rows = [r for n in nodes for r in ({"instance": f"{n}:9100", "job": "node"}, {"instance": f"{n}:9400"})]
    util = 97 + rng.normal(0, 1, (len(gpu_rows), STEPS))
    load = 30 + rng.normal(0, 1, (NODES, STEPS))
    up = np.ones((len(up_rows), STEPS))
    load[2, 30:60] = np.nan  # gpu02's node_exporter down: exporter_down
    up[2 * 2, 30:60] = 0
    up[3 * 2 + 1, 40:50] = 0  # gpu03's DCGM scrape fails while stale values stay: up 0 wins
    util[4 * GPUS : 5 * GPUS, 50:70] = np.nan  # gpu04 unreachable: every exporter silent
    load[4, 50:70] = np.nan
    up[4 * 2 : 4 * 2 + 2, 50:70] = np.nan
    util[5 * GPUS + 1, 20:] = np.nan  # gpu05's GPU 1 fell off the bus
    util[6 * GPUS : 7 * GPUS, 5:35] = np.nan  # gpu06 silent for long: forgotten once memory runs out
    load[6, 5:35] = np.nan
    up[6 * 2 : 6 * 2 + 2, 5:35] = np.nan
    for v in (util, load, up):
        v[:, 80:85] = np.nan  # the scraper stopped: monitoring blind
        if holes:
            v[rng.random(v.shape) < holes] = np.nan
    return {
        "DCGM_FI_DEV_GPU_UTIL": make_frame("DCGM_FI_DEV_GPU_UTIL", gpu_rows, util, START, STEP),
        "node_load1": make_frame("node_load1", node_rows, load, START, STEP),
        "up": make_frame("up", up_rows, up, START, STEP),
    }


@pytest.mark.parametrize("memory", [120, 10])
@pytest.mark.parametrize("holes", [0.0, 0.05])
def test_every_kind_of_silence_in_chunks_as_in_one_scan(memory: int, holes: float) -> None:
    ctx = context_of(cluster(holes), Catalog.default())
    detector = PresenceDetector(PresenceSettings(memory=memory))
    hints = {f.hint for f in detector.scan(ctx, None)[0]}
    assert {"exporter_down", "node_unreachable", "gpu_fallen_off_bus"} <= hints
    assert "monitoring_blind" not in hints  # the service's own to judge (alarms/blind.py)
    assert assert_chunk_invariant(detector, ctx, [13, 30, 31, 50, 80, 99]) > 0
    assert_chunk_invariant(detector, ctx, range(1, STEPS))  # the live service: one step at a time


@pytest.mark.parametrize("cut", [1, 40, 60])
def test_targets_nodes_and_gpus_appearing_later_are_tracked_from_then_on(cut: int) -> None:
    """The first chunk lacks gpu07 (a node, its targets) and gpu06's GPU 3; the rest have them."""
    whole = cluster()
    ctx = context_of(whole, Catalog.default())
    drop = {"DCGM_FI_DEV_GPU_UTIL": GPUS + 1, "node_load1": 1, "up": 2}  # the frames' last rows
    partial = {
        name: make_frame(name, [k.label_dict() for k in f.keys[: -drop[name]]], f.values[: -drop[name]], START, STEP)
        for name, f in whole.items()
    }
    first = context_of(partial, Catalog.default())
    assert first.nodes == ctx.nodes[:-1]
    detector = PresenceDetector()
    found, state = detector.scan(columns(first, 0, cut), None)
    assert found == detector.scan(columns(first, 0, cut), None)[0]
    later = []
    for a in range(cut, STEPS):  # one step at a time, as the live service
        found, state = detector.scan(columns(ctx, a, a + 1), state)
        later += found
    want = [f for f in detector.scan(ctx, None)[0] if f.ts >= START + cut * STEP]
    assert sorted(later, key=repr) == sorted(want, key=repr) and want


def test_one_scan_and_chunks_agree_on_a_cluster_without_gpus() -> None:
    frames = {k: v for k, v in cluster().items() if k != "DCGM_FI_DEV_GPU_UTIL"}
    ctx = context_of(frames, Catalog.default())
    assert assert_chunk_invariant(PresenceDetector(), ctx, [7, 60]) > 0
