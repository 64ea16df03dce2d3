"""Slow accumulation: a hardware error counter that grows on one entity, a few increases an hour, for hours.

The counter detector looks back 20 steps: one increase every 15-30 minutes is an isolated tick there,
however long it goes on. This detector counts each counter's *distinct* increases (steps at which it
rose; a jump of 50 rows at once is one event) over long windows (an hour, four hours) and asks how
unlikely that many are given the base rate its peers show over the same window: a Poisson tail, with
a floor for a rate nobody has shown (one increase a day per entity: remapped rows, retired pages and
ECC counts are far rarer than that on healthy hardware). The families are the catalogue's error
counters of device units (GPUs, their links, NVSwitches, IB ports, PCIe functions, disks).

Score: ``per_decade`` points per decade of the tail probability, so that 1e-5 reaches the policy's 6:
three increases within an hour, or five within four, against the floor. At least ``min_increases``.
Corroboration: the same entity's temperature (a GPU's and its HBM's) rising against the node's other
entities (its residual's newest 15-minute mean above the one 1 h 45 min before) adds a point a degree, up to
``temp_cap``; a failing HBM stack runs warmer. Capped below the policy's sure 15: an accumulation is
a precursor, not a failure.

Only increases within the data count: a count held for months is a level, not news; a reset (reboot,
driver reload) restarts from zero as ``increments`` has it; a missed scrape is unknown and the
increase across it counts once, at the next scrape. Early in a run the window is what data exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from peerwatch.catalog.schema import Category, Direction, Unit
from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.detect.counters import increments
from peerwatch.detect.poisson import poisson_surprise
from peerwatch.detect.stream import grow
from peerwatch.detect.temporal import node_groups, node_reference, per_row
from peerwatch.model import Evidence, Finding, FloatArray

UNITS = frozenset({Unit.gpu, Unit.gpu_link, Unit.nvswitch, Unit.ib_port, Unit.pci_device, Unit.disk})
TEMP_UNITS = frozenset({Unit.gpu, Unit.nvswitch})  # several alike on a node: each compared with the rest
DAY = 86_400.0


@dataclass(frozen=True)
class AccumulationSettings:
    windows: tuple[float, ...] = (3600.0, 7200.0, 14400.0)  # seconds: a few increases an hour; slower over two, four
    floor_per_day: float = 1.0  # base rate per entity where the peers show less (or there are too few of them)
    min_peers: int = 4  # fewer other entities with the same peer key: their rate says nothing
    min_increases: int = 2  # one event, however large, is not a growth
    per_decade: float = 1.25  # per decade of the Poisson tail: three in an hour against the floor (1.2e-5) -> 6
    temp_block: float = 900.0  # seconds: the temperature's rise is its newest block's mean minus the oldest's
    temp_blocks: int = 8  # of this many: 1 h 45 min apart
    temp_quantum: float = 1.0  # [°C] sensors report whole degrees, less is no rise
    temp_per_degree: float = 1.0  # [score/°C] added per degree the entity's temperature rose against the node's others
    temp_cap: float = 3.0  # at most this much added by the temperature
    min_entities: int = 4  # entities of a node reporting at a step for its median to count
    report: float = 4.0  # scores below are not findings
    cap: float = 12.0  # a precursor: never the policy's sure 15
    units: frozenset[Unit] = UNITS  # catalogue units whose error counters are watched


@dataclass
class Events:
    """A counter frame's increases within the longest window before the next chunk: row, step of the run,
    amount; and each row's last present value (raw counter frames, else None)."""

    rows: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    steps: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    amounts: FloatArray = field(default_factory=lambda: np.zeros(0))
    last: FloatArray | None = None


@dataclass(frozen=True)
class Scores:
    """Per cell: the score before corroboration, and the window that gave it with its count, amount
    and expected count (window -1 where no score)."""

    score: FloatArray
    window: IntArray
    count: FloatArray
    amount: FloatArray
    expected: FloatArray


