"""Throughput/MFU shape classifier: a labelled synthetic set (fixed seeds), robustness, loaders, CLI.

Every case of the labelled set is a test of its own; :func:`test_labelled_set_accuracy` prints the
per-shape accuracy that docs/training.md quotes (run with ``-s`` to see it).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from peerwatch.model import FloatArray, ProblemLog
from peerwatch.training import SHAPES, InputError, SeriesError, Shape, Thresholds, classify_series, load_series
from peerwatch.training.classify import SCORERS, measure
from peerwatch.training.commands import app

FIXTURES = Path(__file__).parent / "fixtures" / "training"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "training.md"
T0 = 1_760_000_000.0
E = 1000.0


@dataclass(frozen=True)
class Case:
    """One labelled synthetic series; the defaults are a clean 4 h run sampled every 10 s."""

    name: str
    shape: str
    seed: int
    dt: float = 10.0
    hours: float = 4.0
    noise: float = 0.02  # relative sigma
    heavy_tails: bool = False  # Student-t (3) noise: random deep samples
    missing: float = 0.0  # share of NaN samples
    checkpoints: bool = False  # short deep dips every ckpt_every seconds
    ckpt_every: float = 1800.0
    ckpt_depth: tuple[float, float] = (0.0, 0.3)
    expected: bool = True  # pass the expected value (else it is estimated)
    level: float = 0.97  # level of healthy / fabric / gdr / degraded runs
    onset: float = 0.0  # share of the run before the fault starts
    drift: float = 0.0  # healthy: slow fall over the run
    restart_at: float = 0.0  # healthy: a restart (gap and warm-up ramp) at this share of the run
    depth: float = 0.7  # throttle: level during a drop
    period: float = 60.0  # throttle: seconds between drops
    duty: float = 0.3
    jitter: float = 0.1  # throttle: relative jitter of the period
    decline: float = 0.25  # gc: fall per run
    runs: int = 2  # gc: runs separated by restarts
    curve: str = "linear"  # gc: linear or exp
    warmup: float = 0.0  # gc: seconds of warm-up ramp after each restart
    gap: float = 0.0  # straggler: how much slower the slow rank(s) run
    ranks: int = 0  # per-rank rows (0: none)
    slow_ranks: int = 1


@dataclass(frozen=True)
class Synthetic:
    ts: FloatArray
    values: FloatArray
    expected: float | None
    per_rank: FloatArray | None
    slow: tuple[int, ...]


def synth(c: Case) -> Synthetic:
    """The series a case describes (deterministic for its seed)."""
    rng = np.random.default_rng(c.seed)
    n = int(c.hours * 3600 / c.dt)
    ts = np.sort(T0 + np.arange(n) * c.dt + rng.normal(0, 0.05 * c.dt, n))
    t = ts - T0
    base = np.full(n, c.level)
    if c.shape == "healthy":
        base -= c.drift * np.linspace(0, 1, n)
        if c.restart_at:
            a, down, ramp = int(c.restart_at * n), int(240 / c.dt), int(300 / c.dt)
            base[a : a + down] = np.nan
            base[a + down : a + down + ramp] *= np.linspace(0.3, 1, ramp)
    elif c.shape in ("fabric_failure", "gdr_misconfig", "degraded_link"):
        base[: int(c.onset * n)] = 0.97
    elif c.shape == "throttle":
        cycles = np.cumsum(rng.uniform(1 - c.jitter, 1 + c.jitter, int(t[-1] / c.period) + 3)) * c.period
        cycles += rng.uniform(0, c.period)
        start = np.concatenate([[0.0], cycles])[np.searchsorted(cycles, t)]
        base[(t - start) < c.duty * c.period] = c.depth
    elif c.shape == "gc_stall":
        edges = np.linspace(0, n, c.runs + 1).astype(int)
        for a, b in itertools.pairwise(edges):
            frac = np.linspace(0, 1, b - a)
            if c.curve == "exp":
                frac = (1 - np.exp(-3 * frac)) / (1 - np.exp(-3))
            base[a:b] = 0.98 - c.decline * frac
            if a:
                down = int(300 / c.dt)
                base[a : a + down] = np.nan  # the job is down while it restarts ...
                if c.warmup:  # ... and needs a few minutes to get back to speed
                    ramp = int(c.warmup / c.dt)
                    base[a + down : a + down + ramp] *= np.linspace(0.3, 1, ramp)
    per_rank, slow = None, np.zeros(0, dtype=int)
    if c.ranks:
        per_rank = 0.97 * E * (1 + rng.normal(0, c.noise, (c.ranks, n)))
        slow = rng.choice(c.ranks, c.slow_ranks, replace=False) if c.gap else slow
        per_rank[slow] *= 1 - c.gap
        base[:] = 0.97 * (1 - c.gap)  # the synchronous job runs at the slowest rank's pace
    eps = rng.standard_t(3, n) / np.sqrt(3) if c.heavy_tails else rng.normal(0, 1, n)
    values = base * (1 + c.noise * eps)
    if c.checkpoints:
        every = int(c.ckpt_every / c.dt)
        for s in range(every, n, every):
            values[s : s + int(rng.integers(1, 4))] = rng.uniform(*c.ckpt_depth) * base[s]
    if c.missing:
        values[rng.random(n) < c.missing] = np.nan
    return Synthetic(ts, values * E, E if c.expected else None, per_rank, tuple(sorted(int(s) for s in slow)))


def labelled_cases() -> list[Case]:
    """The labelled set: every shape clean, noisy (noise, NaN, checkpoints) and borderline, three seeds each."""
    cases: list[Case] = []
    for s in range(3):
        cases += [
            Case(f"healthy-clean-{s}", "healthy", 100 + s),
            Case(f"healthy-noisy-{s}", "healthy", 110 + s, noise=0.06, missing=0.05, checkpoints=True),
            Case(f"healthy-no-expected-{s}", "healthy", 120 + s, dt=15, checkpoints=True, expected=False),
            Case(f"healthy-border-{s}", "healthy", 130 + s, level=0.88, noise=0.03, checkpoints=True),
            Case(f"healthy-very-noisy-{s}", "healthy", 140 + s, dt=1, hours=1, noise=0.08),
            Case(f"healthy-heavy-tails-{s}", "healthy", 150 + s, dt=2, hours=2, noise=0.04, heavy_tails=True),
            Case(
                f"healthy-async-ckpt-{s}", "healthy", 160 + s, checkpoints=True, ckpt_every=600, ckpt_depth=(0.5, 0.7)
            ),
            Case(f"healthy-restart-{s}", "healthy", 170 + s, restart_at=0.5, noise=0.03, expected=False),
            Case(f"healthy-drift-{s}", "healthy", 180 + s, drift=0.03, noise=0.03),
            Case(f"healthy-ranks-{s}", "healthy", 190 + s, noise=0.04, ranks=32),
            Case(f"fabric-clean-{s}", "fabric_failure", 200 + s, level=0.06),
            Case(f"fabric-noisy-{s}", "fabric_failure", 210 + s, level=0.08, noise=0.1, missing=0.05, checkpoints=True),
            Case(f"fabric-border-{s}", "fabric_failure", 220 + s, level=0.14, noise=0.05),
            Case(f"fabric-onset-{s}", "fabric_failure", 240 + s, level=0.05, onset=0.4, noise=0.04),
            Case(f"gdr-clean-{s}", "gdr_misconfig", 300 + s, level=0.3),
            Case(f"gdr-noisy-{s}", "gdr_misconfig", 310 + s, level=0.32, noise=0.07, missing=0.05, checkpoints=True),
            Case(f"gdr-border-{s}", "gdr_misconfig", 320 + s, level=0.4, noise=0.04),
            Case(f"gdr-missing-{s}", "gdr_misconfig", 340 + s, level=0.28, missing=0.2, noise=0.05),
            Case(f"degraded-clean-{s}", "degraded_link", 400 + s, level=0.7),
            Case(
                f"degraded-onset-no-expected-{s}",
                "degraded_link",
                410 + s,
                level=0.68,
                onset=0.4,
                expected=False,
                checkpoints=True,
            ),
            Case(f"degraded-noisy-{s}", "degraded_link", 420 + s, level=0.65, noise=0.06, missing=0.05),
            Case(f"degraded-border-{s}", "degraded_link", 430 + s, level=0.8, noise=0.03, checkpoints=True),
            Case(f"gc-clean-{s}", "gc_stall", 500 + s),
            Case(f"gc-noisy-{s}", "gc_stall", 510 + s, noise=0.05, missing=0.05, checkpoints=True, runs=3, hours=6),
            Case(f"gc-one-run-no-expected-{s}", "gc_stall", 520 + s, runs=1, expected=False, decline=0.2),
            Case(f"gc-border-{s}", "gc_stall", 530 + s, decline=0.15, noise=0.03, runs=3, hours=6),
            Case(f"gc-exp-{s}", "gc_stall", 540 + s, curve="exp", runs=3, hours=6, noise=0.03),
            Case(f"gc-warmup-{s}", "gc_stall", 550 + s, runs=3, hours=6, warmup=600, checkpoints=True, missing=0.05),
            Case(f"throttle-clean-{s}", "throttle", 600 + s, dt=5, hours=2),
            Case(f"throttle-fast-{s}", "throttle", 610 + s, dt=1, hours=0.5, period=12, duty=0.4),
            Case(
                f"throttle-slow-noisy-{s}", "throttle", 620 + s, period=180, noise=0.04, missing=0.05, checkpoints=True
            ),
            Case(f"throttle-no-expected-{s}", "throttle", 630 + s, dt=5, hours=2, period=45, expected=False),
            Case(f"throttle-border-{s}", "throttle", 640 + s, dt=5, hours=2, period=90, depth=0.8, noise=0.03),
            Case(f"throttle-jitter-{s}", "throttle", 650 + s, dt=2, hours=1, period=30, jitter=0.3, noise=0.03),
            Case(
                f"throttle-heavy-tails-{s}",
                "throttle",
                660 + s,
                dt=5,
                hours=2,
                heavy_tails=True,
                noise=0.03,
                checkpoints=True,
            ),
            Case(f"straggler-clean-{s}", "straggler", 700 + s, gap=0.12, ranks=16),
            Case(f"straggler-noisy-{s}", "straggler", 710 + s, gap=0.1, ranks=16, noise=0.05, missing=0.05),
            Case(f"straggler-border-{s}", "straggler", 720 + s, gap=0.05, ranks=64, hours=1),
            Case(f"straggler-two-{s}", "straggler", 740 + s, gap=0.1, ranks=32, slow_ranks=2, noise=0.03),
        ]
    return cases


CASES = labelled_cases()


def classify_case(c: Case) -> tuple[Synthetic, Shape]:
    s = synth(c)
    return s, classify_series(s.ts, s.values, s.expected, s.per_rank).shape


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_labelled_case(case: Case) -> None:
    _, shape = classify_case(case)
    assert shape.value == case.shape


def test_labelled_set_accuracy() -> None:
    per_shape: dict[str, list[bool]] = {}
    for c in CASES:
        per_shape.setdefault(c.shape, []).append(classify_case(c)[1].value == c.shape)
    hits = [ok for oks in per_shape.values() for ok in oks]
    print(f"\nlabelled synthetic set: {sum(hits)}/{len(hits)} correct")
    for shape, oks in sorted(per_shape.items()):
        print(f"  {shape:15s} {sum(oks)}/{len(oks)}")
    assert {c.shape for c in CASES} == {s.value for s in Shape}, "every shape needs labelled cases"
    assert sum(hits) / len(hits) >= 0.95


def random_cases(seed: int, per_shape: int) -> list[Case]:
    """Cases with parameters drawn over each shape's whole range, within what the tests can see:
    throttling cycles of 4 samples to 5 minutes, drops deeper than the noise."""
    rng = np.random.default_rng(seed)
    out: list[Case] = []
    for i in range(per_shape):
        dt = float(rng.choice([1, 5, 10, 15]))
        common: dict[str, Any] = {
            "dt": dt,
            "hours": 1.0 if dt == 1 else float(rng.choice([4, 6])),
            "noise": float(rng.uniform(0.01, 0.06)),
            "missing": float(rng.uniform(0, 0.1)),
            "checkpoints": bool(rng.random() < 0.5),
        }
        period = float(np.clip(rng.choice([10, 30, 60, 120, 240]) * max(1, dt / 5), 4 * dt, 240))
        out += [
            Case(
                f"r{i}-healthy",
                "healthy",
                5000 + i,
                level=float(rng.uniform(0.9, 1.0)),
                expected=bool(rng.random() < 0.5),
                heavy_tails=bool(rng.random() < 0.3),
                **common,
            ),
            Case(
                f"r{i}-fabric",
                "fabric_failure",
                5100 + i,
                level=float(rng.uniform(0.02, 0.15)),
                onset=float(rng.choice([0, 0.3])),
                **common,
            ),
            Case(f"r{i}-gdr", "gdr_misconfig", 5200 + i, level=float(rng.uniform(0.22, 0.4)), **common),
            Case(
                f"r{i}-degraded",
                "degraded_link",
                5300 + i,
                level=float(rng.uniform(0.55, 0.82)),
                onset=float(rng.choice([0, 0.4])),
                **common,
            ),
            Case(
                f"r{i}-gc",
                "gc_stall",
                5400 + i,
                decline=float(rng.uniform(0.12, 0.35)),
                runs=int(rng.integers(1, 4)),
                **common,
            ),
            Case(
                f"r{i}-throttle",
                "throttle",
                5500 + i,
                depth=float(rng.uniform(0.6, 0.8)),
                period=period,
                duty=float(rng.uniform(0.2, 0.4)),
                jitter=float(rng.uniform(0, 0.3)),
                **common,
            ),
            Case(
                f"r{i}-straggler",
                "straggler",
                5600 + i,
                gap=float(rng.uniform(0.05, 0.2)),
                ranks=int(rng.choice([8, 16, 64])),
                **{**common, "missing": 0.0},
            ),
        ]
    return out


def test_random_sweep_accuracy() -> None:
    per_shape: dict[str, list[bool]] = {}
    for c in random_cases(2024, 25):
        per_shape.setdefault(c.shape, []).append(classify_case(c)[1].value == c.shape)
    hits = [ok for oks in per_shape.values() for ok in oks]
    print(
        f"\nrandom sweep: {sum(hits)}/{len(hits)} correct; "
        + ", ".join(f"{shape} {sum(oks)}/{len(oks)}" for shape, oks in sorted(per_shape.items()))
    )
    assert sum(hits) / len(hits) >= 0.93
    assert all(sum(oks) / len(oks) >= 0.8 for oks in per_shape.values())


def test_random_healthy_runs_raise_no_shape() -> None:
    """False-positive sweep: healthy runs with random sampling, noise, NaN, checkpoints, restarts, drift."""
    rng = np.random.default_rng(7)
    wrong = []
    for i in range(60):
        c = Case(
            f"sweep-{i}",
            "healthy",
            1000 + i,
            dt=float(rng.choice([1, 5, 10, 15, 30])),
            hours=float(rng.uniform(0.5, 8)),
            noise=float(rng.uniform(0.01, 0.08)),
            missing=float(rng.uniform(0, 0.15)),
            checkpoints=bool(rng.random() < 0.6),
            ckpt_every=float(rng.choice([600, 1800, 3600])),
            expected=bool(rng.random() < 0.5),
            heavy_tails=bool(rng.random() < 0.3),
            drift=float(rng.uniform(0, 0.04)),
            restart_at=float(rng.choice([0, 0, 0.3, 0.6])),
        )
        _, shape = classify_case(c)
        if shape is not Shape.healthy:
            wrong.append((c, shape))
    assert len(wrong) <= 1, wrong


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        (Case("t", "throttle", 1, dt=5, hours=2, period=60), r"drops to (6\d|7[0-2])% every 60 s \((1[12]\d) drops"),
        (Case("f", "fabric_failure", 2, level=0.06), r"median 6% of expected from the start, over 4\.0 h"),
        (Case("d", "degraded_link", 3, level=0.7, onset=0.5), r"median 70% of expected .* \(before: 9[6-8]%\)"),
        (Case("g", "gc_stall", 4, runs=3, hours=6), r"back to 9\d% after 2 restart\(s\)"),
        (Case("h", "healthy", 5, expected=False), r"no expected value given: estimated 9\d\d"),
        (Case("c", "healthy", 6, checkpoints=True), r"7 deep short dip\(s\) \(checkpoints or stalls\)"),
        (Case("m", "healthy", 7, missing=0.2), r"2\d% of samples missing"),
    ],
    ids=lambda v: v.name if isinstance(v, Case) else "",
)
def test_evidence_states_the_numbers(case: Case, pattern: str) -> None:
    s = synth(case)
    result = classify_series(s.ts, s.values, s.expected, s.per_rank)
    assert result.shape.value == case.shape
    assert any(re.search(pattern, e) for e in result.evidence), result.evidence


@pytest.mark.parametrize("c", [c for c in CASES if c.shape == "straggler"], ids=lambda c: c.name)
def test_straggler_names_the_slow_ranks(c: Case) -> None:
    s = synth(c)
    result = classify_series(s.ts, s.values, s.expected, s.per_rank, rank_ids=range(100, 100 + c.ranks))
    assert set(result.ranks) == {100 + r for r in s.slow}


def test_slow_ranks_are_named_under_a_level_shape() -> None:
    """A host without GPUDirect RDMA: the job sits at 30% and that host's ranks are the slowest."""
    s = synth(Case("g", "straggler", 71, gap=0.1, ranks=16, slow_ranks=2))
    result = classify_series(s.ts, s.values * 0.3 / 0.87, E, s.per_rank)
    assert result.shape is Shape.gdr_misconfig and set(result.ranks) == set(s.slow)
    assert any(e.startswith("also considered straggler") for e in result.evidence)


