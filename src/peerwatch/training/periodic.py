"""Periodic structure of a throughput series, found by autocorrelation.

Threshold-crossing dips (see :mod:`peerwatch.training.dips`) need each drop to stand out of the
noise sample by sample; the autocorrelation of the detrended series averages over every cycle,
so a regular throttling pattern shows even when single drops are lost in the noise. The series
is put on its sampling grid, its slow level (blockwise medians over twice the longest period,
interpolated) removed, deep dips (checkpoints) left out, and the highest prominent peak of the
autocorrelation between 3 samples and ``dip_max_period_s`` taken as the period. Folding the series
at that period gives the level at the top and bottom of the cycle.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from peerwatch.training.features import Prepared
from peerwatch.training.shapes import Thresholds

MIN_LAG = 3  # a cycle needs at least three samples to be seen at all
PROMINENCE = 0.15  # the peak must rise this far above the lowest autocorrelation before it
FOLD_CYCLES = 6  # cycles folded together: few enough that jitter does not smear the drop


@dataclass(frozen=True, slots=True)
class Periodicity:
    """The strongest cycle of the series (period NaN when there is none)."""

    period: float  # seconds
    acf: float  # autocorrelation of the detrended series at the period
    low: float  # folded level at the bottom of the cycle, fraction of the local level
    cycles: int  # cycles the series covers


NONE = Periodicity(float("nan"), 0.0, 1.0, 0)


def find_periodicity(p: Prepared, th: Thresholds) -> Periodicity:
    """Autocorrelation peak of the detrended running series within the throttling period range."""
    cells = np.round((p.ts - p.ts[0]) / p.dt).astype(np.int64)
    size = int(cells[-1]) + 1
    max_lag = min(int(th.dip_max_period_s / p.dt), size // 3)
    if size > 50 * p.ts.size or max_lag <= MIN_LAG:
        return NONE
    grid = np.full(size, np.nan)
    grid[cells[p.active]] = p.ratio[p.active]
    level = _slow_level(grid, max(8, 2 * max_lag))
    rel = grid / level
    rel[rel < th.dip_deep_level] = np.nan  # checkpoints and stalls are not cycles
    resid = rel - 1.0
    acf = _acf(resid, max_lag)
    lag = _peak(acf)
    if lag is None:
        return NONE
    return Periodicity(lag * p.dt, float(acf[lag]), _fold_low(rel, lag), size // lag)


def _slow_level(grid: np.ndarray, block: int) -> np.ndarray:
    """Blockwise medians interpolated to every cell: the level without the cycles."""
    n = grid.size
    padded = np.concatenate([grid, np.full(-n % block, np.nan)]).reshape(-1, block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(padded, axis=1)
    centres = np.arange(med.size) * block + (block - 1) / 2
    ok = np.isfinite(med)
    if not ok.any():
        return np.full(n, np.nan)
    return np.asarray(np.interp(np.arange(n), centres[ok], med[ok]), dtype=np.float64)


def _acf(resid: np.ndarray, max_lag: int) -> np.ndarray:
    """Autocorrelation for lags 0..max_lag of a series with gaps (NaN), via FFT."""
    mask = np.isfinite(resid)
    x = np.where(mask, resid - np.nanmean(resid), 0.0)
    nfft = 1 << int(2 * resid.size - 1).bit_length()
    fx, fm = np.fft.rfft(x, nfft), np.fft.rfft(mask.astype(np.float64), nfft)
    num = np.fft.irfft(fx * np.conj(fx), nfft)[: max_lag + 1]
    pairs = np.round(np.fft.irfft(fm * np.conj(fm), nfft)[: max_lag + 1])
    if pairs[0] < 10 or num[0] <= 0:
        return np.zeros(max_lag + 1)
    enough = pairs >= max(10.0, 0.25 * pairs[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        acf = np.where(enough, (num / pairs) / (num[0] / pairs[0]), 0.0)
    return np.asarray(acf, dtype=np.float64)


def _peak(acf: np.ndarray) -> int | None:
    """The lag of the highest prominent local maximum (the shortest of near-equal ones: not a multiple)."""
    lags = np.arange(MIN_LAG, acf.size - 1)
    if lags.size == 0:
        return None
    local = (acf[lags] >= acf[lags - 1]) & (acf[lags] >= acf[lags + 1])
    trough = np.minimum.accumulate(acf[1:])[lags - 1]  # lowest value at or before each lag
    good = lags[local & (acf[lags] - trough >= PROMINENCE)]
    if good.size == 0:
        return None
    best = float(acf[good].max())
    if best <= 0:  # no positive correlation at any lag: nothing periodic (and 0.9 * best would exclude all)
        return None
    return int(good[acf[good] >= 0.9 * best][0])


def _fold_low(rel: np.ndarray, lag: int) -> float:
    """Bottom of the cycle relative to its top, folding a few cycles at a time.

    Real cycles jitter, so their phase wanders; folding the whole series at one period would
    smear the drop away. Each chunk of ``FOLD_CYCLES`` cycles is folded on its own (median per
    phase) and the chunks' 10th/90th percentile levels are combined by their medians.
    """
    span = FOLD_CYCLES * lag
    chunks = rel.size // span
    if chunks == 0:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        profile = np.nanmedian(rel[: chunks * span].reshape(chunks, FOLD_CYCLES, lag), axis=1)
        low = np.nanmedian(np.nanquantile(profile, 0.1, axis=1))
        high = np.nanmedian(np.nanquantile(profile, 0.9, axis=1))
    return float(low / high) if np.isfinite(low) and np.isfinite(high) and high > 0 else 1.0
