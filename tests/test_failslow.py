"""Fail-slow: a node a few per cent slower on every GPU, found by pooling and accumulating its offset.

Hand-made clusters first (12 nodes x 8 GPUs and 4 IB ports, 30-s steps, 2 h): utilisation, power and
IB traffic with noise, per-GPU power scales, missed scrapes, checkpoints (every node dips, rank 0
lingers at half its level), a spare that joins the job with its own small offset. Then simulated
recordings: fail-slow nodes at 6-10 % found and named within half an hour with the detector and not
without it, and a healthy run with every benign event that raises no fail-slow finding.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from enginekit import alarms_of as engine_alarms
from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.detect import node_offsets
from peerwatch.detect.context import Context
from peerwatch.detect.failslow import FailSlowDetector
from peerwatch.detect.node_offsets import node_median, offsets, pooled
from peerwatch.detect.peer import column_quantile
from peerwatch.engine import Engine, analyze_frames, context_of, default_detectors, load_frames
from peerwatch.frames import Frame
from peerwatch.model import Alarm
from peerwatch.simulate import FaultRequest, Scenario, simulate, write_recording
from peerwatch.simulate.cluster import ClusterSpec
from peerwatch.simulate.events import Benign
from peerwatch.simulate.host_faults import fail_slow_share
from streamkit import assert_chunk_invariant, findings_after_rows_join

START, STEP, NODES, STEPS, ONSET = 1_764_460_800.0, 30.0, 12, 240, 120
CULPRIT, SPARE, RANK0 = "gpu07", "gpu11", "gpu00"
GPU_ROWS = [{"Hostname": f"gpu{n:02d}", "gpu": str(g)} for n in range(NODES) for g in range(8)]
IB_ROWS = [{"instance": f"gpu{n:02d}:9100", "device": f"mlx5_{p}", "port": "1"} for n in range(NODES) for p in range(4)]
IDLE_W = 140.0


def cluster(
    shift: float = 0.0, holes: float = 0.0, seed: int = 0, step: float = STEP, mixed: bool = False, jitter: float = 0.0
) -> Context:
    return context_of(cluster_frames(shift, holes, seed, step, mixed, jitter), Catalog.default())


def cluster_frames(
    shift: float = 0.0,
    holes: float = 0.0,
    seed: int = 0,
    step: float = STEP,
    mixed: bool = False,
    jitter: float = 0.0,
) -> dict[str, Frame]:
    """Busy GPUs, checkpoints at minutes 30 and 90 (rank 0 lingers 2 minutes at half its level), a spare
    joining at minute 45 and running 2 % slower by nature, and ``shift`` less work on the culprit from
    minute 60; on a grid of ``step`` seconds. ``mixed``: SM activity from the newer exporter's
    ``DCGM_FI_PROF_SM_ACTIVE`` on even nodes, the older one's ``GR_ENGINE_ACTIVE`` on odd ones.
    ``jitter``: each node's samples move together by this share from step to step (where its scrape
    falls in the training step's rhythm)."""
    rng = np.random.default_rng(seed)
    k = STEP / step  # grid steps per 30 s
    steps = round(STEPS * k)
    work = np.ones((NODES, steps))  # share of full work per node and step
    for c in (60, 180):
        a, b = round(c * k), round((c + 6) * k)
        work[:, a:b] = 0.15
        work[0, b : b + round(4 * k)] = 0.5  # rank 0 writes the consolidated checkpoint
    spare = int(SPARE[3:])
    work[spare, : round(90 * k)] = 0.0
    work[spare, round(90 * k) :] *= 0.98
    work[int(CULPRIT[3:]), round(ONSET * k) :] *= 1.0 - shift
    work *= 1 + np.random.default_rng(seed + 2).normal(0, jitter, work.shape)
    per_gpu = np.repeat(work, 8, axis=0)
    util = np.clip(np.rint(98 * per_gpu + rng.normal(0, 1, per_gpu.shape)), 0, 100)
    scale = 1 + rng.normal(0, 0.03, (len(GPU_ROWS), 1))  # some GPUs draw more by nature
    power = (IDLE_W + 700 * per_gpu) * scale + rng.normal(0, 8, per_gpu.shape)
    ib = np.repeat(work, 4, axis=0) * 18e9 * (1 + rng.normal(0, 0.04, (len(IB_ROWS), steps)))
    arrays = {"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_POWER_USAGE": power}
    frames = {name: make_frame(name, GPU_ROWS, v, START, step) for name, v in arrays.items()}
    if mixed:
        sm = np.clip(0.9 * per_gpu * (1 + rng.normal(0, 0.02, per_gpu.shape)), 0, 1)
        for name, parity in (("DCGM_FI_PROF_SM_ACTIVE", 0), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1)):
            rows = [i for i, r in enumerate(GPU_ROWS) if int(r["Hostname"][3:]) % 2 == parity]
            frames[name] = make_frame(
                name, [GPU_ROWS[i] for i in rows], sm[rows] * (1.05 if parity else 1), START, step
            )
    name = "node_infiniband_port_data_received_bytes_total"
    frames[name] = make_frame(name, IB_ROWS, ib, START, step, "rate")
    if holes:
        mask = np.random.default_rng(seed + 1)
        for f in frames.values():
            f.values[mask.random(f.values.shape) < holes] = np.nan
    return frames


