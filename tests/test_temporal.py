"""The temporal self-baseline: slow drifts found, and what a healthy cluster does left alone.

Temperatures follow a simple physical model: ambient plus each GPU's own gain times the load
(a GPU that runs hotter does so in proportion to its heat), a thermal lag of 90 s, sensor noise,
whole degrees, 12 nodes x 8 GPUs, 30 s steps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from enginekit import alarms_of
from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.detect.context import Context
from peerwatch.detect.peer import PeerDetector
from peerwatch.detect.stream import columns
from peerwatch.detect.temporal import (
    SLACK,
    TemporalDetector,
    TemporalState,
    regroup,
    rolling_mean,
    running_quantile,
)
from peerwatch.engine import context_of, default_detectors
from peerwatch.frames import Frame
from peerwatch.model import Finding
from streamkit import assert_chunk_invariant

START, STEP, NODES, STEPS, ONSET = 1_764_460_800.0, 30.0, 12, 480, 160
CULPRIT, GPU = "gpu05", "3"
ROWS = [
    {"Hostname": f"gpu{n:02d}", "gpu": str(g), "device": f"nvidia{g}", "instance": f"gpu{n:02d}:9400"}
    for n in range(NODES)
    for g in range(8)
]
ROW = next(i for i, r in enumerate(ROWS) if r["Hostname"] == CULPRIT and r["gpu"] == GPU)
HOUR = 3600.0 / STEP  # steps


def lag(x: np.ndarray, steps: float = 90.0) -> np.ndarray:
    """Thermal lag: exponential smoothing along time."""
    a, out, acc = 1 - np.exp(-STEP / steps), np.empty_like(x), x[:, 0].copy()
    for k in range(x.shape[1]):
        acc += a * (x[:, k] - acc)
        out[:, k] = acc
    return out


def temps(load: np.ndarray, extra: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """Whole degrees from a load (0 idle .. 1 training) per GPU and step, plus ``extra`` degrees."""
    rng = np.random.default_rng(seed)
    gain = 40 * (1 + rng.normal(0, 0.05, (len(ROWS), 1)))
    gain[rng.random((len(ROWS), 1)) < 0.1] *= 1.15  # some GPUs always run hotter
    t = 25 + lag(8 + gain * load) + (0 if extra is None else extra)
    return np.rint(t + rng.normal(0, 0.4, t.shape))


def busy() -> np.ndarray:
    return np.ones((len(ROWS), STEPS))


def ramp(rate_per_hour: float, onset: int = ONSET) -> np.ndarray:
    return np.clip(np.arange(STEPS) - onset, 0, None) * rate_per_hour / HOUR


def context(temp: np.ndarray, name: str = "DCGM_FI_DEV_MEMORY_TEMP") -> Context:
    util = 97 * np.ones((len(ROWS), STEPS))
    frames: dict[str, Frame] = {
        name: make_frame(name, ROWS, temp, START, STEP),
        "DCGM_FI_DEV_GPU_UTIL": make_frame("DCGM_FI_DEV_GPU_UTIL", ROWS, util, START, STEP),
    }
    return context_of(frames, Catalog.default())


def first(findings: list[Finding], min_score: float = 0.0) -> float | None:
    ts = [f.ts for f in findings if f.score >= min_score]
    return min(ts) if ts else None


def one_gpu(x: np.ndarray) -> np.ndarray:
    out = np.zeros((len(ROWS), STEPS))
    out[ROW] = x
    return out


def checkpoints_and_restart() -> np.ndarray:
    load = busy()
    for k in range(40, STEPS, 60):  # a 3-minute checkpoint every half hour
        load[:, k : k + 6] = 0.1
    load[:, 250:270] = 0.0  # a restart: 10 minutes idle, nodes reload a little apart
    for n in range(NODES):
        load[n * 8 : n * 8 + 8, 270 : 270 + n % 4] = 0.0
    load[:, 330:370] = 0.6  # a 20-minute evaluation phase
    return temps(load)


def spares() -> np.ndarray:
    load = busy()
    load[-16:] = 0.05  # two idle spares; one joins the job after 2 h
    load[-8:, 240:] = 1.0
    return temps(load)


def gaps() -> np.ndarray:
    t = temps(busy())
    t[np.random.default_rng(1).random(t.shape) < 0.05] = np.nan  # missed scrapes
    t[8:16, 200:204] = np.nan  # an exporter restart: a node silent for 2 minutes
    return t


def job_change() -> np.ndarray:
    load = busy()
    load[ROW, :200] = 0.05  # one GPU idle, then given work: a step, not a drift
    return temps(load)


QUIET: list[tuple[str, Callable[[], np.ndarray]]] = [
    ("constant offset", lambda: temps(busy(), one_gpu(np.full(STEPS, 6.0)))),
    ("cluster-wide ramp", lambda: temps(busy(), np.broadcast_to(ramp(6.0), (len(ROWS), STEPS)))),
    ("ambient drift of one node", lambda: temps(busy(), np.repeat(np.eye(NODES)[2][:, None] * ramp(4.0), 8, 0))),
    ("missed scrapes and an exporter restart", gaps),
    ("checkpoints, a restart and an eval", checkpoints_and_restart),
    ("idle spares, one joining", spares),
    ("one GPU given work", job_change),
    ("a step of 4 C", lambda: temps(busy(), one_gpu(np.where(np.arange(STEPS) >= ONSET, 4.0, 0.0)))),
]


@pytest.mark.parametrize(("label", "build"), QUIET, ids=[q[0] for q in QUIET])
def test_healthy_moves_score_nothing(label: str, build: Callable[[], np.ndarray]) -> None:
    assert TemporalDetector().scan(context(build()), None)[0] == []


@pytest.mark.parametrize("holes", [0.0, 0.1])
def test_a_slow_ramp_on_one_gpu_is_found_on_it_only(holes: float) -> None:
    t = temps(busy(), one_gpu(ramp(4.0)))
    t[np.random.default_rng(2).random(t.shape) < holes] = np.nan
    found = TemporalDetector().scan(context(t), None)[0]
    assert found and {(f.node, f.component) for f in found} == {(CULPRIT, f"gpu/{GPU}")}
    assert min(f.ts for f in found) >= START + ONSET * STEP
    assert max(f.score for f in found) >= 6  # enough for the policy on its own
    assert all(f.hint is None for f in found)  # the diagnoser names it from the signal


def test_the_ramp_is_found_before_the_peer_detector_sees_it() -> None:
    """The reason to exist: 4 C an hour is learnt into the peer detector's offset as it goes."""
    ctx = context(temps(busy(), one_gpu(ramp(4.0))))
    mine = first(TemporalDetector().scan(ctx, None)[0])
    peers = first([f for f in PeerDetector().scan(ctx, None)[0] if f.node == CULPRIT])
    assert mine is not None and mine - (START + ONSET * STEP) <= 3600
    assert peers is None or mine < peers - 1800