def test_throttle_dips_are_returned_for_clock_correlation() -> None:
    c = Case("t", "throttle", 11, dt=5, hours=1, period=90)
    s = synth(c)
    result = classify_series(s.ts, s.values, s.expected)
    assert result.shape is Shape.throttle and 36 <= len(result.dips) <= 42
    period = np.median(np.diff([start for start, _ in result.dips]))
    assert abs(period - 90) < 5
    assert all(start <= end for start, end in result.dips)


def _healthy() -> Synthetic:
    return synth(Case("h", "healthy", 21, hours=2))


@pytest.mark.parametrize(
    ("name", "mutate"),
    [
        ("30% NaN", lambda ts, v: (ts, np.where(np.random.default_rng(1).random(v.size) < 0.3, np.nan, v))),
        ("one hour gap", lambda ts, v: (np.delete(ts, slice(200, 560)), np.delete(v, slice(200, 560)))),
        (
            "shuffled",
            lambda ts, v: (
                ts[np.random.default_rng(2).permutation(ts.size)],
                v[np.random.default_rng(2).permutation(v.size)],
            ),
        ),
        ("negative values", lambda ts, v: (ts, np.where(np.arange(v.size) % 50 == 0, -1.0, v))),
        ("NaN timestamps", lambda ts, v: (np.where(np.arange(ts.size) % 97 == 0, np.nan, ts), v)),
        ("constant", lambda ts, v: (ts, np.full(v.size, 970.0))),
        ("inf values", lambda ts, v: (ts, np.where(np.arange(v.size) % 40 == 0, np.inf, v))),
    ],
)
def test_healthy_stays_healthy_under_bad_data(name: str, mutate: object) -> None:
    s = _healthy()
    ts, values = mutate(s.ts.copy(), s.values.copy())  # type: ignore[operator]
    result = classify_series(ts, values, E)
    assert result.shape is Shape.healthy, (name, result.evidence)
    assert 0.0 <= result.confidence <= 1.0