def test_node_median_pools_each_nodes_rows_with_nan_inside() -> None:
    x = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 5.0], [7.0, 7.0], [9.0, 9.0]])
    node = np.array([0, 0, 0, 1, -1])
    out = node_median(x, node, 3)
    np.testing.assert_array_equal(out, [[2.0, 5.0], [7.0, 7.0], [np.nan, np.nan]])


def test_relative_offsets_need_peers_and_keep_nan() -> None:
    ctx = cluster()
    s = ctx.by_name()["DCGM_FI_DEV_POWER_USAGE"]
    peers = np.ones((NODES, STEPS), dtype=bool)
    rel = offsets(s, peers, 4)
    busy = rel[:-8, :50]  # the spare idles until step 90
    assert np.nanmax(np.abs(busy)) < 0.2 and np.all(np.isfinite(busy))
    few = np.zeros((NODES, STEPS), dtype=bool)
    few[:3] = True  # three nodes' 24 GPUs (one peer key here) are fewer than 25 peers
    assert np.all(np.isnan(offsets(s, few, 25))) and not np.all(np.isnan(offsets(s, few, 24)))
    holed = cluster(holes=0.2)
    hs = holed.by_name()["DCGM_FI_DEV_POWER_USAGE"]
    got = offsets(hs, peers, 4)
    assert np.array_equal(np.isnan(got) & ~np.isnan(hs.values), np.zeros_like(got, dtype=bool))  # known stays known


def test_pooling_in_blocks_of_steps_gives_the_same_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = cluster(0.08, holes=0.1)
    peers = ctx.groups == 1
    names = ["node_infiniband_port_data_received_bytes_total"]
    whole = pooled(ctx.by_name(), names, peers, 4)
    monkeypatch.setattr(node_offsets, "CHUNK_CELLS", 1000)  # 48 series: blocks of 20 steps
    np.testing.assert_array_equal(pooled(ctx.by_name(), names, peers, 4), whole)


@pytest.mark.parametrize("holes", [0.0, 0.1])
@pytest.mark.parametrize("shift", [0.06, 0.1])
def test_a_node_a_few_per_cent_slower_is_found_within_half_an_hour(shift: float, holes: float) -> None:
    found = FailSlowDetector().scan(cluster(shift, holes), None)[0]
    assert {f.node for f in found} == {CULPRIT}
    first = min(f.ts for f in found if f.score >= 6.0)
    assert first - (START + ONSET * STEP) <= 1800.0
    assert all(f.hint == "performance_degradation" and f.component == "node" for f in found)
    assert "utilisation -" in found[0].evidence.note and "IB throughput -" in found[0].evidence.note
    assert all("utilisation -" in f.evidence.note for f in found)  # through checkpoints too: the last judged


@pytest.mark.parametrize("holes", [0.0, 0.1])
def test_checkpoints_rank_0_a_spare_joining_and_holes_raise_nothing(holes: float) -> None:
    assert FailSlowDetector().scan(cluster(0.0, holes), None)[0] == []


@pytest.mark.parametrize("seed", [0, 1])
def test_a_node_found_through_its_scrape_phase_jitter(seed: int) -> None:
    """Each node's samples jump by 6 % from step to step together (its scrape phase in the step rhythm):
    each step's shift is within one spread; the node's shifts are smoothed over two minutes first."""
    assert [f for f in FailSlowDetector().scan(cluster(0.0, seed=seed, jitter=0.06), None)[0] if f.score >= 6.0] == []
    found = FailSlowDetector().scan(cluster(0.08, seed=seed, jitter=0.06), None)[0]
    assert {f.node for f in found if f.score >= 6.0} == {CULPRIT}
    assert min(f.ts for f in found if f.score >= 6.0) - (START + ONSET * STEP) <= 1800.0


