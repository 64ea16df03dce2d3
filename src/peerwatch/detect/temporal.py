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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.catalog.schema import Category, Direction, Unit
from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.detect.findings import emit
from peerwatch.detect.peer import column_quantile
from peerwatch.model import Finding, FloatArray

UNITS = frozenset({Unit.gpu, Unit.nvswitch})  # several alike on one node: each compared with the rest
CHUNK_CELLS = 4_000_000  # cells per stacked block of rows (32 MB of float64)


@dataclass(frozen=True)
class TemporalSettings:
    windows: tuple[float, ...] = (3600.0, 10800.0)  # seconds: a drift over an hour; a slower one over three
    blocks: int = 8  # per window: 7.5 min (22.5 min) each, long enough to average scrapes out
    concordance: int = 20  # Mann-Kendall S of 8 blocks (28 pairs): one-sided p < 1%; one step gives <= 19
    max_jump: float = 0.4  # a single block-to-block rise above this share of the whole is a step
    steady: float = 5.0  # degrees the node's level may move within a window (offsets scale with load)
    quantum: float = 1.0  # degrees: sensors report whole degrees, so one is the smallest real unit
    per_unit: float = 2.0  # score per unit of rise: 2 units (2 C) report, 3 (3 C) reach the policy's 6
    despike: int = 5  # steps of running median before block means
    # The node's working level: the 90th percentile of its median over the last 30 min. Checkpoints,
    # evals and restarts are cooler than work: steps more than `steady` off it are left out, and a
    # longer change of load fails the window's steadiness instead.
    settle: float = 1800.0
    settle_q: float = 0.9
    min_entities: int = 4  # entities of the node reporting at a step for its median to count
    report: float = 4.0
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


