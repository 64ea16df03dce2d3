"""Classify a throughput/MFU series into a shape: measure, score every shape, then decide.

Measuring (features, dips, trend, spread) knows nothing of shapes; scoring gives every row of
:data:`~peerwatch.training.shapes.SHAPES` a score in 0-1 with evidence sentences; deciding walks
the table in order and takes the first row whose score reaches its ``min_score``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.training.dips import Dips, find_dips
from peerwatch.training.features import Levels, Prepared, SeriesError, active_hours, levels, prepare
from peerwatch.training.periodic import Periodicity, find_periodicity
from peerwatch.training.shapes import (
    DEFAULT_THRESHOLDS,
    SHAPE_DEFS,
    SHAPES,
    Shape,
    ShapeDef,
    ShapeResult,
    Test,
    Thresholds,
)
from peerwatch.training.stragglers import Spread, find_spread
from peerwatch.training.trend import Trend, find_trend


@dataclass(frozen=True, eq=False)
class Features:
    """Everything the scorers look at."""

    prepared: Prepared
    levels: Levels
    dips: Dips
    periodic: Periodicity
    trend: Trend
    spread: Spread | None


@dataclass(frozen=True, slots=True)
class Scored:
    score: float
    evidence: tuple[str, ...] = ()


def pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def span(seconds: float) -> str:
    """Human duration: '45 s', '12 min', '2.0 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def measure(
    ts: FloatArray,
    values: FloatArray,
    expected: float | None,
    per_rank: FloatArray | None = None,
    rank_ids: Sequence[int] | None = None,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> Features:
    """Compute all features of a series (raises SeriesError when it is too short)."""
    p = prepare(ts, values, expected, th)
    if per_rank is not None and (np.ndim(per_rank) != 2 or np.shape(per_rank)[1] != np.size(ts)):
        raise SeriesError(f"per-rank data must be (ranks x {np.size(ts)}), got {np.shape(per_rank)}")
    spread = find_spread(per_rank, rank_ids, th) if per_rank is not None else None
    return Features(p, levels(p, th), find_dips(p, th), find_periodicity(p, th), find_trend(p, th), spread)


def _current(f: Features) -> FloatArray:
    p = f.prepared
    x = p.smooth[p.ts >= f.levels.current_since]
    return x[np.isfinite(x)]


def _score_level(row: ShapeDef, f: Features, th: Thresholds) -> Scored:
    assert row.band is not None
    lo, hi = row.band
    x, lv = _current(f), f.levels
    inside = float(np.mean((x >= lo) & (x < hi))) if x.size else 0.0
    closeness = 1.0
    if row.nominal is not None:
        nlo, nhi = row.nominal
        if lv.current < nlo:
            closeness = 1 - 0.5 * (nlo - lv.current) / max(nlo - lo, 1e-9)
        elif lv.current > nhi:
            closeness = 1 - 0.5 * (lv.current - nhi) / max(hi - nhi, 1e-9)
    p = f.prepared
    if lv.shifted:
        before = float(np.nanmedian(p.smooth[p.ts < lv.current_since]))
        where = f"over the last {span(p.ts[-1] - lv.current_since)} (before: {pct(before)})"
    elif lo <= lv.head < hi:
        where = f"from the start, over {span(p.duration)}"
    else:
        where = f"over the last {span(p.ts[-1] - lv.current_since)}"
    evidence = (f"median {pct(lv.current)} of expected {where}; {pct(inside)} of it in {pct(lo)}-{pct(hi)}",)
    return Scored(float(np.clip(inside * closeness, 0, 1)) + 0.0, evidence)  # + 0.0: no -0.0