@pytest.mark.parametrize(("step", "mixed"), [(60.0, False), (15.0, False), (30.0, True)])
def test_other_grids_and_exporter_versions(step: float, mixed: bool) -> None:
    """Settings are in seconds: a 60-s or 15-s grid finds the 7 % node in half an hour too; nodes on
    two exporter versions (SM activity under two names) are judged alike."""
    assert FailSlowDetector().scan(cluster(0.0, 0.05, step=step, mixed=mixed), None)[0] == []
    found = FailSlowDetector().scan(cluster(0.07, 0.05, step=step, mixed=mixed), None)[0]
    assert {f.node for f in found} == {CULPRIT}
    assert min(f.ts for f in found if f.score >= 6.0) - (START + ONSET * STEP) <= 1800.0
    if mixed:
        assert "SM activity -" in found[-1].evidence.note


def test_the_peer_detector_alone_misses_it() -> None:
    others = [d for d in default_detectors() if d.name != "failslow"]
    ctx = cluster(0.07)
    assert not [a for a in engine_alarms(ctx, others) if a.node == CULPRIT]
    alarms = engine_alarms(ctx)
    assert [(a.node, a.component, a.diagnosis) for a in alarms] == [(CULPRIT, "node", "performance_degradation")]


@pytest.mark.parametrize("holes", [0.0, 0.1])
def test_scanning_in_chunks_finds_what_one_scan_finds(holes: float) -> None:
    ctx = cluster(0.08, holes)
    assert assert_chunk_invariant(FailSlowDetector(), ctx, [1, 41, 60, 61, 130, 200]) > 0
    assert assert_chunk_invariant(FailSlowDetector(), ctx, range(1, ctx.steps)) > 0  # the live service


@pytest.mark.parametrize("cut", [90, 150])
def test_a_node_whose_rows_join_later_is_judged_from_then(cut: int) -> None:
    """The spare's exporters start answering when it joins (90) or later: scanned step by step from
    then, as one scan of the run with its rows silent before."""
    frames = cluster_frames(0.08)
    for f in frames.values():
        f.values[[i for i, n in enumerate(f.nodes) if n == SPARE], :cut] = np.nan
    whole = context_of(frames, Catalog.default())
    partial = {}
    for name, f in frames.items():
        keep = [i for i, n in enumerate(f.nodes) if n != SPARE]
        partial[name] = replace(
            f,
            keys=tuple(f.keys[i] for i in keep),
            nodes=tuple(f.nodes[i] for i in keep),
            values=f.values[keep],
            last_seen=f.last_seen[keep],
        )
    later, want = findings_after_rows_join(FailSlowDetector(), context_of(partial, Catalog.default()), whole, cut)
    assert want and {f.node for f in want} == {CULPRIT}
    assert [(f.ts, f.node, f.hint) for f in later] == [(f.ts, f.node, f.hint) for f in want]
    np.testing.assert_allclose([f.score for f in later], [f.score for f in want], rtol=1e-9)


# Simulated recordings: 16 nodes, 2 h, the fault at 45 % of the run, a job restart, agent restarts, a
# remount, checkpoints and evaluations; seeds whose fault is 6-10 % slower.
SIMULATED = [
    (16, "plain", "performance_degradation"),
    (2, "thermal", "thermal_throttle"),
    (6, "power", "power_throttle"),
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int, str], Path]:
    """A recording per (seed, variant), made once for the module."""
    made: dict[tuple[int, str], Path] = {}

    def get(seed: int, variant: str) -> Path:
        if (seed, variant) not in made:
            spec = ClusterSpec(nodes=16, spares=1, scrape_interval=30.0, old_exporter_fraction=0.3)
            benign = Benign(restarts=1, agent_restarts=1, remounts=1)
            faults = (FaultRequest("fail_slow", at=0.45, variant=variant),)
            out = tmp_path_factory.mktemp(f"failslow_{variant}")
            write_recording(simulate(Scenario("failslow", spec, 2.0, seed, faults, benign)), out)
            made[(seed, variant)] = out
        return made[(seed, variant)]

    return get


def alarms_of(path: Path, with_failslow: bool) -> list[Alarm]:
    ctx = context_of(load_frames([str(path)]), Catalog.default())
    detectors = [d for d in default_detectors() if with_failslow or d.name != "failslow"]
    return engine_alarms(ctx, detectors)


@pytest.mark.parametrize(("seed", "variant", "diagnosis"), SIMULATED, ids=[v for _, v, _ in SIMULATED])
def test_simulated_fail_slow_nodes_are_found_and_named(
    recorded: Callable[[int, str], Path], seed: int, variant: str, diagnosis: str
) -> None:
    share = fail_slow_share(np.random.default_rng([seed, 100, 0]))  # the transform's first draw
    assert 0.06 <= share <= 0.10
    path = recorded(seed, variant)
    label = json.loads((path / "labels.json").read_text())["faults"][0]
    assert label["expected"] == [diagnosis] and label["failure_ts"] is None and label["component"] == "node"
    alarms = alarms_of(path, True)
    mine = [a for a in alarms if a.node == label["node"]]
    assert mine and [a for a in alarms if a.node != label["node"]] == []
    first = mine[0]
    assert label["onset_ts"] - 60 <= first.ts <= label["onset_ts"] + 1800
    assert first.diagnosis == diagnosis
    # Thermal bits on a GPU or two open an alarm at once (state detector), before the CUSUM has built
    # up: then the alarm names those GPUs. Power-brake bits come on all GPUs at once: the node.
    assert first.component == "node" or (variant == "thermal" and first.component.startswith("gpu/"))
    if variant == "plain":  # throttle reasons alone open the others at once (the state detector)
        assert not [a for a in alarms_of(path, False) if a.node == label["node"]]


