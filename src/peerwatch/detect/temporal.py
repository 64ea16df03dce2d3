"""Temporal self-baseline: a GPU's temperature creeping up against its own past, before peers notice.

The peer detector learns each series' usual offset from its peers and scores what leaves it; a
drift of a degree every quarter of an hour is learnt along the way and never leaves it by enough.
This detector asks a different question: has the series' offset *trended* away from what it was?

Reference: the median of the same family over the node's entities (its GPUs; one drifting among
8 hardly moves it), not the cluster's. It takes out cluster-wide moves like the peer median does,
and also what the node or its rack shares (inlet air, fan curves, the node's job); what is left is
the GPU's own thermal path (HBM, paste, its fan or cold plate). A whole node drifting is left to
the peer detector. Steps where the node is off its working level (checkpoints, evals, restarts
are cooler than work) are left out: a hotter GPU's offset shrinks with the load.

The test, per series at every step, on the residual (value - node median, in the bad direction),
over a window split into blocks (block level = mean of a 5-step running median, so a sensor
glitch or a short checkpoint dip drops out):
- Mann-Kendall concordance of the block levels: most later blocks above most earlier ones;
- no single block-to-block jump carries much of the rise: a job change, a warm-up or a fan step
  is a jump, a drift is spread;
- the node's own level held steady over the window: when the heat load moves (restart, eval,
  a spare joining), each GPU's offset scales with it, which is not a fault;
- score = rise (newest two blocks minus oldest two) over a unit: whole degrees (sensors report
  integers) or twice the series' usual block-to-block change, whichever is larger.

Scanned in chunks (detect/stream.py), a family carries what the test looks back on: its groups'
medians over the settle look-back, the residuals' and the groups' running totals (sums since the
run's start, so that block means keep their bits however the run is cut) over the longest window
and two blocks more, and each series' usual change so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from peerwatch.catalog.schema import Category, Direction, Unit
from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.detect.findings import emit
from peerwatch.detect.peer import column_quantile
from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.model import BoolArray, Finding, FloatArray

UNITS = frozenset({Unit.gpu, Unit.nvswitch})  # several alike on one node: each compared with the rest
CHUNK_CELLS = 4_000_000  # cells per stacked block of rows (32 MB of float64)
SLACK = 32  # steps of room after a look-back: a step appends to it, the look-back moves once every SLACK steps

Int32Array = npt.NDArray[np.int32]
A = TypeVar("A", bound=np.generic)


@dataclass(frozen=True)
class TemporalSettings:
    windows: tuple[float, ...] = (3600.0, 10800.0)  # seconds: a drift over an hour; a slower one over three
    blocks: int = 8  # per window: 7.5 min (22.5 min) each, long enough to average scrapes out
    concordance: int = 20  # Mann-Kendall S of 8 blocks (28 pairs): one-sided p < 1%; one step gives <= 19
    max_jump: float = 0.4  # a single block-to-block rise above this share of the whole is a step
    steady: float = 5.0  # [°C] the node's level may move within a window (offsets scale with load)
    quantum: float = 1.0  # [°C] sensors report whole degrees, so one is the smallest real unit
    per_unit: float = 2.0  # score per unit of rise: 2 units (2 C) report, 3 (3 C) reach the policy's 6
    despike: int = 5  # steps of running median before block means
    # The node's working level: the 90th percentile of its median over the last 30 min. Checkpoints,
    # evals and restarts are cooler than work: steps more than `steady` off it are left out, and a
    # longer change of load fails the window's steadiness instead.
    settle: float = 1800.0  # [s] over which the working level is taken (see above)
    settle_q: float = 0.9  # quantile of the node's median over `settle` that is its working level
    min_entities: int = 4  # entities of the node reporting at a step for its median to count
    report: float = 4.0  # scores below are not findings
    cap: float = 12.0  # a drift alone is a suspicion: never the policy's sure 15, nor a critical 20


def node_groups(s: Series) -> IntArray:
    """Which rows are alike entities of one node (-1: none): the node's rows, or per variant if any.

    Not the peer key: dcgm-exporter's ``device="nvidia3"`` beside ``gpu="3"`` makes it one per GPU
    index. A family whose node carries each entity once has no variants; otherwise peer keys split them.
    """
    _, comp = np.unique(np.asarray(s.components), return_inverse=True)
    ok = s.node_index >= 0
    pair = s.node_index * (int(comp.max(initial=0)) + 1) + comp
    if np.unique(pair[ok]).size == int(ok.sum()):
        return np.where(ok, s.node_index, -1)
    key = s.node_index * (int(s.peer_key.max(initial=0)) + 1) + s.peer_key
    return np.where(ok & (s.peer_key >= 0), key, -1)


def node_reference(values: FloatArray, group: IntArray, min_entities: int) -> tuple[FloatArray, IntArray]:
    """Each group's median at each step (groups x steps, NaN with fewer than ``min_entities`` reporting),
    and each row's index into it (-1: none)."""
    idx = np.full(group.shape, -1, dtype=np.int64)
    rows = np.flatnonzero(group >= 0)
    if rows.size == 0:
        return np.full((0, values.shape[1]), np.nan), idx
    _, idx[rows] = np.unique(group[rows], return_inverse=True)
    order = rows[np.argsort(idx[rows], kind="stable")]
    first = np.searchsorted(idx[order], idx[order])  # where each row's group starts
    rank = np.empty(values.shape[0], dtype=np.int64)
    rank[order] = np.arange(order.size) - first
    steps = values.shape[1]
    cube = np.full((int(rank[rows].max()) + 1, int(idx.max()) + 1, steps), np.nan)
    cube[rank[rows], idx[rows]] = values[rows]
    med = column_quantile(cube.reshape(cube.shape[0], -1), 0.5).reshape(cube.shape[1], steps)
    count = np.sum(~np.isnan(cube), axis=0)
    return np.where(count >= min_entities, med, np.nan), idx