def _score_trend(row: ShapeDef, f: Features, th: Thresholds) -> Scored:
    tr = f.trend
    if tr.segments == 0 or tr.decline < th.trend_min_decline:
        return Scored(0.0)
    decline = np.clip((tr.decline - th.trend_min_decline) / (th.trend_full_decline - th.trend_min_decline), 0, 1)
    fit = np.clip(tr.r2 / th.trend_full_r2, 0, 1)
    gradual = 1.0 if tr.step_ratio >= 1 else tr.step_ratio**2
    start = 1.0 if tr.start_level >= th.start_full_level else 0.5
    recovered = 1.0 if tr.recoveries else 0.8
    evidence = [
        f"sinks {pct(tr.decline)} of expected over {span(tr.hours * 3600)} per run "
        f"({pct(tr.start_level)} to {pct(tr.end_level)}; a line explains {pct(max(tr.r2, 0))} of the variance, "
        + ("better than a single step)" if tr.step_ratio >= 1 else "a single step explains more)")
    ]
    if tr.recoveries:
        evidence.append(f"back to {pct(tr.start_level)} after {tr.recoveries} restart(s)")
    return Scored(float(decline * fit * gradual * start * recovered), tuple(evidence))


def _score_dips(row: ShapeDef, f: Features, th: Thresholds) -> Scored:
    """Throttling by either route: regular threshold-crossing drops, or an autocorrelation cycle."""
    by_dips, by_acf = _dip_route(f, th), _acf_route(f, th)
    first, second = (by_dips, by_acf) if by_dips.score >= by_acf.score else (by_acf, by_dips)
    return Scored(first.score, first.evidence + second.evidence)


def _dip_route(f: Features, th: Thresholds) -> Scored:
    d = f.dips
    if d.count < th.dip_min_count or not np.isfinite(d.period):
        return Scored(0.0, (f"{d.count} shallow dip(s): too few to be throttling",) if d.count else ())
    spacing = (d.regularity - th.dip_regular_random) / (th.dip_regular_full - th.dip_regular_random)
    regular = 0.5 * float(np.clip(spacing, 0, 1)) + 0.5 * min(1.0, d.acf / th.dip_acf_full)
    count = min(1.0, d.count / th.dip_full_count)
    periodic = 1.0 if d.period <= th.dip_max_period_s else 0.0
    upper = 1.0 if d.upper >= th.throttle_upper_min else th.throttle_low_upper_weight
    evidence = (
        f"drops to {pct(float(np.median(d.minima)))} every {span(d.period)} ({d.count} drops, "
        f"{pct(d.regularity)} regularly spaced, in a drop {pct(d.duty)} of the time; "
        f"{pct(d.upper)} between drops)",
    )
    return Scored(float(regular * count * periodic * upper), evidence)


def _acf_route(f: Features, th: Thresholds) -> Scored:
    c = f.periodic
    if not np.isfinite(c.period):
        return Scored(0.0)
    deep_enough = th.cycle_min_depth <= 1 - c.low <= 1 - th.dip_deep_level
    upper = 1.0 if f.levels.upper >= th.throttle_upper_min else th.throttle_low_upper_weight
    enough = c.cycles >= th.dip_min_count
    score = min(1.0, c.acf / th.cycle_acf_full) * upper if deep_enough and enough else 0.0
    evidence = (
        f"cycles every {span(c.period)} (autocorrelation {c.acf:.2f} over {c.cycles} cycles); at the bottom of the "
        f"cycle the level falls to {pct(c.low)} of the level between drops",
    )
    return Scored(float(score), evidence)


def _score_spread(row: ShapeDef, f: Features, th: Thresholds) -> Scored:
    s = f.spread
    if s is None or s.gap < th.straggler_min_gap:
        return Scored(0.0)
    gap = min(1.0, s.gap / th.straggler_full_gap)
    z = min(1.0, max(0.0, -s.z) / th.straggler_full_z)
    who = ", ".join(str(r) for r in s.ranks) or str(s.slowest)
    evidence = (
        f"rank {s.slowest} runs at {pct(1 - s.gap)} of the median rank (robust z {s.z:.1f} among {s.n_ranks} ranks); "
        f"rank(s) {who} below the other ranks' median at {pct(s.consistency)} of {s.steps} steps",
    )
    consistent = np.clip((s.consistency - 0.5) / (th.straggler_full_consistency - 0.5), 0, 1)
    return Scored(float(consistent * gap * z), evidence)


def _score_healthy(row: ShapeDef, f: Features, th: Thresholds) -> Scored:
    assert row.band is not None
    x = _current(f)
    inside = float(np.mean(x >= row.band[0])) if x.size else 0.0
    return Scored(
        inside, (f"median {pct(f.levels.current)} of expected; {pct(inside)} of the time above {pct(row.band[0])}",)
    )