def test_shuffled_input_gives_the_same_verdict_as_sorted() -> None:
    s = synth(Case("t", "throttle", 31, dt=5, hours=1))
    order = np.random.default_rng(3).permutation(s.ts.size)
    a = classify_series(s.ts, s.values, E)
    b = classify_series(s.ts[order], s.values[order], E)
    assert (a.shape, a.confidence, a.evidence) == (b.shape, b.confidence, b.evidence)


@pytest.mark.parametrize(
    ("ts", "values", "per_rank", "message"),
    [
        (np.arange(10.0), np.ones(10), None, "only 10 usable samples"),
        (np.arange(100.0), np.full(100, np.nan), None, "only 0 usable samples"),
        (np.arange(100.0), np.where(np.arange(100) < 90, 0.0, 5.0), None, "only 10 samples show the job running"),
        (np.arange(100.0), np.zeros(100), None, "only 0 samples show the job running"),  # not started yet
        (np.arange(100.0), np.ones(99), None, "equal length"),
        (np.arange(100.0), np.ones(100), np.ones((4, 99)), "per-rank data must be"),
    ],
)
def test_unusable_series_raise_a_clear_error(
    ts: FloatArray, values: FloatArray, per_rank: FloatArray | None, message: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor a numpy warning on the way (All-NaN slice)
        with pytest.raises(SeriesError, match=message):
            classify_series(ts, values, None, per_rank)


@pytest.mark.parametrize("expected", [None, 0.0, -5.0, float("nan")])
def test_missing_or_invalid_expected_is_estimated(expected: float | None) -> None:
    s = synth(Case("d", "degraded_link", 41, level=0.7, onset=0.5))
    result = classify_series(s.ts, s.values, expected)
    assert result.expected_estimated and result.shape is Shape.degraded_link
    assert result.expected is not None and abs(result.expected - 0.97 * E) < 30


def test_thresholds_change_the_verdict() -> None:
    s = synth(Case("d", "degraded_link", 51, level=0.8))
    assert classify_series(s.ts, s.values, E).shape is Shape.degraded_link
    lenient = Thresholds(smooth_s=120.0)
    assert classify_series(s.ts, s.values, E, thresholds=lenient).shape is Shape.degraded_link
    # Moving the degraded band is a table change, not a code change: the scorer reads the row.
    row = next(r for r in SHAPES if r.shape is Shape.degraded_link)
    f = measure(s.ts, s.values, E)
    narrow = dataclasses.replace(row, band=(0.45, 0.6), nominal=(0.5, 0.55))
    assert SCORERS["level"](narrow, f, Thresholds()).score < 0.2 < SCORERS["level"](row, f, Thresholds()).score


def test_shape_table_is_complete_and_consistent() -> None:
    assert [r.shape for r in SHAPES].count(Shape.healthy) == 1 and SHAPES[-1].shape is Shape.healthy
    assert {r.shape for r in SHAPES} == set(Shape)
    assert all(r.test in SCORERS and r.likely_cause and r.suggested_check for r in SHAPES)
    bands = sorted(r.band for r in SHAPES if r.band is not None)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bands)), "level bands must tile"
    for r in SHAPES:
        if r.nominal is not None:
            assert r.band is not None and r.band[0] <= r.nominal[0] <= r.nominal[1] <= r.band[1]


