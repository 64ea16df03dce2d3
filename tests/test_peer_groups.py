"""What the peer detector must not compare: idle nodes, a node that just changed work, tiny groups;
and what it must learn: a GPU that runs much hotter all along. Plus the grid step picked from data."""

from __future__ import annotations

import numpy as np
import pytest

from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.detect.groups import IDLE, LONE, MAIN, UNKNOWN, settled, workload_groups
from peerwatch.detect.peer import PeerDetector
from peerwatch.engine import context_of
from peerwatch.frames import Frame, infer_step
from peerwatch.model import SeriesBlock, SeriesKey
from streamkit import findings_after_rows_join

START, STEP, STEPS, NODES = 1_764_460_800.0, 30.0, 200, 16


def gpu_rows() -> list[dict[str, str]]:
    return [
        {"Hostname": f"gpu{n:02d}", "gpu": str(g), "instance": f"gpu{n:02d}:9400"}
        for n in range(NODES)
        for g in range(8)
    ]


def frames(util: np.ndarray, temp: np.ndarray) -> dict[str, Frame]:
    rows = gpu_rows()
    return {
        "DCGM_FI_DEV_GPU_UTIL": make_frame("DCGM_FI_DEV_GPU_UTIL", rows, util, START, STEP),
        "DCGM_FI_DEV_GPU_TEMP": make_frame("DCGM_FI_DEV_GPU_TEMP", rows, temp, START, STEP),
    }


def busy(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    util = 97 + rng.normal(0, 1, (NODES * 8, STEPS))
    temp = 62 + rng.normal(0, 0.5, (NODES * 8, STEPS))
    return util, temp


def findings_on(f: dict[str, Frame], node: str) -> list[float]:
    ctx = context_of(f, Catalog.default())
    return [x.score for x in PeerDetector().scan(ctx, None)[0] if x.node == node]


def test_idle_spares_are_not_compared_with_each_other() -> None:
    rng = np.random.default_rng(1)
    util, temp = busy(rng)
    spares = slice(10 * 8, NODES * 8)  # six idle nodes: enough to form a group of peers
    util[spares] = rng.uniform(0, 2, (6 * 8, STEPS))
    temp[spares] = 33 + rng.normal(0, 0.5, (6 * 8, STEPS))
    temp[12 * 8 + 2, 60:] += 9  # one idle GPU warmer than the other idle ones: no work, no comparison
    assert findings_on(frames(util, temp), "gpu12") == []
    temp[3 * 8 + 2, 60:] += 9  # the same on a busy node is a finding
    assert findings_on(frames(util, temp), "gpu03")


def test_a_node_alone_in_its_group_is_not_compared_with_its_own_gpus() -> None:
    rng = np.random.default_rng(2)
    util, temp = busy(rng)
    util[15 * 8 : 16 * 8] = 45 + rng.normal(0, 1, (8, STEPS))  # a light job: a group of one node
    temp[15 * 8 + 4, 60:] += 8  # one of its GPUs hotter than its siblings
    assert findings_on(frames(util, temp), "gpu15") == []


def test_a_gpu_that_always_runs_much_hotter_is_learnt_and_a_new_fault_is_not() -> None:
    rng = np.random.default_rng(3)
    util, temp = busy(rng)
    temp[5 * 8 + 5] += 11  # far beyond the clip of one pass (3 robust scales of about 1.2 C)
    scores = findings_on(frames(util, temp), "gpu05")
    assert not [s for s in scores if s >= 6]
    temp[6 * 8 + 1, 150:] += 11  # the same size, new: found
    assert max(findings_on(frames(util, temp), "gpu06"), default=0) >= 6


def test_a_spare_that_joins_is_judged_only_once_its_own_offset_is_known() -> None:
    rng = np.random.default_rng(4)
    util, temp = busy(rng)
    join = 100
    util[15 * 8 : 16 * 8, :join] = rng.uniform(0, 2, (8, join))  # idle until it joins the job
    temp[15 * 8 : 16 * 8, :join] = 33.0
    temp[15 * 8 + 6, join:] += 9  # its GPU 6 runs hotter than anyone's, from the start of its work
    ctx = context_of(frames(util, temp), Catalog.default())
    found = [x for x in PeerDetector().scan(ctx, None)[0] if x.node == "gpu15"]
    settle_and_learn = 10 + 20 + 10  # not compared, then the offset's delay and its least count
    assert all(x.ts >= START + STEP * (join + settle_and_learn) for x in found)


def test_settled_hides_a_node_for_the_steps_after_it_changed_group() -> None:
    groups = np.array([[IDLE] * 5 + [MAIN] * 10, [MAIN] * 15])
    out = settled(groups, 4)
    assert out[0].tolist() == [IDLE] * 5 + [UNKNOWN] * 4 + [MAIN] * 6
    assert out[1].tolist() == [MAIN] * 15


def _blocks(interval: float, series: int, samples: int = 20) -> list[SeriesBlock]:
    ts = START + interval * np.arange(samples) + 0.003 * np.arange(samples) % 0.01  # scrape jitter
    name = f"m{interval:g}"
    return [
        SeriesBlock(SeriesKey.of(name, {"instance": f"n{i}:9100"}), ts, np.ones(samples), None) for i in range(series)
    ]


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [((60.0,), 60.0), ((15.0,), 30.0), ((30.0,), 30.0), ((10.0, 60.0), 60.0), ((120.0,), 120.0)],
)
def test_the_grid_step_follows_the_scrape_interval(intervals: tuple[float, ...], expected: float) -> None:
    blocks = [b for i, interval in enumerate(intervals) for b in _blocks(interval, 10 + i)]
    assert infer_step(blocks) == expected