def running_quantile(x: FloatArray, steps: int, q: float = 0.5, stride: int = 1) -> FloatArray:
    """Causal q-quantile of the known values among the last ``steps`` steps, every ``stride``-th (NaN where none).

    Rows go in chunks so that the stacked copies stay a few million cells, whatever the cluster size.
    """
    lags = range(0, min(steps, x.shape[1]), stride)
    out = np.full(x.shape, np.nan)
    chunk = max(1, CHUNK_CELLS // max(1, len(lags) * x.shape[1]))
    for lo in range(0, x.shape[0], chunk):
        part = x[lo : lo + chunk]
        stack = np.full((len(lags), *part.shape), np.nan)
        for k, lag in enumerate(lags):
            stack[k][:, lag:] = part[:, : part.shape[1] - lag]
        out[lo : lo + chunk] = column_quantile(stack.reshape(len(lags), -1), q).reshape(part.shape)
    return out


def rolling_mean(x: FloatArray, n: int) -> FloatArray:
    """Causal mean of the last ``n`` steps; NaN before ``n`` steps exist or with fewer than half known."""
    ok = ~np.isnan(x)
    zero = np.zeros((x.shape[0], 1))
    total = np.concatenate([zero, np.cumsum(np.where(ok, x, 0.0), axis=1)], axis=1)
    count = np.concatenate([zero, np.cumsum(ok, axis=1)], axis=1)
    hi = np.arange(1, x.shape[1] + 1)
    lo = np.maximum(hi - n, 0)
    s, c = total[:, hi] - total[:, lo], count[:, hi] - count[:, lo]
    with np.errstate(all="ignore"):
        out: FloatArray = np.where((hi >= n) & (2 * c >= n), s / np.maximum(c, 1), np.nan)
    return out


def lagged(x: FloatArray, lags: int) -> FloatArray:
    """``x`` shifted ``lags`` steps later, NaN before its start."""
    out = np.full(x.shape, np.nan)
    if lags < x.shape[1]:
        out[:, lags:] = x[:, : x.shape[1] - lags]
    return out


def block_levels(x: FloatArray, block: int, blocks: int) -> list[FloatArray]:
    """Mean of each of the last ``blocks`` blocks of ``block`` steps ending at each step, newest first (views)."""
    level = rolling_mean(x, block)
    pad = np.concatenate([np.full((x.shape[0], (blocks - 1) * block), np.nan), level], axis=1)
    return [pad[:, (blocks - 1 - j) * block : (blocks - 1 - j) * block + x.shape[1]] for j in range(blocks)]


def trend_score(resid: FloatArray, ref: FloatArray, idx: IntArray, block: int, st: TemporalSettings) -> FloatArray:
    """Score of a steady rise of ``resid`` (rows) over ``st.blocks`` blocks of ``block`` steps ending at each
    step; ``ref`` is the reference of each group, ``idx`` each row's group (-1: none)."""
    b = block_levels(resid, block, st.blocks)
    r = block_levels(ref, block, st.blocks)
    with np.errstate(invalid="ignore"):
        steady_group = np.fmax.reduce(r) - np.fmin.reduce(r) <= st.steady  # NaN: unknown, not steady
    steady = np.where(idx[:, None] >= 0, steady_group[np.maximum(idx, 0)], False)
    rise = (b[0] + b[1]) / 2 - (b[-1] + b[-2]) / 2
    # The series' usual block-to-block change while steady, from before the window (causal).
    change = np.where(steady, np.abs(b[0] - b[1]), np.nan)
    window = st.blocks * block
    total = lagged(np.cumsum(np.nan_to_num(change), axis=1), window)
    seen = lagged(np.cumsum(~np.isnan(change), axis=1).astype(np.float64), window)
    score = np.zeros(resid.shape)
    # Only cells whose rise could reach the report level are tested further (the unit is >= quantum).
    with np.errstate(invalid="ignore"):
        rows, cols = np.nonzero(steady & (rise * st.per_unit >= st.report * st.quantum))
    if rows.size == 0:
        return score
    levels = np.stack([x[rows, cols] for x in b])  # (blocks, cells), newest first
    concordance = sum(np.sign(levels[i] - levels[j]) for i in range(st.blocks) for j in range(i + 1, st.blocks))
    jump = np.max(levels[:-1] - levels[1:], axis=0)
    n = seen[rows, cols]
    usual = np.where(n >= window, total[rows, cols] / np.maximum(n, 1), 0.0)
    unit = np.fmax(st.quantum, 2.0 * usual)
    up = rise[rows, cols]
    ok = (concordance >= st.concordance) & (jump <= st.max_jump * up)  # NaN blocks: unknown, not ok
    score[rows, cols] = np.where(ok, st.per_unit * up / unit, 0.0)
    return score


class TemporalDetector:
    """Scores temperatures that drift steadily away from the node's other entities (GUIDE: the trend matters)."""

    name = "temporal"

    def __init__(self, settings: TemporalSettings | None = None) -> None:
        self.settings = settings or TemporalSettings()

    def detect(self, ctx: Context) -> list[Finding]:
        blocks = [round(w / self.settings.blocks / ctx.step) for w in self.settings.windows]
        blocks = [b for b in blocks if b >= 1 and b * self.settings.blocks <= ctx.steps]
        if not blocks:  # a window shorter than the shortest test: nothing to judge yet
            return []
        out: list[Finding] = []
        for s in ctx.series:
            if (
                s.family.category is Category.temperature
                and s.family.unit in UNITS
                and s.family.bad is not Direction.none
                and s.frame.kind == "gauge"
            ):
                out.extend(self._series(ctx, s, blocks))
        return out

    def _series(self, ctx: Context, s: Series, blocks: list[int]) -> list[Finding]:
        st = self.settings
        med, idx = node_reference(s.values, node_groups(s), st.min_entities)
        settle = max(1, round(st.settle / ctx.step))
        usual = running_quantile(med, settle, st.settle_q, stride=max(1, settle // 15))
        with np.errstate(invalid="ignore"):
            med_steady = np.where(np.abs(med - usual) > st.steady, np.nan, med)
        has = idx[:, None] >= 0
        resid = running_quantile(s.values - np.where(has, med_steady[np.maximum(idx, 0)], np.nan), st.despike)
        signs = {Direction.up: (1.0,), Direction.down: (-1.0,)}.get(s.family.bad, (1.0, -1.0))
        raw = np.zeros(s.values.shape)
        for sign in signs:
            for block in blocks:
                raw = np.fmax(raw, trend_score(sign * resid, med_steady, idx, block, st))
        shown = np.where(has, med[np.maximum(idx, 0)], np.nan)
        what = "C, after a steady rise against its node's median of"
        # robust_z in the evidence: the rise in units (degrees, for a quiet sensor), not capped
        return emit(ctx, s, np.fmin(raw, st.cap), shown, raw / st.per_unit, st.report, self.name, what)
