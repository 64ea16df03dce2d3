"""How unlikely a count is: the upper tail of a Poisson distribution, vectorised, without scipy.

``P(X >= c)`` for ``X ~ Poisson(mu)`` is the regularised lower incomplete gamma ``P(c, mu)``, which
also gives the tail for a real ``c`` (a count divided by a dispersion factor, or a count read off
a per-second rate). It is summed as its power series, which converges fast where it matters: the
count above its mean. At or below the mean nothing is unusual, and the tail is taken as 1.
"""

from __future__ import annotations

import math

import numpy as np

from peerwatch.model import FloatArray

_TERMS = 64  # series terms; the rest is bounded by a geometric sum (an upper bound on the tail)
_LN10 = math.log(10.0)


def log_gamma(z: FloatArray) -> FloatArray:
    """ln Γ(z) for z > 0: shifted up to 8 by the recurrence, then Stirling's series (error < 1e-10)."""
    z = np.asarray(z, dtype=np.float64).copy()
    acc = np.zeros_like(z)
    for _ in range(8):
        low = z < 8.0
        acc -= np.where(low, np.log(np.where(low, z, 1.0)), 0.0)
        z = np.where(low, z + 1.0, z)
    inv = 1.0 / z
    inv2 = inv * inv
    series = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 / 1680.0)))
    out: FloatArray = acc + (z - 0.5) * np.log(z) - z + 0.5 * math.log(2.0 * math.pi) + series
    return out


def poisson_surprise(count: FloatArray, mean: FloatArray) -> FloatArray:
    """-log10 P(X >= count) for X ~ Poisson(mean), cell by cell; 0 where count <= mean or either is NaN.

    ``mean`` must be positive where ``count`` exceeds it."""
    c = np.asarray(count, dtype=np.float64)
    mu = np.broadcast_to(np.asarray(mean, dtype=np.float64), c.shape)
    out = np.zeros(c.shape)
    with np.errstate(invalid="ignore"):
        sel = (c > mu) & (mu > 0)
    if not sel.any():
        return out
    a, x = c[sel], mu[sel]
    term = np.ones_like(a)
    total = np.ones_like(a)
    for i in range(1, _TERMS + 1):
        term = term * x / (a + i)
        total += term
    r = x / (a + _TERMS + 1)
    total += term * r / (1.0 - r)  # the remaining terms shrink at least this fast
    log_p = a * np.log(x) - x - log_gamma(a + 1.0) + np.log(total)
    out[sel] = np.fmax(-log_p / _LN10, 0.0)
    return out