def test_the_grid_step_is_30_s_when_no_series_has_two_samples() -> None:
    assert infer_step(_blocks(60.0, 5, samples=1)) == 30.0
    assert infer_step([]) == 30.0


def test_workload_groups_streamed_in_chunks_equal_one_pass_also_when_a_node_joins_later() -> None:
    rng = np.random.default_rng(4)
    activity = np.where(rng.random((6, 150)) < 0.05, np.nan, 97 + rng.normal(0, 1, (6, 150)))
    activity[1, 40:] = 2.0  # stops working: idle after the slow median follows
    activity[2, :70] = np.nan  # silent, then a spare joining
    activity[3, 10:] = 50.0 + 10 * np.sin(np.arange(140) / 5)  # work of its own
    whole, _ = workload_groups(activity, 6, 150)
    parts, state = [], None
    for a, b in [(0, 1), (1, 59), (59, 61), (61, 149), (149, 150)]:
        part, state = workload_groups(activity[:, a:b], 6, b - a, state)
        parts.append(part)
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), whole)
    assert {IDLE, MAIN, LONE} <= set(np.unique(whole).tolist())
    # a node first seen in a later chunk starts with no past; the others' groups are unchanged
    _, state = workload_groups(activity[:5, :100], 5, 100)
    rest, _ = workload_groups(activity[:, 100:], 6, 50, state)
    np.testing.assert_array_equal(rest[:5], whole[:5, 100:])


def test_a_node_that_joins_later_is_streamed_as_one_scan_judges_it() -> None:
    rng = np.random.default_rng(8)
    util, temp = busy(rng)
    temp[3 * 8 + 2, 150:] += 12.0  # gpu03's GPU 2 runs hot
    util[-8:, :60] = temp[-8:, :60] = np.nan  # gpu15 reports from step 60 on
    whole = context_of(frames(util, temp), Catalog.default())
    rows = gpu_rows()[:-8]
    partial = context_of(
        {name: make_frame(name, rows, f.values[:-8], START, STEP) for name, f in frames(util, temp).items()},
        Catalog.default(),
    )
    later, want = findings_after_rows_join(PeerDetector(), partial, whole, 60)
    assert later == want and {f.node for f in want} == {"gpu03"}