def test_every_threshold_and_shape_is_documented() -> None:
    text = DOCS.read_text()
    missing = [f.name for f in dataclasses.fields(Thresholds) if f"`{f.name}`" not in text]
    missing += [s.value for s in Shape if f"`{s.value}`" not in text]
    assert not missing, f"undocumented in {DOCS.name}: {missing}"


def test_result_is_json_ready_and_deterministic() -> None:
    s = synth(Case("s", "straggler", 61, gap=0.1, ranks=8))
    a = classify_series(s.ts, s.values, E, s.per_rank)
    b = classify_series(s.ts, s.values, E, s.per_rank)
    assert a == b
    out = orjson.loads(orjson.dumps(a.to_dict()))
    assert (
        out["shape"] == "straggler" and out["ranks"] == list(s.slow) and out["diagnosis"] == "performance_degradation"
    )


# --- loaders -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "n", "ranks", "expected", "unit", "problems"),
    [
        ("ts,value\n" + "".join(f"{T0 + i},{100 + i % 3}\n" for i in range(30)), 30, 0, None, "value", 0),
        ("".join(f"{T0 + i},{100}\n" for i in range(30)), 30, 0, None, "value", 0),
        ("".join(f"{(T0 + i) * 1000:.0f},100,120\n" for i in range(30)), 30, 0, 120.0, "value", 0),
        (
            "time,mfu,target\n" + "".join(f"2025-01-01T00:{i:02d}:00Z,0.41,0.45\n" for i in range(30)),
            30,
            0,
            0.45,
            "mfu",
            0,
        ),
        ("".join(f"{T0 + i // 4},{i % 4},{100}\n" for i in range(120)), 30, 4, None, "value", 0),
        (
            "ts,rank,step_time_ms\n" + "".join(f"{T0 + i // 2},{i % 2},{500}\n" for i in range(60)),
            30,
            2,
            None,
            "1/step_time_ms",
            0,
        ),
        (
            "# recorded by hand\nts,value\n" + "".join(f"{T0 + i},{100}\n" for i in range(30)) + "oops,1\n1,2,3\n",
            30,
            0,
            None,
            "value",
            2,
        ),
        ("ts;value\n" + "".join(f"{T0 + i};{100}\n" for i in range(30)), 30, 0, None, "value", 0),
    ],
    ids=[
        "header",
        "no-header",
        "ms-epoch+expected",
        "iso+names",
        "per-rank-no-header",
        "step-time-inverted",
        "bad-lines",
        "semicolons",
    ],
)
def test_csv_forms(
    tmp_path: Path, text: str, n: int, ranks: int, expected: float | None, unit: str, problems: int
) -> None:
    path = tmp_path / "series.csv"
    path.write_text(text)
    log = ProblemLog()
    s = load_series(path, log)
    assert s.ts.size == n and s.unit == unit and s.expected == expected and len(log) == problems
    assert (s.per_rank is None) if not ranks else (s.per_rank is not None and s.per_rank.shape == (ranks, n))
    assert np.all(s.ts > 1e9) and np.all(np.isfinite(s.values))
    if unit.startswith("1/"):
        assert np.allclose(s.values, 1 / 500)
    assert all(re.match(rf"{re.escape(str(path))}:\d+: ", str(p)) for p in log)


