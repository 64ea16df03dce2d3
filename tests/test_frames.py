from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peerwatch.frames import FrameBuilder, counter_rates, declared_kind
from peerwatch.model import ProblemLog, SeriesBlock, SeriesKey

T0 = 1_764_460_800.0  # a multiple of 30 s
NOW = T0 + 7 * 86_400


def block(name: str, ts: list[float], vals: list[float], mtype: str | None = None, **labels: str) -> SeriesBlock:
    return SeriesBlock(SeriesKey.of(name, labels), np.array(ts, float), np.array(vals, float), mtype)


def build(*blocks: SeriesBlock, **kw: object) -> tuple[dict, ProblemLog]:  # type: ignore[type-arg]
    problems = ProblemLog()
    fb = FrameBuilder(30.0, problems=problems, now=NOW, **kw)  # type: ignore[arg-type]
    fb.add_all(blocks)
    return fb.build(), problems


def test_jittered_scrapes_of_two_exporters_share_the_grid() -> None:
    frames, problems = build(
        block("g", [T0 + 0.004, T0 + 29.998, T0 + 60.01], [1, 2, 3], instance="a:9100"),
        block("g", [T0 - 7.5, T0 + 22.5, T0 + 52.5], [4, 5, 6], instance="b:9100"),
    )
    f = frames["g"]
    assert not problems.problems
    assert f.nodes == ("b", "a")  # rows in the order of their first sample (frames/framer.py)
    # Step k holds (k*30-30, k*30]: T0+0.004 and T0+29.998 share the step ending at T0+30; the later wins.
    assert f.start == T0
    np.testing.assert_array_equal(f.values, [[4, 5, 6, np.nan], [np.nan, 2, np.nan, 3]])


def test_missing_samples_are_nan_never_zero() -> None:
    frames, _ = build(block("g", [T0, T0 + 30, T0 + 120], [1, 0, 5], node="n1"))
    np.testing.assert_array_equal(frames["g"].values[0], [1, 0, np.nan, np.nan, 5])


def test_out_of_order_and_split_blocks_merge() -> None:
    frames, _ = build(
        block("g", [T0 + 90, T0 + 60], [4, 3], node="n"),
        block("g", [T0, T0 + 30], [1, 2], node="n"),
        block("g", [T0 + 59, T0 + 150], [99, 6], node="n"),  # older than the held T0+60 sample: loses
    )
    np.testing.assert_array_equal(frames["g"].values[0], [1, 2, 3, 4, np.nan, 6])
    assert frames["g"].last_seen[0] == T0 + 150


def test_counter_rates_handle_resets_and_gaps() -> None:
    frames, _ = build(
        block("c_total", [T0, T0 + 30, T0 + 60, T0 + 90, T0 + 180], [100, 130, 10, 40, 100], "counter", node="n")
    )
    f = frames["c_total"]
    assert f.kind == "rate"
    # reset at T0+60: increase counts from zero (10 / 30 s); a missed step averages over 90 s.
    np.testing.assert_allclose(f.values[0], [np.nan, 1.0, 10 / 30, 1.0, np.nan, np.nan, 60 / 90])


def test_rates_use_true_sample_times_not_step_times() -> None:
    frames, _ = build(block("c", [T0 - 10, T0 + 25], [0, 70], "counter", node="n"))
    np.testing.assert_allclose(frames["c"].values[0], [np.nan, 2.0])


def test_counter_rate_unknown_across_long_gap() -> None:
    values = np.array([[0.0, 10.0, np.nan]])
    times = np.array([[0.0, 700.0, 730.0]])
    np.testing.assert_array_equal(counter_rates(values, times), [[np.nan, np.nan, np.nan]])


@pytest.mark.parametrize(
    ("name", "declared", "kind"),
    [
        ("x_total", "counter", "rate"),
        ("x", "gauge", "gauge"),
        ("x", None, "gauge"),
        ("h_bucket", "histogram", "rate"),
        ("h_count", "summary", "rate"),
        ("s", "summary", "gauge"),  # quantiles are gauges
        ("g_bucket", "gaugehistogram", "gauge"),
    ],
)
def test_declared_kind(name: str, declared: str | None, kind: str) -> None:
    assert declared_kind(name, declared) == kind


def test_bad_timestamps_and_infinities_are_reported_and_the_rest_kept() -> None:
    frames, problems = build(
        block("g", [T0, T0 + 30, NOW + 10 * 86_400, 12.0], [1, 2, 3, 4], node="n"),
        block("h", [T0, T0 + 30], [np.inf, 7], node="n"),
    )
    np.testing.assert_array_equal(frames["g"].values[0], [1, 2])
    np.testing.assert_array_equal(frames["h"].values[0], [np.nan, 7])
    messages = " ".join(str(p) for p in problems)
    assert "impossible timestamps" in messages and 'g{node="n"}' in messages
    assert "infinite values" in messages and 'h{node="n"}' in messages


def test_a_far_sample_is_set_aside_not_a_grid_of_the_whole_span() -> None:
    far = T0 + 60 * 86_400
    problems = ProblemLog()
    fb = FrameBuilder(30.0, problems=problems, now=far, batch=1)
    fb.add(block("g", [far], [9], node="a"))  # first, so the grid cannot be sized from the bulk
    fb.add_all(block("g", [T0 + 30 * i for i in range(40)], list(range(40)), node=n) for n in "ab")
    f = fb.build()["g"]
    assert (f.start, f.steps) == (T0, 40)
    assert sum(r.vals.size for r in fb._metrics.values()) <= 2 * 8 * 64  # two blocks of rows, not 60 days
    assert "60.0 days after the main stretch" in str(problems.problems[0]) and 'g{node="a"}' in str(
        problems.problems[0]
    )