def test_the_engine_alarms_earlier_and_names_hbm() -> None:
    ctx = context(temps(busy(), one_gpu(ramp(4.0))))
    others = [d for d in default_detectors() if d.name != "temporal"]
    alarms = alarms_of(ctx)
    before = alarms_of(ctx, others)
    (alarm,) = alarms
    assert (alarm.node, alarm.component, alarm.diagnosis) == (CULPRIT, f"gpu/{GPU}", "ecc_hbm")
    assert alarm.ts - (START + ONSET * STEP) <= 2 * 3600  # 4 C an hour: 3 C of rise reach the policy's 6
    assert not before or alarm.ts < min(a.ts for a in before)


def test_causal_a_prefix_gives_the_same_findings() -> None:
    t = temps(busy(), one_gpu(ramp(6.0)))
    full = TemporalDetector().scan(context(t), None)[0]
    cut = 400
    frames = {
        "DCGM_FI_DEV_MEMORY_TEMP": make_frame("DCGM_FI_DEV_MEMORY_TEMP", ROWS, t[:, :cut], START, STEP),
        "DCGM_FI_DEV_GPU_UTIL": make_frame("DCGM_FI_DEV_GPU_UTIL", ROWS, np.full((len(ROWS), cut), 97.0), START, STEP),
    }
    part = TemporalDetector().scan(context_of(frames, Catalog.default()), None)[0]
    assert part and part == [f for f in full if f.ts < START + cut * STEP]


def test_nothing_during_warm_up_and_only_in_the_bad_direction() -> None:
    steep = one_gpu(ramp(30.0, onset=0))
    early = TemporalDetector().scan(context(temps(busy(), steep)), None)[0]
    assert first(early) is not None and first(early) >= START + (HOUR - 1) * STEP  # a full hour first
    # Headroom to the thermal limit is bad when it falls: a rising one is not scored.
    tlimit = 30.0 + np.random.default_rng(3).normal(0, 0.4, (len(ROWS), STEPS))
    name = "DCGM_FI_DEV_GPU_TEMP_TLIMIT"
    assert TemporalDetector().scan(context(np.rint(tlimit + one_gpu(ramp(4.0))), name), None)[0] == []
    assert TemporalDetector().scan(context(np.rint(tlimit - one_gpu(ramp(4.0))), name), None)[0]


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_running_statistics_match_numpy_on_every_prefix(q: float) -> None:
    import warnings

    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 40))
    x[rng.random(x.shape) < 0.3] = np.nan
    got_q = running_quantile(x, 6, q, stride=2)
    got_m = rolling_mean(x, 6)
    for t in range(x.shape[1]):
        window = x[:, max(0, t - 5) : t + 1][:, ::-1][:, ::2]  # every second step back from t
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            np.testing.assert_allclose(got_q[:, t], np.nanquantile(window, q, axis=1), equal_nan=True)
            full = x[:, t - 5 : t + 1] if t >= 5 else None
            want = np.full(3, np.nan) if full is None else np.nanmean(full, axis=1)
            if full is not None:
                want[2 * np.sum(~np.isnan(full), axis=1) < 6] = np.nan
        np.testing.assert_allclose(got_m[:, t], want, equal_nan=True)


