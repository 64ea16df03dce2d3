"""Fault rates for long runs from the published job MTTF table (Meta, HPCA 2025).

MTTF falls roughly as a power of the job's GPU count; between and beyond the published sizes we
interpolate on log-log axes. Kinds are drawn by their weight in the observed mix.
"""

from __future__ import annotations

import numpy as np

from peerwatch.simulate.faults import KINDS, FaultRequest

MTTF_HOURS: tuple[tuple[int, float], ...] = ((8, 47.7 * 24), (64, 5.9 * 24), (256, 35.6), (1024, 7.9))


def mttf_hours(gpus: int) -> float:
    """Mean time to failure of a synchronous job on ``gpus`` GPUs, in hours."""
    if gpus <= 0:
        raise ValueError(f"a job needs at least one GPU, got {gpus}")
    x = np.log([g for g, _ in MTTF_HOURS])
    y = np.log([h for _, h in MTTF_HOURS])
    lx = np.log(gpus)
    if lx <= x[0]:
        slope = (y[1] - y[0]) / (x[1] - x[0])
        return float(np.exp(y[0] + slope * (lx - x[0])))
    if lx >= x[-1]:
        slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
        return float(np.exp(y[-1] + slope * (lx - x[-1])))
    return float(np.exp(np.interp(lx, x, y)))


def draw_faults(gpus: int, hours: float, seed: int, limit: int | None = None) -> list[FaultRequest]:
    """Faults a run of ``hours`` on a ``gpus``-GPU job would see, kinds weighted by the observed mix."""
    rng = np.random.default_rng([seed, 10])
    count = int(rng.poisson(hours / mttf_hours(gpus)))
    if limit is not None:
        count = min(count, limit)
    names = [k.name for k in KINDS.values() if k.weight > 0]
    weights = np.array([KINDS[n].weight for n in names])
    kinds = rng.choice(names, size=count, p=weights / weights.sum())
    at = np.sort(rng.uniform(0.05, 0.95, count))
    return [FaultRequest(str(k), at=float(a)) for k, a in zip(kinds, at, strict=True)]