@pytest.mark.parametrize(
    ("lines", "n", "unit", "ranks", "note"),
    [
        (
            [
                f" iteration {i:8d}/ 1000 | consumed samples: {i * 8} | elapsed time per iteration (ms): 800.0 | "
                "learning rate: 1.0E-04 | global batch size:     8 | lm loss: 2.0 |"
                for i in range(10, 310, 10)
            ],
            30,
            "samples/s",
            0,
            "running sum of step times",
        ),
        (
            [f"2025-02-01T10:{i // 60:02d}:{i % 60:02d}Z step={i} loss=2.1 step_time=850ms" for i in range(40)],
            40,
            "iterations/s",
            0,
            "1 / step time",
        ),
        (
            [f"[default{r}]:[rank{r}]:step={i} tokens_per_sec={1000 + r}" for i in range(25) for r in range(3)],
            25,
            "tokens/s",
            3,
            "3 ranks",
        ),
        ([f"step={i % 20} step_time=1.0" for i in range(40)], 40, "iterations/s", 0, "1 restart(s)"),
        (
            [f"[rank{r}]:step={i % 20} step_time=1.0" for i in range(40) for r in range(2)],
            40,
            "iterations/s",
            2,
            "1 restart(s)",
        ),
    ],
    ids=["megatron-no-timestamps", "kv-iso-ms", "kv-per-rank", "kv-restart", "kv-per-rank-restart"],
)
def test_step_log_forms(tmp_path: Path, lines: list[str], n: int, unit: str, ranks: int, note: str) -> None:
    path = tmp_path / "train.log"
    path.write_text("\n".join(["some banner", *lines, "Traceback (most recent call last):"]) + "\n")
    s = load_series(path, ProblemLog())
    assert s.ts.size == n and s.unit == unit
    assert (s.per_rank.shape[0] if s.per_rank is not None else 0) == ranks
    assert any(note in x for x in s.notes), s.notes
    assert np.all(np.diff(s.ts) > 0)


