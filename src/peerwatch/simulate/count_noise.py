"""Benign count noise (variants): drop counters that tick now and then, and rare NFS operations.

Linux counts a received frame as dropped when no protocol takes it (LLDP, STP, IPv6 multicast
nobody joined, VLANs nobody configured): every interface, container ``veth`` ones included, ticks
now and then, some far more than others, often several frames in one scrape, and now and then a
storm of minutes at many times the usual rate. A mount that only a few shells use (home
directories) sees a handful of LOOKUP/ACCESS/GETATTR calls a minute, a different mix on every
node; and every NFS operation count is an integer. None of this is a fault. Drawn from the seed
(its own stream, so runs without these events are unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from peerwatch.model import FloatArray
from peerwatch.simulate.events import Event
from peerwatch.simulate.signals import AnyArray
from peerwatch.simulate.targets import Grid

MIB = 1024.0 * 1024.0


def bursty_counts(rng: np.random.Generator, shape: tuple[int, ...], grid: Grid) -> FloatArray:
    """Per-step drop counts of independent interfaces ``shape[:-1]`` over ``shape[-1]`` steps.

    Each interface draws its own rate (from one frame in three hours to one every 20 s; a quarter
    of them almost silent, one in ten 10-100 times noisier), its own burst size (frames per arrival,
    geometric with mean 1-30) and a few storms (5-30x its rate for 2-20 minutes)."""
    ents, t = shape[:-1], shape[-1]
    per_s = np.exp(rng.uniform(np.log(1e-4), np.log(0.05), ents))
    draw = rng.random(ents)
    per_s = np.where(draw < 0.25, per_s * 1e-2, np.where(draw > 0.9, per_s * rng.uniform(10, 100, ents), per_s))
    size = np.exp(rng.uniform(0.0, np.log(30.0), ents))
    arrivals = per_s / size * grid.step
    boost = np.ones(shape)
    hours = t * grid.step / 3600.0
    for idx in np.ndindex(*ents):
        for _ in range(int(rng.poisson(hours / 4.0))):
            k0 = int(rng.integers(t))
            boost[(*idx, slice(k0, k0 + max(1, int(rng.uniform(120, 1200) / grid.step))))] = rng.uniform(5, 30)
    k = rng.poisson(arrivals[..., None] * boost)
    extra = rng.negative_binomial(np.maximum(k, 1), 1.0 / size[..., None])  # frames beyond one per arrival
    return np.where(k > 0, k + extra, 0).astype(np.float64)


def rare_nfs_ops(nfs: dict[str, AnyArray], grid: Grid, rng: np.random.Generator) -> None:
    """Integer NFS operation counts; the second mount (home) only 0-3 calls of each operation a step,
    at rates that differ by node and operation. Edits ``nfs`` (``_nfs``'s arrays) in place."""
    ops = nfs["nfs_ops"]  # (N, M, O, T) per second
    n, _, o, _ = ops.shape
    per_step = np.exp(rng.uniform(np.log(0.02), np.log(3.0), (n, o)))
    per_step[rng.random((n, o)) < 0.2] = 0.0  # some nodes never call some operations there
    ops[:, 1] = (per_step / grid.step)[:, :, None]
    ops[:] = rng.poisson(ops * grid.step) / grid.step
    nfs["nfs_read_b"] = ops[:, :, 0, :] * MIB
    nfs["nfs_write_b"] = ops[:, :, 1, :] * MIB


def apply_count_noise(out: dict[str, AnyArray], grid: Grid, events: Sequence[Event], seed: int, stage: str) -> None:
    """At ``stage`` "nfs" (after the NFS arrays) or "net" (after the network ones), the noise the
    run's ``noisy_drops`` and ``rare_nfs_ops`` events ask for, in place."""
    kinds = {ev.kind for ev in events}
    if stage == "nfs" and "rare_nfs_ops" in kinds:
        rare_nfs_ops(out, grid, np.random.default_rng([seed, 14, 1]))
    if stage == "net" and "noisy_drops" in kinds:
        rng = np.random.default_rng([seed, 14, 2])
        out["net_drop"] = out["net_drop"] + bursty_counts(rng, out["net_drop"].shape, grid)
        out["veth_drop"] = out["veth_drop"] + bursty_counts(rng, out["veth_drop"].shape, grid)