def accumulation_scores(
    inc: FloatArray, peer_key: IntArray, step: float, settings: AccumulationSettings, past: Events, start: int
) -> tuple[Scores, Events]:
    """Scores of a chunk of increases (rows x steps, NaN unknown) beginning at step ``start`` of the run, given
    the increases before it; and the increases to carry."""
    rows, n = inc.shape
    sizes = [max(1, round(w / step)) for w in settings.windows]
    longest = max(sizes)
    up = np.nan_to_num(inc, nan=0.0) > 0
    r_new, c_new = np.nonzero(up)
    ev_rows = np.concatenate([past.rows, r_new])
    ev_steps = np.concatenate([past.steps, start + c_new])
    ev_amounts = np.concatenate([past.amounts, inc[r_new, c_new]])
    keep = ev_steps > start + n - 1 - longest
    carried = Events(ev_rows[keep], ev_steps[keep], ev_amounts[keep])
    shape = (rows, n)
    out = Scores(np.zeros(shape), np.full(shape, -1), np.zeros(shape), np.zeros(shape), np.zeros(shape))
    active, where = np.unique(ev_rows, return_inverse=True)
    if active.size == 0:
        return out, carried
    # Only rows that increased lately: a dense block of them over the longest window and the chunk.
    lo = start - longest
    hits = np.zeros((active.size, longest + n))
    total = np.zeros((active.size, longest + n))
    np.add.at(hits, (where, ev_steps - lo), 1.0)
    np.add.at(total, (where, ev_steps - lo), ev_amounts)
    csum = np.concatenate([np.zeros((active.size, 1)), np.cumsum(hits, axis=1)], axis=1)
    asum = np.concatenate([np.zeros((active.size, 1)), np.cumsum(total, axis=1)], axis=1)
    key = peer_key[active]
    watched = peer_key >= 0
    members = np.bincount(peer_key[watched], minlength=int(peer_key.max(initial=0)) + 1)
    others = np.where(key >= 0, members[np.maximum(key, 0)] - 1, 0)
    floor = settings.floor_per_day * step / DAY
    t = start + np.arange(n)
    end = longest + np.arange(n) + 1  # csum column after each chunk step
    best = np.zeros((active.size, n))
    for i, w in enumerate(sizes):
        count = csum[:, end] - csum[:, end - w]
        amount = asum[:, end] - asum[:, end - w]
        seen = np.minimum(w, t + 1).astype(np.float64)  # steps of data in the window so far
        # The peers' rate: their increases in the same window, per entity and step (the row itself out).
        peers = np.zeros((int(key.max(initial=0)) + 1, n))
        np.add.at(peers, np.maximum(key, 0), np.where(key[:, None] >= 0, count, 0.0))
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = (peers[np.maximum(key, 0)] - count) / (np.maximum(others, 1)[:, None] * seen)
        rate = np.where((others >= settings.min_peers)[:, None], rate, 0.0)
        mu = seen * np.fmax(rate, floor)
        score = np.zeros((active.size, n))
        test = (count >= settings.min_increases) & (count > mu) & (key >= 0)[:, None]
        if test.any():
            score[test] = settings.per_decade * poisson_surprise(count[test], mu[test])
        better = score > best
        best = np.where(better, score, best)
        out.window[active] = np.where(better, i, out.window[active])
        out.count[active] = np.where(better, count, out.count[active])
        out.amount[active] = np.where(better, amount, out.amount[active])
        out.expected[active] = np.where(better, mu, out.expected[active])
    out.score[active] = best
    return out, carried


@dataclass
class Warmth:
    """A temperature family's residuals (value minus its node's median) per row: the means of its last complete
    blocks, oldest first (NaN: under half known), and the current block's sum and count so far."""

    blocks: FloatArray
    total: FloatArray = field(default_factory=lambda: np.zeros(0))
    count: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    group: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))  # node_groups, while rows hold


def temperature_rise(s: Series, past: Warmth, start: int, step: float, settings: AccumulationSettings) -> FloatArray:
    """Each entity's rise against the median of its node's alike entities: its newest complete block's mean
    minus the oldest of ``temp_blocks`` (NaN where unknown), for the chunk beginning at step ``start`` of the run.
    Blocks are fixed steps of the run and summed step by step: the same bits however the run is cut, and a
    few numbers a row whatever the span."""
    if past.group.size != s.values.shape[0]:
        past.group = node_groups(s)
    med, idx = node_reference(s.values, past.group, settings.min_entities)
    resid = s.values - per_row(med, idx, np.nan)
    rows, size = resid.shape[0], max(1, round(settings.temp_block / step))
    blocks = grow(past.blocks, rows, np.nan)
    total, count = grow(past.total, rows, 0.0), grow(past.count, rows, 0)
    out = np.full(resid.shape, np.nan)
    for j in range(resid.shape[1]):
        x = resid[:, j]
        ok = ~np.isnan(x)
        total, count = total + np.where(ok, x, 0.0), count + ok
        if (start + j + 1) % size == 0:  # a block complete: it joins the newest, the oldest leaves
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = np.where(2 * count >= size, total / count, np.nan)
            blocks = np.concatenate([blocks[:, 1:], mean[:, None]], axis=1)
            total, count = np.zeros(rows), np.zeros(rows, np.int64)
        out[:, j] = blocks[:, -1] - blocks[:, 0]
    past.blocks, past.total, past.count = blocks, total, count
    return out