def running_quantile(x: FloatArray, steps: int, q: float = 0.5, stride: int = 1, past: int = 0) -> FloatArray:
    """Causal q-quantile of the known values among the last ``steps`` steps, every ``stride``-th (NaN where none),
    at each step after the first ``past`` (kept from earlier chunks, only looked back on).

    Rows go in chunks so that the stacked copies stay a few million cells, whatever the cluster size.
    """
    lags = range(0, min(steps, x.shape[1]), stride)
    width = x.shape[1] - past
    out = np.full((x.shape[0], width), np.nan)
    chunk = max(1, CHUNK_CELLS // max(1, len(lags) * width))
    for lo in range(0, x.shape[0], chunk):
        part = x[lo : lo + chunk]
        stack = np.full((len(lags), part.shape[0], width), np.nan)
        for k, lag in enumerate(lags):
            skip = max(0, lag - past)  # steps with nothing that far back
            stack[k][:, skip:] = part[:, past + skip - lag : x.shape[1] - lag]
        out[lo : lo + chunk] = column_quantile(stack.reshape(len(lags), -1), q).reshape(part.shape[0], width)
    return out


def running_totals(sums: FloatArray, counts: Int32Array, x: FloatArray) -> tuple[FloatArray, Int32Array]:
    """Totals of ``x``'s known values and their number at each of its steps, carried on from the last column of
    ``sums`` and ``counts``.

    Each total adds to the one before, as one cumsum over the whole run does: the same bits however the
    run was cut, so that block means tie where they tie in one scan (Mann-Kendall counts ties).
    """
    ok = ~np.isnan(x)
    total = np.cumsum(np.concatenate([sums[:, -1:], np.where(ok, x, 0.0)], axis=1), axis=1)
    count = np.cumsum(np.concatenate([counts[:, -1:], ok], axis=1), axis=1, dtype=np.int32)
    return total[:, 1:], count[:, 1:]


@dataclass
class Totals:
    """Running totals of each row's known values and their number since the run's start, at its last ``keep``
    steps: steps ``end - keep .. end - 1`` of buffers with room for more, so that a step appends to them
    rather than copy the look-back. Steps x rows: a step reads a few past steps whole. Rows new to a
    chunk start at zero (never seen)."""

    keep: int
    sums: FloatArray = field(init=False)
    counts: Int32Array = field(init=False)
    end: int = field(init=False)

    def __post_init__(self) -> None:
        self.sums, self.counts, self.end = np.zeros((self.keep, 0)), np.zeros((self.keep, 0), dtype=np.int32), self.keep

    def add(self, x: FloatArray) -> tuple[FloatArray, Int32Array]:
        """Carries the totals over ``x``'s steps; returns them (rows x steps) at the ``keep`` steps before, then
        at ``x``'s."""
        rows, steps = x.shape
        if rows > self.sums.shape[1] or self.end + steps > self.sums.shape[0]:
            self._move(self.keep + max(steps, SLACK), rows)
        new = slice(self.end, self.end + steps)
        sums, counts = running_totals(self.sums[self.end - 1 : self.end].T, self.counts[self.end - 1 : self.end].T, x)
        self.sums[new], self.counts[new] = sums.T, counts.T
        self.end += steps
        back = slice(self.end - steps - self.keep, self.end)
        if steps > SLACK:  # a long chunk is read along its steps: rows x steps in memory
            return np.ascontiguousarray(self.sums[back].T), np.ascontiguousarray(self.counts[back].T)
        return self.sums[back].T, self.counts[back].T

    def _move(self, steps: int, rows: int) -> None:
        """Into new buffers of ``steps`` x ``rows``, the look-back first."""
        sums, counts = np.zeros((steps, rows)), np.zeros((steps, rows), dtype=np.int32)
        back = slice(self.end - self.keep, self.end)
        sums[: self.keep, : self.sums.shape[1]] = self.sums[back]
        counts[: self.keep, : self.sums.shape[1]] = self.counts[back]
        self.sums, self.counts, self.end = sums, counts, self.keep

    def regroup(self, old: IntArray, new: IntArray) -> None:
        """Rows are groups named by their first rows: from the groups ``old`` to ``new`` (see ``regroup``)."""
        self.sums = np.ascontiguousarray(regroup(self.sums.T, old, new, 0.0).T)
        self.counts = np.ascontiguousarray(regroup(self.counts.T, old, new, 0).T)


def block_means(
    sums: FloatArray, counts: Int32Array, steps: int, done: int, block: int, blocks: int
) -> list[FloatArray]:
    """Mean of each of the last ``blocks`` blocks of ``block`` steps ending at each of the last ``steps`` steps,
    newest first; NaN before ``block`` steps of the run exist or with fewer than half known.

    ``sums``, ``counts``: running totals (``running_totals``) with at least ``blocks * block`` steps before
    those, ``done`` steps of the run before them.
    """
    h = sums.shape[1] - steps

    def mean(lo: int, hi: int) -> FloatArray:  # blocks ending at columns lo..hi-1
        out = np.full((sums.shape[0], hi - lo), np.nan)
        a = max(lo, h - done + block - 1)  # the first column with a block's worth of the run before it
        s = sums[:, a:hi] - sums[:, a - block : hi - block]
        c = counts[:, a:hi] - counts[:, a - block : hi - block]
        with np.errstate(all="ignore"):
            out[:, a - lo :] = np.where(2 * c >= block, s / np.maximum(c, 1), np.nan)
        return out

    if steps < block:  # a few steps (the live service): each block on its own
        return [mean(h - j * block, h - j * block + steps) for j in range(blocks)]
    lo = h - (blocks - 1) * block
    level = mean(lo, h + steps)  # one pass, the blocks are views of it
    return [level[:, (blocks - 1 - j) * block : (blocks - 1 - j) * block + steps] for j in range(blocks)]


def rolling_mean(x: FloatArray, n: int) -> FloatArray:
    """Causal mean of the last ``n`` steps; NaN before ``n`` steps exist or with fewer than half known."""
    sums, counts = Totals(n).add(x)
    return block_means(sums, counts, x.shape[1], 0, n, 1)[0]


def per_row(a: npt.NDArray[A], idx: IntArray, fill: object) -> npt.NDArray[A]:
    """Each row's group's values (``fill`` for rows without a group)."""
    out = np.full((idx.size, *a.shape[1:]), fill, dtype=a.dtype)
    out[idx >= 0] = a[idx[idx >= 0]]
    return out


def regroup(a: npt.NDArray[A], old: IntArray, new: IntArray, fill: object) -> npt.NDArray[A]:
    """``a`` (one row per group, groups named by their first rows ``old``) in the order of the groups named
    ``new``; groups new there get ``fill``."""
    where = np.full(int(max(old.max(initial=-1), new.max(initial=-1))) + 1, -1)
    where[old] = np.arange(old.size)
    src = where[new]
    out = np.full((new.size, *a.shape[1:]), fill, dtype=a.dtype)
    out[src >= 0] = a[src[src >= 0]]
    return out


def trend_score(
    b: list[FloatArray],
    sign: float,
    steady: BoolArray,
    total: FloatArray,
    seen: Int32Array,
    window: int,
    st: TemporalSettings,
) -> FloatArray:
    """Score of a steady rise of ``sign`` times the block means ``b`` (newest first) at each step, for rows whose
    node held ``steady``; ``total``/``seen``: the row's block-to-block changes while steady, summed until
    ``window`` steps before, and how many."""
    rise = sign * ((b[0] + b[1]) / 2 - (b[-1] + b[-2]) / 2)  # negating is exact: the bits of -b's rise
    score = np.zeros(rise.shape)
    # Only cells whose rise could reach the report level are tested further (the unit is >= quantum).
    with np.errstate(invalid="ignore"):
        rows, cols = np.nonzero(steady & (rise * st.per_unit >= st.report * st.quantum))
    if rows.size == 0:
        return score
    levels = sign * np.stack([x[rows, cols] for x in b])  # (blocks, cells), newest first
    concordance = sum(np.sign(levels[i] - levels[j]) for i in range(st.blocks) for j in range(i + 1, st.blocks))
    jump = np.max(levels[:-1] - levels[1:], axis=0)
    n = seen[rows, cols]
    usual = np.where(n >= window, total[rows, cols] / np.maximum(n, 1), 0.0)
    unit = np.fmax(st.quantum, 2.0 * usual)
    up = rise[rows, cols]
    ok = (concordance >= st.concordance) & (jump <= st.max_jump * up)  # NaN blocks: unknown, not ok
    score[rows, cols] = np.where(ok, st.per_unit * up / unit, 0.0)
    return score


@dataclass
class _Family:
    """One family's past at the last step scanned, per group of alike entities (named by its first row): its
    medians over the settle look-back, running totals of its steady median and whether it held steady over
    each window; per row: value minus median over the despike look-back, running totals of the residual over
    ten blocks of the longest window, and its block-to-block changes while steady until a window ago."""

    group: IntArray  # (rows,) node_groups
    first: IntArray  # (groups,)
    med: FloatArray  # (groups, settle look-back)
    ref: Totals  # (groups, longest window)
    steady: list[BoolArray]  # per block size: (groups, its window)
    diff: FloatArray  # (rows, despike - 1)
    resid: Totals  # (rows, 10 longest blocks)
    change: FloatArray  # (rows, block sizes)
    changes: Int32Array


@dataclass
class TemporalState:
    """Steps scanned since the run's start, and each temperature family's past."""

    steps: int = 0
    families: dict[str, _Family] = field(default_factory=dict)


class TemporalDetector:
    """Scores temperatures that drift steadily away from the node's other entities (GUIDE: the trend matters)."""

    name = "temporal"

    def __init__(self, settings: TemporalSettings | None = None) -> None:
        self.settings = settings or TemporalSettings()

    def scan(self, ctx: Context, state: TemporalState | None) -> tuple[list[Finding], TemporalState]:
        state = state or TemporalState()
        sizes = [round(w / self.settings.blocks / ctx.step) for w in self.settings.windows]
        sizes = [b for b in sizes if b >= 1]
        out: list[Finding] = []
        for s in ctx.series:
            if (
                sizes
                and s.family.category is Category.temperature
                and s.family.unit in UNITS
                and s.family.bad is not Direction.none
                and s.frame.kind == "gauge"
            ):
                out.extend(self._series(ctx, s, sizes, state))
        state.steps += ctx.steps
        return out, state

    def _family(self, s: Series, settle_back: int, sizes: list[int], state: TemporalState) -> _Family:
        """The family's past, with rows new in ``s`` and its groups in their current order."""
        st, rows = self.settings, s.values.shape[0]
        past = state.families.get(s.frame.name)
        if past is None:
            none = np.zeros(0, dtype=np.int64)
            past = state.families[s.frame.name] = _Family(
                group=none,
                first=none,
                med=np.zeros((0, settle_back)),
                ref=Totals(st.blocks * max(sizes)),
                steady=[np.zeros((0, st.blocks * b), dtype=np.bool_) for b in sizes],
                diff=np.zeros((0, st.despike - 1)),
                resid=Totals((st.blocks + 2) * max(sizes)),
                change=np.zeros((0, len(sizes))),
                changes=np.zeros((0, len(sizes)), dtype=np.int32),
            )
        if past.group.size == rows:
            return past
        # New rows start as if silent since the run's start, new groups likewise.
        past.group = node_groups(s)
        grouped = np.flatnonzero(past.group >= 0)
        first = grouped[np.unique(past.group[grouped], return_index=True)[1]]  # in node_reference's order
        past.med = regroup(past.med, past.first, first, np.nan)
        past.ref.regroup(past.first, first)
        past.steady = [regroup(a, past.first, first, False) for a in past.steady]
        past.first = first
        past.diff = grow(past.diff, rows, np.nan)
        past.change, past.changes = grow(past.change, rows, 0.0), grow(past.changes, rows, 0)
        return past

    def _series(self, ctx: Context, s: Series, sizes: list[int], state: TemporalState) -> list[Finding]:
        st, steps, done = self.settings, ctx.steps, state.steps
        settle = max(1, round(st.settle / ctx.step))
        settle_lags = range(0, settle, max(1, settle // 15))
        past = self._family(s, settle_lags[-1], sizes, state)
        med, idx = node_reference(s.values, past.group, st.min_entities)
        med_all = with_tail(past.med, med, np.nan)
        past.med = keep_tail(med_all, settle_lags[-1])
        usual = running_quantile(med_all, settle, st.settle_q, settle_lags.step, past=med_all.shape[1] - steps)
        with np.errstate(invalid="ignore"):
            med_steady = np.where(np.abs(med - usual) > st.steady, np.nan, med)
        diff = with_tail(past.diff, s.values - per_row(med_steady, idx, np.nan), np.nan)
        past.diff = keep_tail(diff, st.despike - 1)
        resid = running_quantile(diff, st.despike, past=diff.shape[1] - steps)
        sums, counts = past.resid.add(resid)
        ref_sums, ref_counts = past.ref.add(med_steady)
        signs = {Direction.up: (1.0,), Direction.down: (-1.0,)}.get(s.family.bad, (1.0, -1.0))
        raw = np.zeros(s.values.shape)
        for i, block in enumerate(sizes):
            window = st.blocks * block
            # Ten blocks back: eight for the trend, the last two for the change a window before.
            b = block_means(sums, counts, steps, done, block, st.blocks + 2)
            r = block_means(ref_sums, ref_counts, steps, done, block, st.blocks)
            with np.errstate(invalid="ignore"):
                steady_group = np.fmax.reduce(r) - np.fmin.reduce(r) <= st.steady  # NaN: unknown, not steady
            steady_all = with_tail(past.steady[i], steady_group, False)
            past.steady[i] = keep_tail(steady_all, window)
            # The series' usual block-to-block change while steady, until a window before (causal).
            then = per_row(steady_all[:, :steps], idx, False)
            change = np.where(then, np.abs(b[-2] - b[-1]), np.nan)
            total, seen = running_totals(past.change[:, i : i + 1], past.changes[:, i : i + 1], change)
            past.change[:, i], past.changes[:, i] = total[:, -1], seen[:, -1]
            if window > done + steps:  # no oldest block yet
                continue
            steady = per_row(steady_group, idx, False)
            for sign in signs:
                raw = np.fmax(raw, trend_score(b[: st.blocks], sign, steady, total, seen, window, st))
        shown = per_row(med, idx, np.nan)
        what = "C, after a steady rise against its node's median of"
        # robust_z in the evidence: the rise in units (degrees, for a quiet sensor), not capped
        return emit(ctx, s, np.fmin(raw, st.cap), shown, raw / st.per_unit, st.report, self.name, what)
