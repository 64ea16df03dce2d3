"""Peer comparison: each series against the same metric on its peers, at every step.

Robust z = (value - peer median) / robust scale, within the series' peer key and its node's
workload group. The scale has floors so that a metric on which every peer agrees exactly does
not turn a rounding difference into an alarm: a few per cent of the median and of the metric's
largest typical magnitude so far, and half its usual spread so far (all causal). A rate read off
a counter is a count of events per step (or a sum of their sizes: bytes, seconds): its scale is at
least the Poisson noise of that count, sqrt(max(expected count, 1)) events per step, so a node doing
one or two more rare NFS LOOKUPs a step than its peers is not a deviation, nor are their bytes and
round-trip seconds. An event's size is 1 for counters of events, and for counters of sizes the
smallest increase the peers have shown so far (at steps that followed a sample). A fixed offset
of one entity (a GPU that always runs 5 C hotter) is learnt from its own past and taken out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from peerwatch.catalog.schema import Category, Direction, Unit
from peerwatch.detect.context import Context, IntArray, Series, per_node
from peerwatch.detect.findings import emit
from peerwatch.detect.groups import COMPARED as PEER_GROUPS
from peerwatch.detect.groups import MAIN, settled
from peerwatch.detect.stream import grow, keep_tail, with_tail
from peerwatch.model import BoolArray, Finding, FloatArray

PER_NODE = frozenset({Unit.cpu_core})  # compared as the node's mean over them
COMPARED = frozenset(
    {
        Category.utilization,
        Category.throughput,
        Category.latency,
        Category.temperature,
        Category.power,
        Category.clock,
        Category.memory,
        Category.load,
        Category.quantity,
        Category.cooling,
    }
)


# The default of PeerSettings.rel_floors; traffic and load swing more than clocks and temperatures.
REL_FLOOR = {
    Category.clock: 0.01,
    Category.temperature: 0.02,
    Category.power: 0.03,
    Category.memory: 0.02,
    Category.utilization: 0.05,
    Category.throughput: 0.05,
    Category.cooling: 0.05,
    Category.latency: 0.1,
    Category.load: 0.1,
    Category.quantity: 0.1,
}


# Counters of sizes (bytes, seconds, energy), not of events: their increments are no counts.
SIZED = re.compile(r"bytes|octets|seconds|joules|_data_")


def counts_events(s: Series) -> bool:
    """Whether the series is a rate read off a counter of events, whose per-step increase is a count."""
    return s.frame.kind == "rate" and not SIZED.search(s.frame.name)


@dataclass(frozen=True)
class PeerSettings:
    min_peers: int = 4  # fewer series present at a step: no comparison
    min_nodes: int = 4  # a workload group of fewer nodes is not compared (8 GPUs of one node are not peers)
    # Smallest deviation worth a z of 1, as a share of the peer median, per catalogue category:
    # clocks and temperatures are steady across healthy peers, so a few per cent already matters.
    rel_floors: Mapping[Category, float] = field(default_factory=lambda: dict(REL_FLOOR))
    rel_floor: float = 0.05  # the same for categories `rel_floors` does not list
    offset_window: int = 120  # steps of own history that define an entity's usual offset
    offset_min: int = 10  # compared steps in that window before the offset is known (and the series judged)
    offset_delay: int = 20  # recent steps left out of it, so a new fault is not learnt as normal
    clip: float = 3.0  # deviations beyond this (x scale) from the offset so far do not shift it
    offset_blocks: int = 8  # the window's blocks (15 steps each), the units the offset is robust over
    offset_rounds: int = 4  # refinements of the learnt offset (each can move it by clip x scale)
    report: float = 4.0  # scores below are not findings
    warmup: int = 30  # [steps] first steps of a run, before usual offsets are known: no findings
    settle: int = 10  # steps after a node changes workload group before it is compared again
    sustain: int = 3  # [steps] a deviation counts at the median of the last this many steps
    count_floor: float = 1.0  # least expected count per step in the Poisson floor: one event is the resolution


Usual = dict[tuple[int, int], tuple[float, float, float]]  # (peer key, group) -> (largest level, MAD sum, MAD count)


def peer_z(
    values: FloatArray,
    peer_key: IntArray,
    groups: IntArray,
    settings: PeerSettings,
    rel_floor: float | None = None,
    usual: Usual | None = None,
    scales: FloatArray | None = None,
    quantum: FloatArray | None = None,
    counted: FloatArray | None = None,
    scores: bool = True,
) -> tuple[FloatArray, FloatArray]:
    """Robust z and peer median of every cell, NaN where the cell has too few peers (z: all NaN
    without ``scores``, where only the medians, scales and ``usual`` are wanted).

    ``quantum`` (rows x steps): for a rate read off a counter, one event's share of it (its floor is the
    count's Poisson noise), NaN where unknown; ``counted`` (rows x steps), each cell's own expected rate
    (its raw value), whose Poisson noise is also a floor of its own z (a busier node counts noisier).

    ``usual`` carries each peer group's typical level and spread from earlier chunks and is updated;
    ``scales`` (peer keys x GROUPS x steps, NaN-filled), if given, receives each peer group's scale."""
    usual = {} if usual is None else usual
    z = np.full(values.shape, np.nan)
    med_out = np.full(values.shape, np.nan)
    for key in np.unique(peer_key[peer_key >= 0]):
        rows = np.flatnonzero(peer_key == key)
        whole = rows.size == peer_key.size  # one peer key (most families): no copies of the rows
        v, g = (values, groups) if whole else (values[rows], groups[rows])
        for group in np.flatnonzero(np.bincount(g.ravel() + 1, minlength=GROUPS + 1)[1:]):  # np.unique's, faster
            x = np.where(g == group, v, np.nan)
            n = np.count_nonzero(~np.isnan(x), axis=0)
            if not (n >= settings.min_peers).any():
                continue
            with np.errstate(all="ignore"):
                ordered = np.sort(x, axis=0)
                med = sorted_quantile(ordered, n, 0.5)
                # |x - med| is NaN where x is (values are finite): the same n.
                mad = 1.4826 * sorted_quantile(np.sort(np.abs(x - med), axis=0), n, 0.5)
                # |x| is x where nothing is negative (nearly every metric): no second sort.
                level = column_quantile(np.abs(x), 0.9) if (ordered[0] < 0).any() else sorted_quantile(ordered, n, 0.9)
            top, mad_sum, mad_n = usual.get((int(key), int(group)), (0.0, 0.0, 0.0))
            usual_level = np.fmax.accumulate(np.concatenate(([top], _nan_to_0(level))))[1:]
            usual_mad, mad_sum, mad_n = _running_mean(mad, mad_sum, mad_n)
            usual[(int(key), int(group))] = (float(usual_level[-1]), mad_sum, mad_n)
            rel = settings.rel_floor if rel_floor is None else rel_floor
            scale = np.fmax(np.fmax(np.fmax(mad, rel * np.abs(med)), rel * usual_level), 0.5 * usual_mad)
            if quantum is not None:  # Poisson: a count's sd is sqrt(its mean), here in events of size q
                q = quantum[rows[0]]
                scale = np.fmax(scale, np.sqrt(np.fmax(np.abs(med) * q, settings.count_floor * q * q)))
            scale = np.where(scale > 0, scale, np.nan)
            ok = (n >= settings.min_peers) & ~np.isnan(scale)
            cell = (g == group) & ok
            _put(med_out, rows, whole, cell, med)
            if scales is not None:
                scales[key, group] = np.where(ok, scale, np.nan)
            if not scores:
                continue
            if quantum is not None and counted is not None:
                q, c = (quantum, counted) if whole else (quantum[rows], counted[rows])
                own = np.sqrt(np.fmax(np.abs(c) * q, settings.count_floor * q * q))
                zz = (v - med) / np.fmax(scale, own)
            else:
                zz = (v - med) / scale
            _put(z, rows, whole, cell, zz)
    return z, med_out


