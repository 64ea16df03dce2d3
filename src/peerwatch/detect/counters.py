"""Error counters: any increase is a signal, and repeated increases are a stronger one.

A single isolated increment (one PCIe replay, one link recovery) is common and mostly harmless,
so it scores below what opens an alarm on its own; increments on several recent steps, or many
at once, score higher. When a large share of peers increase at the same step the move is shared
(a fabric-wide event), and the score is damped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.catalog.schema import Category
from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.detect.findings import emit
from peerwatch.frames import previous_values
from peerwatch.model import BoolArray, Finding, FloatArray


@dataclass(frozen=True)
class CounterSettings:
    history: int = 20  # steps over which repeated increases add up; also the warm-up (no base rate yet)
    shared: float = 0.2  # share of peers increasing together beyond which the move is shared
    report: float = 2.5
    discard_weight: float = 0.5  # drops score half: 2 in a burst 3.2, 8 reach the 6 that opens an alarm


def increments(s: Series, step: float) -> FloatArray:
    """Increase of each series at each step (0 where none, NaN where unknown)."""
    v = s.values
    if s.frame.kind == "rate":
        return v * step
    prev = previous_values(v)
    valid = ~np.isnan(v)
    return np.where(valid & ~np.isnan(prev), np.fmax(v - prev, 0.0), np.nan)


def recent_count(flag: BoolArray, history: int) -> IntArray:
    """How many of the last ``history`` steps (this one included) had ``flag``."""
    csum = np.cumsum(flag, axis=1)
    lagged = np.zeros_like(csum)
    lagged[:, history:] = csum[:, :-history]
    out: IntArray = csum - lagged
    return out


def recurrence_score(recent: IntArray) -> FloatArray:
    """2.5 for one event in the window, 6 for two, 9.5 for four: repeats matter more than one."""
    score: FloatArray = np.where(recent > 0, 2.5 + 3.5 * np.log2(np.maximum(recent, 1)), 0.0)
    return score


def counter_scores(inc: FloatArray, peer_key: IntArray, settings: CounterSettings) -> FloatArray:
    """Score of each cell while increases are recent: 2.5 for one isolated increment, more for repeats.

    The score holds between increments, so a counter that ticks every few minutes is one ongoing
    finding, not a series of one-step blips that no continuity rule would ever join.
    """
    up = np.nan_to_num(inc, nan=0.0) > 0
    recent = recent_count(up, settings.history)
    # Counters that tick now and then on healthy peers too (NIC drops, TCP retransmits): only
    # increases beyond what a typical peer shows in the window count. The base rate is causal.
    usual = np.zeros(inc.shape)
    shared = np.zeros(inc.shape)
    for key in np.unique(peer_key[peer_key >= 0]):
        rows = peer_key == key
        if rows.sum() >= 4:
            share = up[rows].mean(axis=0)
            shared[rows] = share
            usual[rows] = np.cumsum(share) / np.arange(1, share.size + 1)
    # ... nor beyond the entity's own habit: a NIC that has dropped a packet every few minutes for
    # hours is not failing now; a change of its rate is what counts. Its past before the window.
    own = np.zeros(inc.shape)
    h = settings.history
    if inc.shape[1] > h:
        past = np.cumsum(up, axis=1)[:, :-h]
        own[:, h:] = past / np.arange(1, past.shape[1] + 1)
    expected = np.ceil(2.0 * settings.history * np.fmax(usual, own)).astype(np.int64)
    excess = np.maximum(recent - expected, 0)
    size = np.minimum(3.0, np.log10(1 + np.nan_to_num(inc, nan=0.0)))
    score = recurrence_score(excess) + np.where(up & (excess > 0), size, 0.0)
    damp: FloatArray = 1.0 + 10.0 * np.fmax(shared - settings.shared, 0.0)
    out: FloatArray = np.where(peer_key[:, None] >= 0, score / damp, 0.0)  # -1: not watched (loopback)
    out[:, : settings.history] = 0.0  # no base rate known yet at the start of the data
    return out


class CounterDetector:
    """Scores increases of the catalogue's error counters."""

    name = "counter"

    def __init__(self, settings: CounterSettings | None = None) -> None:
        self.settings = settings or CounterSettings()

    def detect(self, ctx: Context) -> list[Finding]:
        out: list[Finding] = []
        for s in ctx.series:
            if s.family.category not in (Category.error_counter, Category.discard):
                continue
            inc = increments(s, ctx.step)
            score = counter_scores(inc, s.peer_key, self.settings)
            if s.family.category is Category.discard:
                score *= self.settings.discard_weight
            what = "per second: the counter keeps increasing"
            out.extend(emit(ctx, s, score, None, None, self.settings.report, self.name, what))
        return out