SCORERS: dict[Test, Callable[[ShapeDef, Features, Thresholds], Scored]] = {
    "level": _score_level,
    "trend": _score_trend,
    "periodic_dips": _score_dips,
    "rank_spread": _score_spread,
    "healthy": _score_healthy,
}


def score_shapes(f: Features, th: Thresholds = DEFAULT_THRESHOLDS) -> dict[Shape, Scored]:
    """Score every shape of the table (0-1) with its evidence."""
    return {row.shape: SCORERS[row.test](row, f, th) for row in SHAPES}


def decide(f: Features, scored: dict[Shape, Scored], th: Thresholds = DEFAULT_THRESHOLDS) -> ShapeResult:
    """First table row whose score reaches its minimum; healthy when none does."""
    winner = next((r for r in SHAPES if r.test != "healthy" and scored[r.shape].score >= r.min_score), None)
    others = max((s.score for sh, s in scored.items() if sh is not Shape.healthy), default=0.0)
    if winner is None:
        winner = next(r for r in SHAPES if r.test == "healthy")
        confidence = scored[winner.shape].score * (1 - others)
    else:
        confidence = scored[winner.shape].score
    p = f.prepared
    evidence = list(scored[winner.shape].evidence)
    if p.expected_estimated:
        evidence.append(
            f"no expected value given: estimated {p.expected:.4g} as the {pct(th.expected_quantile)} quantile of "
            "the smoothed series (a series that never ran at full speed cannot show fabric_failure or gdr_misconfig)"
        )
    evidence += [
        f"also considered {row.shape.value} (score {scored[row.shape].score:.2f}): {scored[row.shape].evidence[0]}"
        for row in SHAPES
        if row is not winner
        and row.test != "healthy"
        and th.runner_up_score <= scored[row.shape].score
        and scored[row.shape].evidence
    ]
    if f.dips.deep:
        evidence.append(f"{f.dips.deep} deep short dip(s) (checkpoints or stalls) not counted as throttling")
    missing = 1 - float(np.mean(np.isfinite(p.ratio)))
    if missing >= 0.01:
        evidence.append(f"{pct(missing)} of samples missing")
    evidence.append(
        f"{p.ts.size} samples over {span(p.duration)}, running {span(active_hours(p) * 3600)} in {p.segments} run(s)"
    )
    return ShapeResult(
        shape=winner.shape,
        confidence=float(np.clip(confidence, 0, 1)),
        evidence=tuple(evidence),
        likely_cause=winner.likely_cause,
        suggested_check=winner.suggested_check,
        expected=p.expected,
        expected_estimated=p.expected_estimated,
        level=f.levels.current,
        scores=tuple((sh.value, round(s.score, 4)) for sh, s in scored.items()),
        ranks=_stragglers(f, scored),
        dips=tuple(zip(f.dips.starts.tolist(), f.dips.ends.tolist(), strict=True))
        if winner.shape is Shape.throttle
        else (),
        diagnosis=winner.diagnosis,
        severity=winner.severity,
    )


def _stragglers(f: Features, scored: dict[Shape, Scored]) -> tuple[int, ...]:
    """Straggler ranks whenever the straggler test passes, also under another shape (a GDR host's ranks)."""
    if f.spread is None or scored[Shape.straggler].score < SHAPE_DEFS[Shape.straggler].min_score:
        return ()
    return f.spread.ranks or (f.spread.slowest,)


def classify_series(
    ts: FloatArray,
    values: FloatArray,
    expected: float | None,
    per_rank: FloatArray | None = None,
    *,
    rank_ids: Sequence[int] | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> ShapeResult:
    """Classify a job's throughput or MFU series (higher is better).

    ``ts`` epoch seconds, ``values`` the job-level series (NaN = missing), ``expected`` the full
    speed in the same unit (None: estimated from the series, and said so in the evidence),
    ``per_rank`` an optional (ranks x len(ts)) array of per-rank throughput for the straggler
    test, ``rank_ids`` its row labels. Raises SeriesError if fewer than ``min_points`` samples.
    """
    f = measure(ts, values, expected, per_rank, rank_ids, thresholds)
    return decide(f, score_shapes(f, thresholds), thresholds)