def _put(out: FloatArray, rows: IntArray, whole: bool, where: BoolArray, values: FloatArray) -> None:
    """``out[rows] = values`` where ``where`` (``rows`` all of ``out``'s when ``whole``)."""
    if whole:
        np.copyto(out, values, where=where)
    else:
        out[rows] = np.where(where, values, out[rows])


def _nan_to_0(x: FloatArray) -> FloatArray:
    """``np.nan_to_num(x, nan=0.0)`` for finite-or-NaN ``x``, without its checks for infinities."""
    out: FloatArray = np.where(np.isnan(x), 0.0, x)
    return out


def column_quantile(x: FloatArray, q: float) -> FloatArray:
    """The q-quantile of each column over its non-NaN values (NaN where none), interpolated.

    One sort per call: numpy's nanmedian and nanpercentile go column by column in Python for
    arrays with NaNs and were most of the engine's time.
    """
    if x.shape[0] == 0:  # no rows (every series of a peer key on unknown nodes): nothing known
        return np.full(x.shape[1], np.nan)
    return sorted_quantile(np.sort(x, axis=0), np.sum(~np.isnan(x), axis=0), q)


def sorted_quantile(s: FloatArray, n: IntArray, q: float) -> FloatArray:
    """``column_quantile`` of the columns ``s`` sorted (NaN last), ``n`` non-NaN values in each."""
    pos = q * np.maximum(n - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    cols = np.arange(s.shape[1])
    a, b = s[lo, cols], s[hi, cols]
    out: FloatArray = np.where(n > 0, a + (b - a) * (pos - lo), np.nan)
    return out


def _running_mean(mad: FloatArray, total: float, count: float) -> tuple[FloatArray, float, float]:
    """A slow, causal estimate of the usual spread: the running mean of the MAD so far (after ``count``
    earlier values summing to ``total``), and the new total and count."""
    sums = total + np.cumsum(_nan_to_0(mad))
    counts = count + np.cumsum(~np.isnan(mad))
    mean = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    return mean, float(sums[-1]), float(counts[-1])


def _prefix(x: FloatArray) -> FloatArray:
    """Per row, the sums of ``x`` before each step and after the last: (rows, steps + 1)."""
    csum = np.zeros((x.shape[0], x.shape[1] + 1))
    np.cumsum(x, axis=1, out=csum[:, 1:])
    return csum


def _block_sums(csum: FloatArray, first: IntArray, size: int, blocks: int) -> FloatArray:
    """(blocks, rows, steps): per row, the sum over ``[first[t] + b*size, first[t] + (b+1)*size)`` of
    the values whose ``_prefix`` is ``csum``."""
    steps = csum.shape[1] - 1
    edges = np.stack([csum[:, np.clip(first + b * size, 0, steps)] for b in range(blocks + 1)])
    out: FloatArray = np.diff(edges, axis=0)
    return out


Float32Array = npt.NDArray[np.float32]


def learnt_offset(
    dev: Float32Array, clipped: Float32Array, limit: FloatArray, settings: PeerSettings
) -> tuple[FloatArray, BoolArray]:
    """Each series' usual deviation from its peers, from its past deviations: causal and delayed.

    ``dev`` and ``clipped`` (each deviation clipped to its step's ``limit``) hold the steps kept from
    earlier chunks, then the chunk; ``limit`` and the result cover the chunk. Over the window
    (``offset_window`` steps ending ``offset_delay`` steps ago), the mean of the clipped deviations:
    a new fault neither is learnt as normal nor drags the mean. Where that reaches half the clip (an
    offset larger than one clip can learn, or a fault), the window is cut into blocks and the estimate
    refined in ``offset_rounds`` passes, each block mean clipped to ``limit`` around the estimate so
    far (a Huber-like mean): an offset that has been there all along (a GPU that always runs 10 C
    hotter) is learnt in full, while a new fault moves it only by the share of the window it has
    lasted. Also returns where the offset is known (enough compared steps in the window).
    """
    steps = limit.shape[1]
    lead = dev.shape[1] - steps
    seen = ~np.isnan(dev)
    seen_sums = _prefix(seen.astype(np.float64))
    first = np.arange(lead, lead + steps) - settings.offset_delay + 1 - settings.offset_window  # window start
    count = _block_sums(seen_sums, first, settings.offset_window, 1)[0]
    known = count >= settings.offset_min
    total = _block_sums(_prefix(clipped.astype(np.float64)), first, settings.offset_window, 1)[0]
    offset: FloatArray = np.where(known, total / np.maximum(count, 1.0), 0.0)
    refine = np.abs(offset) >= 0.5 * limit
    rows = np.flatnonzero(refine.any(axis=1))
    if rows.size:
        size = settings.offset_window // settings.offset_blocks
        sums = _block_sums(
            _prefix(np.where(seen[rows], dev[rows], 0.0).astype(np.float64)), first, size, settings.offset_blocks
        )
        counts = _block_sums(seen_sums[rows], first, size, settings.offset_blocks)
        means = sums / np.maximum(counts, 1.0)  # (blocks, rows, steps); weight 0 where a block is empty
        off, lim, least = offset[rows], limit[rows], np.maximum(count[rows], 1.0)
        for _ in range(settings.offset_rounds):
            off = (np.clip(means, off - lim, off + lim) * counts).sum(axis=0) / least
        # Only at the steps that call for it: which other steps share the chunk must not matter.
        offset[rows] = np.where(known[rows] & refine[rows], off, offset[rows])
    return offset, known


def directional(z: FloatArray, bad: Direction) -> FloatArray:
    if bad is Direction.up:
        return np.fmax(z, 0.0)
    if bad is Direction.down:
        return np.fmax(-z, 0.0)
    return np.abs(z)


def sustained(score: FloatArray, steps: int) -> FloatArray:
    """Causal median of the last ``steps`` scores: a one-step spike drops out.

    A node's scrape phase can catch the training-step rhythm at another moment than its peers',
    every few minutes: real, periodic and meaningless. A fault lasts.
    """
    if steps <= 1:
        return score
    x = np.nan_to_num(score, nan=0.0)
    layers = [np.zeros(x.shape) for _ in range(steps)]
    for k in range(min(steps, x.shape[1])):  # a window shorter than `steps` has zeros before its start
        layers[k][:, k:] = x[:, : x.shape[1] - k]
    # Sorted cell by cell by odd-even transposition (values only compared and moved: the median is
    # np.median's to the bit, 27x faster than its partition along a 3-long first axis).
    for p in range(steps):
        for i in range(p % 2, steps - 1, 2):
            layers[i], layers[i + 1] = np.minimum(layers[i], layers[i + 1]), np.maximum(layers[i], layers[i + 1])
    mid = steps // 2
    out: FloatArray = layers[mid] if steps % 2 else (layers[mid - 1] + layers[mid]) / 2
    return out


GROUPS = 3  # workload group codes below this can index a peer group (groups.py: MAIN, OTHER)


@dataclass
class _SeriesState:
    """One family's past over the offset's look-back: deviations from peers (float32: the offset's
    precision is far finer than any scale) and each peer group's scale (peer keys x GROUPS x steps),
    from which the clipped deviations are found again; the last directional scores; its peer groups'
    usual level and spread in both comparisons."""

    dev: Float32Array
    scales: FloatArray
    score: FloatArray
    usual: Usual = field(default_factory=dict)
    usual_after: Usual = field(default_factory=dict)
    smallest: FloatArray = field(default_factory=lambda: np.zeros(0))  # per peer key: least increase so far
    seen_last: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per row: a sample last step


@dataclass
class PeerState:
    """Steps scanned, the nodes' workload groups over the last ``settle`` steps, the groups they were
    compared in over the offset's look-back (-1: not compared), and each family's past."""

    steps: int = 0
    groups: IntArray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    compared: IntArray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))  # nodes' peer groups
    families: dict[str, _SeriesState] = field(default_factory=dict)