@dataclass
class AccumulationState:
    """Steps scanned, each counter frame's recent increases, each temperature family's smoothed residuals, and
    which temperature row is each counter row's entity (by counter and temperature frame, while rows hold)."""

    steps: int = 0
    events: dict[str, Events] = field(default_factory=dict)
    temps: dict[str, Warmth] = field(default_factory=dict)
    links: dict[tuple[str, str], tuple[int, int, IntArray]] = field(default_factory=dict)


def _entities(s: Series) -> dict[tuple[int, str], int]:
    return {(int(n), c): r for r, (n, c) in enumerate(zip(s.node_index, s.components, strict=True)) if n >= 0}


def _link(state: AccumulationState, s: Series, t: Series) -> IntArray:
    """Row of ``t`` on the entity of each row of ``s`` (-1: none), rebuilt only when either gains rows."""
    sizes = (s.values.shape[0], t.values.shape[0])
    got = state.links.get((s.frame.name, t.frame.name))
    if got is None or got[:2] != sizes:
        rows = _entities(t)
        index = np.array([rows.get((int(n), c), -1) for n, c in zip(s.node_index, s.components, strict=True)])
        got = state.links[(s.frame.name, t.frame.name)] = (*sizes, index.astype(np.int64))
    return got[2]


class AccumulationDetector:
    """Scores error counters that keep growing on one entity over hours while its peers stay flat."""

    name = "accumulation"

    def __init__(self, settings: AccumulationSettings | None = None) -> None:
        self.settings = settings or AccumulationSettings()

    def scan(self, ctx: Context, state: AccumulationState | None) -> tuple[list[Finding], AccumulationState]:
        st = self.settings
        state = state or AccumulationState()
        rises: list[tuple[Series, FloatArray]] = []
        for t in ctx.series:
            if (
                t.family.category is Category.temperature
                and t.family.unit in TEMP_UNITS
                and t.family.bad is Direction.up
                and t.frame.kind == "gauge"
            ):
                warmth = state.temps.setdefault(t.frame.name, Warmth(np.zeros((0, st.temp_blocks))))
                rises.append((t, temperature_rise(t, warmth, state.steps, ctx.step, st)))
        out: list[Finding] = []
        for s in ctx.series:
            if s.family.category is not Category.error_counter or s.family.unit not in st.units:
                continue
            past = state.events.get(s.frame.name) or Events()
            inc, last = increments(s, ctx.step, past.last)
            scores, state.events[s.frame.name] = accumulation_scores(inc, s.peer_key, ctx.step, st, past, state.steps)
            state.events[s.frame.name].last = last
            rows, cols = np.nonzero(scores.score > 0)
            if rows.size == 0:
                continue
            warm = np.full(rows.size, np.nan)
            for t, rise in rises:
                row = _link(state, s, t)[rows]
                warm = np.fmax(warm, np.where(row >= 0, rise[np.maximum(row, 0), cols], np.nan))
            out.extend(self._findings(ctx, s, scores, rows, cols, warm))
        state.steps += ctx.steps
        return out, state

    def _findings(
        self, ctx: Context, s: Series, sc: Scores, rows: IntArray, cols: IntArray, warm: FloatArray
    ) -> list[Finding]:
        st = self.settings
        with np.errstate(invalid="ignore"):
            bonus = np.where(warm >= st.temp_quantum, np.fmin(st.temp_cap, st.temp_per_degree * warm), 0.0)
        score = np.fmin(st.cap, sc.score[rows, cols] + bonus)
        out = []
        for r, c, x, w in zip(rows.tolist(), cols.tolist(), score.tolist(), warm.tolist(), strict=True):
            if x < st.report or s.node_index[r] < 0:
                continue
            n, amount, mu = float(sc.count[r, c]), float(sc.amount[r, c]), float(sc.expected[r, c])
            hours = st.windows[int(sc.window[r, c])] / 3600.0
            note = f"increases in {hours:g} h ({amount:.3g} in all), {mu:.2g} expected at the peers' rate"
            if w == w:
                note += f"; temperature {w:+.1f} C against the node's other entities"
            out.append(
                Finding(
                    ts=float(ctx.start + c * ctx.step),
                    node=ctx.nodes[int(s.node_index[r])],
                    component=s.components[r],
                    detector=self.name,
                    signal=s.frame.name,
                    score=x,
                    evidence=Evidence(s.frame.name, s.frame.keys[r].labels, n, mu, None, f"{n:g} {note}"),
                )
            )
        return out
