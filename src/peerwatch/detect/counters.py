"""Error counters: any increase is a signal, and repeated increases are a stronger one.

A single isolated increment (one PCIe replay, one link recovery) is common and mostly harmless,
so it scores below what opens an alarm on its own; increments on several recent steps, or many
at once, score higher. When a large share of peers increase at the same step the move is shared
(a fabric-wide event), and the score is damped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from peerwatch.catalog.schema import Category
from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.detect.findings import emit
from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.frames import previous_values
from peerwatch.model import BoolArray, Finding, FloatArray


@dataclass(frozen=True)
class CounterSettings:
    history: int = 20  # steps over which repeated increases add up; also the warm-up (no base rate yet)
    shared: float = 0.2  # share of peers increasing together beyond which the move is shared
    report: float = 2.5
    discard_weight: float = 0.5  # drops score half: 2 in a burst 3.2, 8 reach the 6 that opens an alarm


@dataclass
class CounterPast:
    """One counter frame's past: each row's increases over the last ``history`` steps, how many it had
    before those, and each peer group's running sum of its share of increasing rows (by peer key)."""

    tail: BoolArray  # (rows, min(history, steps so far))
    before: IntArray  # (rows,)
    share_sum: FloatArray  # (peer keys,)


@dataclass
class CounterState:
    """Steps scanned since the run's start, each counter frame's past and, for frames of raw counter
    values, each row's last present value (by frame name)."""

    steps: int = 0
    frames: dict[str, CounterPast] = field(default_factory=dict)
    last: dict[str, FloatArray] = field(default_factory=dict)


def carried_previous(v: FloatArray, last: FloatArray | None) -> tuple[FloatArray, FloatArray]:
    """``previous_values`` of a chunk given each row's last present value before it (NaN: none);
    and each row's last present value after it."""
    rows = v.shape[0]
    before = np.full(rows, np.nan) if last is None else grow(last, rows, np.nan)
    # The trailing NaN column's previous value is the row's last present one.
    p = previous_values(np.concatenate([before[:, None], v, np.full((rows, 1), np.nan)], axis=1))
    return p[:, 1:-1], p[:, -1].copy()


def increments(s: Series, step: float, last: FloatArray | None = None) -> tuple[FloatArray, FloatArray | None]:
    """Increase of each series at each step (0 where none, NaN where unknown), given each row's last
    present value before the chunk; and the last present values to carry (None for rates)."""
    v = s.values
    if s.frame.kind == "rate":
        return v * step, None
    prev, last = carried_previous(v, last)
    valid = ~np.isnan(v)
    return np.where(valid & ~np.isnan(prev), np.fmax(v - prev, 0.0), np.nan), last


def window_count(csum: IntArray, history: int) -> IntArray:
    """From running counts along rows, how many of the last ``history`` steps (this one included) counted."""
    lagged = np.zeros_like(csum)
    lagged[:, history:] = csum[:, :-history]
    out: IntArray = csum - lagged
    return out


def recent_count(flag: BoolArray, history: int) -> IntArray:
    """How many of the last ``history`` steps (this one included) had ``flag``."""
    return window_count(np.cumsum(flag, axis=1, dtype=np.int64), history)


def carried_recent_count(tail: BoolArray | None, flag: BoolArray, history: int) -> tuple[IntArray, BoolArray]:
    """``recent_count`` of a chunk given ``flag`` at the steps before it (``tail``); and the tail to keep."""
    u = with_tail(tail, flag, False)
    return recent_count(u, history)[:, u.shape[1] - flag.shape[1] :], keep_tail(u, history - 1)


def recurrence_score(recent: IntArray) -> FloatArray:
    """2.5 for one event in the window, 6 for two, 9.5 for four: repeats matter more than one."""
    score: FloatArray = np.where(recent > 0, 2.5 + 3.5 * np.log2(np.maximum(recent, 1)), 0.0)
    return score