def test_the_simulated_fault_shows_in_the_nodes_pooled_offset_only(recorded: Callable[[int, str], Path]) -> None:
    """Each of its series stays among its peers (KINDS lists no signal for it); the node's median does not."""
    path = recorded(16, "plain")
    label = json.loads((path / "labels.json").read_text())["faults"][0]
    ctx = context_of(load_frames([str(path)]), Catalog.default())
    share = fail_slow_share(np.random.default_rng([16, 100, 0]))
    busy = np.ones((len(ctx.nodes), ctx.steps), dtype=bool)
    i, t = ctx.nodes.index(label["node"]), ctx.timestamps
    during = (t >= label["onset_ts"] + 900) & (t < label["end_ts"])
    before = t < label["onset_ts"]
    for names in (
        ["DCGM_FI_DEV_GPU_UTIL"],
        ["DCGM_FI_DEV_POWER_USAGE"],
        ["node_infiniband_port_data_received_bytes_total"],
    ):
        off = pooled(ctx.by_name(), names, busy, 4)
        assert off is not None
        assert np.nanmedian(off[i, during]) < -0.5 * share < np.nanmedian(off[i, before]), names


def test_a_simulated_healthy_run_with_every_benign_event_raises_no_fail_slow(tmp_path: Path) -> None:
    """24 nodes for 3 h: checkpoints every half hour (rank 0 lingers), an evaluation, two job restarts
    with staggered returns, a stall and a restart after a GPU drops off (a spare joins), storage
    slowdowns, agent restarts, a remount, missed scrapes, half the nodes on an older dcgm-exporter."""
    spec = ClusterSpec(nodes=24, spares=2, scrape_interval=30.0, old_exporter_fraction=0.5)
    benign = Benign(
        restarts=2,
        agent_restarts=2,
        remounts=1,
        storage_slowdowns_per_hour=0.5,
        checkpoint_every_min=30,
        eval_every_min=45,
    )
    out = tmp_path / "healthy"
    sim = simulate(Scenario("healthy", spec, 3.0, 3, (FaultRequest("gpu_card_drop", at=0.3),), benign))
    write_recording(sim, out)
    assert {e.kind for e in sim.events} >= {"checkpoint", "restart", "stall", "eval"}
    ctx = context_of(load_frames([str(out)]), Catalog.default())
    assert FailSlowDetector().scan(ctx, None)[0] == []


def test_the_engine_streamed_step_by_step_raises_the_alarm_of_one_analysis(
    recorded: Callable[[int, str], Path],
) -> None:
    frames = load_frames([str(recorded(16, "plain"))])
    whole = analyze_frames(frames)
    mine = [a for a in whole if a.diagnosis == "performance_degradation"]
    assert mine
    first = next(iter(frames.values()))
    at = round((mine[0].ts - first.start) / first.step)
    engine = Engine()
    latest: dict[str, Alarm] = {}
    cuts = [0, at - 12, *range(at - 11, at + 4), first.steps]  # a warm-up chunk, steps one by one, the rest
    for a, b in itertools.pairwise(cuts):
        chunk = {n: replace(f, start=f.start + a * f.step, values=f.values[:, a:b]) for n, f in frames.items()}
        latest.update((x.id, x) for x in engine.scan(chunk).alarms)
    streamed = sorted(latest.values(), key=lambda x: (x.ts, x.node))
    assert [(x.id, x.node, x.component, x.diagnosis, x.resolved_ts) for x in streamed] == [
        (x.id, x.node, x.component, x.diagnosis, x.resolved_ts) for x in whole
    ]
    for x, y in zip(streamed, whole, strict=True):
        # The fused score adds a quarter of the node's peer findings, whose deviations are float32.
        assert x.score == pytest.approx(y.score, rel=1e-3)
        assert [(e.metric, e.value) for e in x.evidence] == [(e.metric, e.value) for e in y.evidence]


def test_a_quantile_of_no_rows_is_unknown() -> None:
    # Live, a peer key's every series can sit on nodes not yet known (node index -1): no rows.
    assert np.isnan(column_quantile(np.zeros((0, 3)), 0.5)).all()