def slow_ramp_with_gaps() -> Context:
    """1.5 C an hour from step 60: only the three-hour window sees it (from step 359), through missed scrapes."""
    t = temps(busy(), one_gpu(ramp(1.5, onset=60)))
    t[np.random.default_rng(5).random(t.shape) < 0.05] = np.nan
    t[8:16, 200:204] = np.nan  # an exporter restart
    return context(t)


def ramp_through_checkpoints() -> Context:
    return context(checkpoints_and_restart() + one_gpu(ramp(6.0)))


def headroom_falling() -> Context:
    tlimit = 30.0 + np.random.default_rng(3).normal(0, 0.4, (len(ROWS), STEPS))
    return context(np.rint(tlimit - one_gpu(ramp(4.0))), "DCGM_FI_DEV_GPU_TEMP_TLIMIT")


CHUNKED: list[tuple[str, Callable[[], Context]]] = [
    ("slow ramp, three-hour window, gaps", slow_ramp_with_gaps),
    ("ramp through checkpoints and a restart", ramp_through_checkpoints),
    ("falling headroom", headroom_falling),
]


@pytest.mark.parametrize(("label", "build"), CHUNKED, ids=[c[0] for c in CHUNKED])
def test_scanning_in_chunks_finds_what_one_scan_finds(label: str, build: Callable[[], Context]) -> None:
    ctx = build()
    # Around the first full three-hour window, and chunks longer and shorter than the buffers' slack.
    assert assert_chunk_invariant(TemporalDetector(), ctx, [1, 2, 40, 41, 41 + SLACK + 1, 300, 359, 360, 361]) > 0
    assert assert_chunk_invariant(TemporalDetector(), ctx, range(1, ctx.steps)) > 0  # the live service


def frames_of(temp: np.ndarray, rows: list[dict[str, str]], util_rows: list[dict[str, str]]) -> Context:
    frames = {
        "DCGM_FI_DEV_MEMORY_TEMP": make_frame("DCGM_FI_DEV_MEMORY_TEMP", rows, temp, START, STEP),
        "DCGM_FI_DEV_GPU_UTIL": make_frame(
            "DCGM_FI_DEV_GPU_UTIL", util_rows, np.full((len(util_rows), temp.shape[1]), 97.0), START, STEP
        ),
    }
    return context_of(frames, Catalog.default())


@pytest.mark.parametrize(("cut", "culprits"), [(150, {CULPRIT, "gpu12"}), (400, {CULPRIT})])
def test_rows_and_nodes_that_join_later_are_judged_from_then(cut: int, culprits: set[str]) -> None:
    """A node's GPUs start reporting temperatures late (their group lands among the others) and a new node
    joins: scanned step by step they count from when they appear, as one scan with them silent before."""
    new_node = [{**r, "Hostname": "gpu12", "instance": "gpu12:9400"} for r in ROWS[:8]]
    late = [r for r in ROWS if r["Hostname"] == "gpu02"]
    early = [r for r in ROWS if r["Hostname"] != "gpu02"]
    rows = early + late + new_node
    t = np.concatenate([temps(busy(), one_gpu(ramp(6.0))), temps(busy(), seed=1)[:8]])
    t += np.repeat(np.arange(NODES + 1) * 7.0, 8)[:, None]  # racks apart: a node's past is its own
    t[-5] += ramp(6.0, onset=cut + 10)  # a drift on the new node after it joined
    t = t[[ROWS.index(r) for r in early + late] + list(range(len(ROWS), len(ROWS) + 8))]
    t[len(early) :, :cut] = np.nan  # one scan: silent until they join
    whole = frames_of(t, rows, ROWS + new_node)
    first = frames_of(t[: len(early), :cut], early, ROWS)

    detector = TemporalDetector()
    found, state = detector.scan(first, None)
    for k in range(cut, STEPS):
        more, state = detector.scan(columns(whole, k, k + 1), state)
        found.extend(more)
    want = detector.scan(whole, None)[0]

    def key(f: Finding) -> tuple[float, str, str]:
        return (f.ts, f.node, f.component)

    assert {f.node for f in want} == culprits  # the new node's drift needs an hour after it joined
    assert sorted(map(key, found)) == sorted(map(key, want))
    np.testing.assert_allclose([f.score for f in sorted(found, key=key)], [f.score for f in sorted(want, key=key)])
    assert max(look_backs(state)) <= 10 * 45 + SLACK  # the look-back, not the run


def look_backs(state: TemporalState) -> list[int]:
    """Steps held by each of the state's arrays."""
    return [
        n
        for f in state.families.values()
        for n in (f.med.shape[1], f.diff.shape[1], f.resid.sums.shape[0], f.ref.sums.shape[0], f.steady[-1].shape[1])
    ]


def test_a_groups_past_follows_it_when_groups_land_among_others() -> None:
    past = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])  # groups named by their first rows 0, 8, 16
    now = regroup(past, np.array([0, 8, 16]), np.array([0, 8, 12, 16, 24]), np.nan)
    np.testing.assert_array_equal(now, [[1, 1], [2, 2], [np.nan, np.nan], [3, 3], [np.nan, np.nan]])