def counter_scores(
    inc: FloatArray, peer_key: IntArray, settings: CounterSettings, past: CounterPast | None = None, start: int = 0
) -> tuple[FloatArray, CounterPast]:
    """Score of each cell while increases are recent: 2.5 for one isolated increment, more for repeats;
    and the past to carry. ``inc`` is a chunk beginning at step ``start`` of the run.

    The score holds between increments, so a counter that ticks every few minutes is one ongoing
    finding, not a series of one-step blips that no continuity rule would ever join.
    """
    h = settings.history
    rows, n = inc.shape
    t = start + np.arange(n)  # steps of the run
    if past is None:  # a frame new to the run: no increase before
        past = CounterPast(np.zeros((rows, min(h, start)), dtype=bool), np.zeros(rows, np.int64), np.zeros(0))
    up = np.nan_to_num(inc, nan=0.0) > 0
    u = with_tail(past.tail, up, False)  # the tail holds the last min(h, start) steps
    k = u.shape[1] - n
    csum = np.cumsum(u, axis=1, dtype=np.int64)
    recent = window_count(csum, h)[:, k:]
    # Counters that tick now and then on healthy peers too (NIC drops, TCP retransmits): only
    # increases beyond what a typical peer shows in the window count. The base rate is causal.
    usual = np.zeros(inc.shape)
    shared = np.zeros(inc.shape)
    share_sum = grow(past.share_sum, int(peer_key.max(initial=-1)) + 1, 0.0).copy()
    for key in np.unique(peer_key[peer_key >= 0]):
        members = peer_key == key
        if members.sum() >= 4:
            share = up[members].mean(axis=0)
            shared[members] = share
            running = np.cumsum(np.concatenate([share_sum[key : key + 1], share]))[1:]  # same sums as one scan
            share_sum[key] = running[-1]
            usual[members] = running / (t + 1)
    # ... nor beyond the entity's own habit: a NIC that has dropped a packet every few minutes for
    # hours is not failing now; a change of its rate is what counts. Its past before the window.
    own = np.zeros(inc.shape)
    before = grow(past.before, rows, 0)
    late = np.flatnonzero(t >= h)
    if late.size:
        own[:, late] = (before[:, None] + csum[:, k + late - h]) / (t[late] - h + 1)
    expected = np.ceil(2.0 * settings.history * np.fmax(usual, own)).astype(np.int64)
    excess = np.maximum(recent - expected, 0)
    size = np.minimum(3.0, np.log10(1 + np.nan_to_num(inc, nan=0.0)))
    score = recurrence_score(excess) + np.where(up & (excess > 0), size, 0.0)
    damp: FloatArray = 1.0 + 10.0 * np.fmax(shared - settings.shared, 0.0)
    out: FloatArray = np.where(peer_key[:, None] >= 0, score / damp, 0.0)  # -1: not watched (loopback)
    out[:, t < h] = 0.0  # no base rate known yet at the start of the run
    tail = keep_tail(u, h)
    dropped = u.shape[1] - tail.shape[1]
    if dropped:
        before = before + csum[:, dropped - 1]
    return out, CounterPast(tail, before, share_sum)


class CounterDetector:
    """Scores increases of the catalogue's error counters."""

    name = "counter"

    def __init__(self, settings: CounterSettings | None = None) -> None:
        self.settings = settings or CounterSettings()

    def detect(self, ctx: Context) -> list[Finding]:
        return self.scan(ctx, None)[0]

    def scan(self, ctx: Context, state: CounterState | None) -> tuple[list[Finding], CounterState]:
        state = state or CounterState()
        new = CounterState(state.steps + ctx.steps, dict(state.frames), dict(state.last))
        out: list[Finding] = []
        for s in ctx.series:
            if s.family.category not in (Category.error_counter, Category.discard):
                continue
            name = s.frame.name
            inc, last = increments(s, ctx.step, state.last.get(name))
            if last is not None:
                new.last[name] = last
            score, new.frames[name] = counter_scores(
                inc, s.peer_key, self.settings, state.frames.get(name), state.steps
            )
            if s.family.category is Category.discard:
                score *= self.settings.discard_weight
            what = "per second: the counter keeps increasing"
            out.extend(emit(ctx, s, score, None, None, self.settings.report, self.name, what))
        return out, new
