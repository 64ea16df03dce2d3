"""Error counters: an increase is judged by how unlikely its count is, given the usual rate.

Over the last ``history`` steps each entity's count of increases is tested against a Poisson
distribution whose mean is 1.5 times the larger of two base rates: its peers' (counters that tick on healthy
peers too, such as drops of frames nobody listens to) and its own before the window (a NIC that has
dropped a packet every few minutes for hours is not failing now; a change of its rate is). Counters
that move in bursts (a multicast storm drops dozens of frames in one scrape) are over-dispersed: the
count and the mean are divided by the variance-to-mean ratio seen on the peers and the entity's own
past (a quasi-Poisson test), so one burst counts about as one event. The score is proportional to
-log10 of the tail probability: one tick on a counter that ticks now and then scores nothing; on a
counter silent everywhere, one tick scores 2.8 (below what opens an alarm on its own: an isolated
PCIe replay or link recovery is harmless), two 6.2 (the policy's ``counter_open``), and a burst or a
steady rise far beyond the base rate more. When a large share of peers increase at the same step
the move is shared (a fabric-wide event), and the score is damped.

Drops (discards) are not hardware trouble on their own, and a drop finding never opens an alarm by
itself: its score is halved and capped below what opens one; with errors or link changes it adds up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from peerwatch.catalog.schema import Category
from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.detect.findings import emit
from peerwatch.detect.poisson import poisson_surprise
from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.frames import previous_values
from peerwatch.model import BoolArray, Finding, FloatArray


@dataclass(frozen=True)
class CounterSettings:
    history: int = 20  # steps over which increases are counted; also the warm-up (no base rate yet)
    # Expected increases per window on a counter silent on its peers and its own past so far: no
    # record can vouch for a rarer one (about one window in 25). One tick is then p = 0.04, two 0.0008.
    floor: float = 0.04
    per_decade: float = 2.0  # score per factor of ten in improbability: one tick 2.8, two 6.2
    # The count is judged against this many times the base rate: rates drift with load over a day and
    # are estimated from a finite past; what matters is a rate well beyond the usual one.
    margin: float = 1.5
    shared: float = 0.2  # share of peers increasing together beyond which the move is shared
    report: float = 2.5  # scores below are not findings
    discard_weight: float = 0.5  # drop counters (discards) score this share of an error counter's score
    discard_cap: float = 4.0  # drops alone never open: rx and tx together fuse to 5, below open_score 6
    min_peers: int = 4  # fewer rows of one peer key: no peer base rate


@dataclass
class CounterPast:
    """One counter frame's past: each row's increments over the last ``history`` steps (NaN unknown),
    its sums before those (count, squared count, steps seen), and each peer key's sums so far."""

    tail: FloatArray  # (rows, min(history, steps so far))
    before: FloatArray  # (rows, 3)
    peers: FloatArray  # (peer keys, 3)


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


def window_sum(csum: FloatArray, history: int) -> FloatArray:
    """From running sums along rows, the sum over the last ``history`` steps (this one included)."""
    lagged = np.zeros_like(csum)
    lagged[:, history:] = csum[:, :-history]
    out: FloatArray = csum - lagged
    return out


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
    """2.5 for one event in the window, 6 for two, 9.5 for four: repeats matter more than one (states.py)."""
    score: FloatArray = np.where(recent > 0, 2.5 + 3.5 * np.log2(np.maximum(recent, 1)), 0.0)
    return score


def dispersion(s1: FloatArray, s2: FloatArray, n: FloatArray) -> FloatArray:
    """Variance-to-mean ratio of per-step counts from their sums (at least 1: Poisson or burstier)."""
    with np.errstate(all="ignore"):
        mean = s1 / n
        ratio = (s2 / n - mean * mean) / mean
    out: FloatArray = np.fmax(np.where((n > 0) & (s1 > 0), ratio, 1.0), 1.0)
    return out