class PeerDetector:
    """Scores every comparable series against its peers (GUIDE: the one that drifts is the suspect)."""

    name = "peer"

    def __init__(self, settings: PeerSettings | None = None) -> None:
        self.settings = settings or PeerSettings()

    def scan(self, ctx: Context, state: PeerState | None) -> tuple[list[Finding], PeerState]:
        st = self.settings
        state = state or PeerState()
        # Idle nodes and nodes on work of their own (LONE) share no work with anyone: what they do
        # differs from node to node and says nothing about their health. Their hardware is still
        # watched by the counter, state, presence and agent detectors.
        groups = with_tail(state.groups, ctx.groups, MAIN)  # a node not seen before was MAIN (no level yet)
        lead = groups.shape[1] - ctx.steps
        node_groups = settled(groups, st.settle)[:, lead:]
        node_groups = np.where(np.isin(node_groups, PEER_GROUPS), node_groups, -1)
        for g in np.unique(node_groups[node_groups >= 0]):
            members = node_groups == g
            node_groups[members & (members.sum(axis=0) < st.min_nodes)] = -1
        compared = with_tail(state.compared, node_groups, -1)
        out: list[Finding] = []
        for s in ctx.series:
            if self.judges(s):
                out.extend(self._series(ctx, s, compared, state))
        state.groups = keep_tail(groups, st.settle)
        state.compared = keep_tail(compared, st.offset_window + st.offset_delay - 1)
        state.steps += ctx.steps
        return out, state

    def judges(self, s: Series) -> bool:
        """Families whose values compare across peers, with a direction that is bad (FamilyDetector)."""
        return s.family.category in COMPARED and s.family.bad is not Direction.none

    def _series(self, ctx: Context, s: Series, compared: IntArray, state: PeerState) -> list[Finding]:
        """``compared``: each node's peer group over the look-back and this chunk."""
        st = self.settings
        if s.family.unit in PER_NODE:
            s = per_node(s)
        rows, keys = s.values.shape[0], int(s.peer_key.max(initial=-1)) + 1
        past = state.families.get(s.frame.name)
        if past is None:
            past = state.families[s.frame.name] = _SeriesState(
                np.zeros((rows, 0), dtype=np.float32), np.zeros((keys, GROUPS, 0)), np.zeros((rows, 0))
            )
        node_of = np.maximum(s.node_index, 0)
        groups_all = np.where(s.node_index[:, None] >= 0, compared[node_of], -1)  # (rows, look-back + steps)
        groups = groups_all[:, groups_all.shape[1] - ctx.steps :]
        rel = st.rel_floors.get(s.family.category)
        scales = np.full((keys, GROUPS, ctx.steps), np.nan)
        quantum = self._quantum(ctx, s, past)
        _, med = peer_z(s.values, s.peer_key, groups, st, rel, past.usual, scales, quantum, scores=False)
        # Take each series' learnt offset out of its values, then compare again: a GPU that always
        # runs 5 C hotter neither stands out nor widens its peers' spread.
        dev_all = with_tail(past.dev, (s.values - med).astype(np.float32), np.nan)
        scales_all = np.concatenate([grow(past.scales, keys, np.nan), scales], axis=2)
        lead = dev_all.shape[1] - ctx.steps
        groups_all = groups_all[:, groups_all.shape[1] - dev_all.shape[1] :]
        # Each deviation clipped to its own step's limit: clip x the scale of its peer group then.
        steps_all = dev_all.shape[1]
        cell = (np.maximum(s.peer_key, 0)[:, None] * GROUPS + np.maximum(groups_all, 0)) * steps_all
        at = scales_all.reshape(-1)[cell + np.arange(steps_all)]
        limit = st.clip * np.where((groups_all >= 0) & (s.peer_key[:, None] >= 0), _nan_to_0(at), 0.0)
        clipped = np.where(np.isnan(dev_all), 0.0, np.clip(dev_all, -limit, limit)).astype(np.float32)
        offset, known = learnt_offset(dev_all, clipped, limit[:, lead:], st)
        look_back = st.offset_window + st.offset_delay - 1
        past.dev = keep_tail(dev_all, look_back)
        past.scales = scales_all[:, :, max(0, steps_all - look_back) :].copy()
        z, med = peer_z(s.values - offset, s.peer_key, groups, st, rel, past.usual_after, None, quantum, s.values)
        raw = with_tail(past.score, directional(z, s.family.bad), 0.0)
        past.score = keep_tail(raw, st.sustain - 1)
        score = sustained(raw, st.sustain)[:, raw.shape[1] - ctx.steps :]
        score[:, : max(0, st.warmup - state.steps)] = 0.0
        # A series new to its peers (a spare that joined the job) may run hotter or slower all along:
        # it is judged once its own usual offset is known.
        score[~known] = 0.0
        return emit(ctx, s, score, med, z, st.report, self.name, "vs peers")

    def _quantum(self, ctx: Context, s: Series, past: _SeriesState) -> FloatArray | None:
        """For a rate read off a counter, one event's size per second at each cell (NaN: unknown yet):
        1/step for counters of events, else the least positive rate the peer key has shown so far at a
        step that followed a sample (after a missed scrape a rate spreads one event over two steps)."""
        if s.frame.kind != "rate":
            return None
        if counts_events(s):
            return np.full(s.values.shape, 1.0 / ctx.step)
        keys = int(s.peer_key.max(initial=-1)) + 1
        smallest = grow(past.smallest, keys, np.inf).copy()
        seen = ~np.isnan(s.values)
        after = np.concatenate([grow(past.seen_last, seen.shape[0], False)[:, None], seen[:, :-1]], axis=1)
        past.seen_last = seen[:, -1].copy()
        clean = np.where(after & (np.nan_to_num(s.values) > 0), s.values, np.inf)
        out = np.full(s.values.shape, np.nan)
        for key in np.unique(s.peer_key[s.peer_key >= 0]):
            members = s.peer_key == key
            least = clean[members].min(axis=0)
            running = np.minimum.accumulate(np.r_[smallest[key], least])[1:]
            smallest[key] = running[-1]
            out[members] = np.where(np.isfinite(running), running, np.nan)
        past.smallest = smallest
        return out