def test_megatron_fixture_with_expected_is_gdr(tmp_path: Path) -> None:
    log = ProblemLog()
    s = load_series(FIXTURES / "megatron_gdr.log", log, expected=400.0)
    assert s.unit == "TFLOP/s/GPU" and s.ts.size == 150 and not len(log)
    assert classify_series(s.ts, s.values, s.expected).shape is Shape.gdr_misconfig


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "empty"), ("# only a comment\n\n", "empty"), ("hello\nworld\n", "no step times or throughput found")],
)
def test_unusable_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "x.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_series(path, ProblemLog())
    with pytest.raises(InputError, match="cannot read"):
        load_series(tmp_path / "absent.csv", ProblemLog())


# --- command line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "args", "shape", "ranks"),
    [
        ("throttle.csv", [], "throttle", []),
        ("kv_ranks.log", [], "straggler", [5]),
        ("megatron_gdr.log", ["--expected", "400"], "gdr_misconfig", []),
        ("megatron_gdr.log", [], "healthy", []),
    ],
)
def test_cli_classify_json(file: str, args: list[str], shape: str, ranks: list[int]) -> None:
    result = CliRunner().invoke(app, ["classify", str(FIXTURES / file), "--json", *args])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    assert out["shape"] == shape and out["ranks"] == ranks and 0 < out["confidence"] <= 1


def test_cli_classify_text_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["classify", str(FIXTURES / "throttle.csv")])
    assert result.exit_code == 0 and "throttle" in result.stdout and "2 bad line(s) skipped" in result.stdout
    out = orjson.loads(runner.invoke(app, ["classify", str(FIXTURES / "throttle.csv"), "--json"]).stdout)
    assert [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in out["problems"]] == ["201", "401"]
    (tmp_path / "short.csv").write_text("".join(f"{T0 + i},1\n" for i in range(5)))
    for path, message in [(tmp_path / "none.csv", "cannot read"), (tmp_path / "short.csv", "only 5 usable samples")]:
        result = runner.invoke(app, ["classify", str(path)])
        assert result.exit_code == 2 and message in result.output and str(path) in result.output


def test_periodicity_with_only_negative_autocorrelation_peaks_is_none() -> None:
    import numpy as np

    from peerwatch.training.periodic import _peak

    acf = np.array([1.0] + [-0.5, -0.9, -0.2, -0.6, -0.1, -0.7, -0.3, -0.8, -0.4] * 3)
    assert _peak(acf) is None