def counter_scores(
    inc: FloatArray, peer_key: IntArray, settings: CounterSettings, past: CounterPast | None = None, start: int = 0
) -> tuple[FloatArray, FloatArray, CounterPast]:
    """Score of each cell while its window's count is unlikely under the base rate, and that base rate
    (increase per step); and the past to carry. ``inc`` is a chunk beginning at step ``start`` of the run.

    The score holds while the increases are in the window, so a counter that ticks every few minutes
    is one ongoing finding, not a series of one-step blips that no continuity rule would ever join.
    """
    h = settings.history
    rows, n = inc.shape
    t = start + np.arange(n)  # steps of the run
    keys = int(peer_key.max(initial=-1)) + 1
    if past is None:  # a frame new to the run: nothing before
        past = CounterPast(np.full((rows, min(h, start)), np.nan), np.zeros((rows, 3)), np.zeros((keys, 3)))
    x = with_tail(past.tail, inc, np.nan)  # the tail holds the last min(h, start) steps
    k = x.shape[1] - n
    seen = ~np.isnan(x)
    c = np.where(seen, x, 0.0)
    sums = [np.cumsum(a, axis=1) for a in (c, c * c, seen.astype(np.float64))]  # count, squared, steps
    count = window_sum(sums[0], h)[:, k:]
    steps_seen = window_sum(sums[2], h)[:, k:]
    # The entity's own habit, before the window.
    before = grow(past.before, rows, 0.0)
    own = np.zeros((3, rows, n))
    late = np.flatnonzero(t >= h)
    if late.size:
        for i in range(3):
            own[i][:, late] = before[:, i : i + 1] + sums[i][:, k + late - h]
    # The peers' base rate so far (this step included: causal), per peer key.
    peer = np.zeros((3, rows, n))
    shared = np.zeros((rows, n))
    totals = grow(past.peers, keys, 0.0).copy()
    up = c[:, k:] > 0
    for key in np.unique(peer_key[peer_key >= 0]):
        members = peer_key == key
        if members.sum() < settings.min_peers:
            continue
        shared[members] = up[members].mean(axis=0)
        for i, a in enumerate((c[:, k:], c[:, k:] ** 2, seen[:, k:])):
            running = totals[key, i] + np.cumsum(a[members].sum(axis=0))
            # The others: an entity's own increases do not raise its peers' base rate.
            peer[i][members] = running - (before[members, i : i + 1] + sums[i][members, k:])
            totals[key, i] = running[-1]
    with np.errstate(all="ignore"):
        rate = np.fmax(np.where(own[2] > 0, own[0] / own[2], 0.0), np.where(peer[2] > 0, peer[0] / peer[2], 0.0))
    disp = np.fmax(dispersion(*own), dispersion(*peer))
    mean = np.fmax(settings.margin * rate * steps_seen, settings.floor)
    score = settings.per_decade * poisson_surprise(count / disp, mean / disp)
    damp: FloatArray = 1.0 + 10.0 * np.fmax(shared - settings.shared, 0.0)
    out: FloatArray = np.where(peer_key[:, None] >= 0, score / damp, 0.0)  # -1: not watched (virtual)
    out[:, t < h] = 0.0  # no base rate known yet at the start of the run
    tail = keep_tail(x, h)
    dropped = x.shape[1] - tail.shape[1]
    if dropped:
        before = before + np.stack([s[:, dropped - 1] for s in sums], axis=1)
    return out, rate, CounterPast(tail, before, totals)


class CounterDetector:
    """Scores increases of the catalogue's error counters."""

    name = "counter"

    def __init__(self, settings: CounterSettings | None = None) -> None:
        self.settings = settings or CounterSettings()

    def scan(self, ctx: Context, state: CounterState | None) -> tuple[list[Finding], CounterState]:
        st = self.settings
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
            score, rate, new.frames[name] = counter_scores(inc, s.peer_key, st, state.frames.get(name), state.steps)
            if s.family.category is Category.discard:
                score = np.fmin(score * st.discard_weight, st.discard_cap)
            what = "per second, beyond a base rate of"
            out.extend(emit(ctx, s, score, rate / ctx.step, None, st.report, self.name, what))
        return out, new