def test_a_long_gap_splits_the_data_into_stretches_judged_apart() -> None:
    problems = ProblemLog()
    fb = FrameBuilder(30.0, problems=problems, now=NOW)
    first = [T0 + 30 * i for i in range(30)]
    fb.add_all(block("g", [*first, *(t + 7200 for t in first)], [1.0] * 60, node=n) for n in "ab")
    fb.add(block("g", [T0 + 86_400], [5.0], node="c"))  # a stray: reported, not judged
    spans = fb.segments()
    assert [(s.lo * 30.0, s.steps) for s in spans] == [(T0, 30), (T0 + 7200, 30)]
    second = fb.frames(spans[1])["g"]
    assert second.nodes == ("a", "b") and not np.isnan(second.values).any()
    text = " ".join(str(p) for p in problems)
    assert "no data for 106 min" in text and 'g{node="c"}' in text and "too short to judge" in text


def test_short_gaps_stay_on_one_grid() -> None:
    frames, problems = build(block("g", [T0, T0 + 600], [1, 2], node="n"))
    assert frames["g"].steps == 21 and not problems.problems


def test_staleness() -> None:
    frames, _ = build(block("g", [T0], [1], node="a"), block("g", [T0 + 600], [1], node="b"))
    assert list(frames["g"].stale(at=T0 + 600)) == [True, False]


def test_empty_builder() -> None:
    assert FrameBuilder().build() == {}


def _reference(samples: list[tuple[int, float, float]], step: float) -> dict[tuple[int, int], float]:
    """Per (series, step): value of the sample with the largest timestamp in that step."""
    best: dict[tuple[int, int], tuple[float, float]] = {}
    for series, ts, v in samples:
        cell = (series, int(np.ceil(ts / step)))
        if cell not in best or ts >= best[cell][0]:
            best[cell] = (ts, v)
    return {cell: v for cell, (_, v) in best.items()}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.floats(0, 3000, allow_nan=False), st.floats(-1e6, 1e6)),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 7),
    st.sampled_from([1, 5, 1 << 20]),
)
def test_alignment_matches_a_reference_in_any_order_and_chunking(
    raw: list[tuple[int, float, float]], chunk: int, batch: int
) -> None:
    # Distinct timestamps per series: equal ones have no defined winner.
    seen: set[tuple[int, float]] = set()
    samples = [(s, T0 + t, v) for s, t, v in raw if (s, t) not in seen and not seen.add((s, t))]  # type: ignore[func-returns-value]
    fb = FrameBuilder(30.0, now=NOW, batch=batch, split_gap=None)
    for i in range(0, len(samples), chunk):
        part = samples[i : i + chunk]
        for s in {s for s, _, _ in part}:
            mine = [(t, v) for s2, t, v in part if s2 == s]
            fb.add(block("g", [t for t, _ in mine], [v for _, v in mine], series=str(s)))
    f = fb.build()["g"]
    expected = _reference(samples, 30.0)
    k0 = round(f.start / 30.0)
    got = {}
    for i, key in enumerate(f.keys):
        for j in np.nonzero(~np.isnan(f.values[i]))[0]:
            got[(int(key.get("series") or 0), k0 + int(j))] = float(f.values[i, j])
    assert got == expected


@pytest.mark.parametrize("batch", [1, 1 << 20])  # the clash within one batch, and across two
def test_conflicting_samples_are_noted_once_per_series_and_the_last_read_kept(batch: int) -> None:
    problems = ProblemLog()
    fb = FrameBuilder(30.0, problems=problems, now=NOW, batch=batch)
    fb.add(block("g", [T0, T0 + 30], [1, 2], node="a"))
    fb.add(block("g", [T0, T0 + 30], [1, 2], node="a"))  # a plain duplicate: nothing to say
    fb.add(block("g", [T0, T0 + 30], [5, 6], node="a"))
    fb.add(block("g", [T0, T0 + 30], [7, 8], node="b"))
    fb.add(block("g", [T0, T0 + 30], [7, 8], node="b"))
    np.testing.assert_array_equal(fb.build()["g"].values, [[5, 6], [7, 8]])
    assert [p.where for p in problems] == ['g{node="a"}']
    assert (
        "conflicting samples at 2025-11-30 00:00:00 UTC (1 and 5): the last read is kept"
        in problems.problems[0].message
    )


def test_many_stray_samples_are_summed_up_not_listed_one_by_one() -> None:
    problems = ProblemLog()
    fb = FrameBuilder(30.0, problems=problems, now=T0 + 400 * 86_400)
    fb.add(block("g", [T0 + 30 * i for i in range(40)], [1.0] * 40, node="a"))
    fb.add(block("g", [T0 + 86_400 * (d + 1) for d in range(300)], [2.0] * 300, node="a"))
    assert [(s.lo * 30.0, s.steps) for s in fb.segments()] == [(T0, 40)]
    assert len(problems) == 11 and "290 more stretches (290 samples)" in str(problems.problems[0])
