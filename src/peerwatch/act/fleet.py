"""Fleet view of a fault history: is the risk ranking any good, who are the lemons, how many spares.

:func:`evaluate_ranking` replays a history in time order and, just before each fault, asks whether
the failing node was among the top 5% / 10% by score, using only earlier events. Ties are counted
as fractional hits (the expected hit under a random tie-break), so "random ranking" is a constant
score and scores exactly k / (nodes up). Nodes that are down cannot fail again until they return,
so they are left out of the ranking (for every ranker alike); a fault recorded on a node that was
already down counts as a miss.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from peerwatch.act.history import DAY, START, Availability, FaultEvent, FaultHistory, instants
from peerwatch.act.risk import DEFAULT_PARAMS, RiskModel, RiskParams
from peerwatch.model import FloatArray

WEEK = 7 * DAY


class Ranker(Protocol):
    """Anything that learns from events and scores nodes (higher = more likely to fail next)."""

    def observe(self, event: FaultEvent) -> None: ...

    def scores(self, at_ts: float) -> Mapping[str, float]: ...


RankerFactory = Callable[[Sequence[str]], Ranker]


class CountRanker:
    """Baseline: faults each node has had so far, all time."""

    def __init__(self, nodes: Sequence[str] = ()) -> None:
        self._count: Counter[str] = Counter()

    def observe(self, event: FaultEvent) -> None:
        if event.kind == START:
            self._count[event.node] += 1

    def scores(self, at_ts: float) -> Mapping[str, float]:
        return {n: float(c) for n, c in self._count.items()}


class RandomRanker:
    """Baseline: every node alike; with fractional ties this is the exact random-ranking expectation."""

    def __init__(self, nodes: Sequence[str] = ()) -> None:
        pass

    def observe(self, event: FaultEvent) -> None:
        pass

    def scores(self, at_ts: float) -> Mapping[str, float]:
        return {}


def risk_ranker(params: RiskParams = DEFAULT_PARAMS) -> RankerFactory:
    """Factory of :class:`RiskModel` rankers with ``params``."""
    return lambda nodes: RiskModel(params, nodes)


BASELINES: dict[str, RankerFactory] = {"random": RandomRanker, "fault count so far": CountRanker}


@dataclass(frozen=True, slots=True)
class RankingScore:
    """Per-fault hits of a ranker: ``hits[i, j]`` is the (fractional) hit of fault i in the top ``top_k[j]``."""

    top_k: tuple[int, ...]
    fault_ts: FloatArray
    hits: FloatArray
    on_down: npt.NDArray[np.bool_]  # the fault struck a node already down: a miss by construction

    @property
    def faults(self) -> int:
        return len(self.fault_ts)

    def rates(self) -> tuple[float, ...]:
        """Hit rate per ``top_k`` (NaN when there is no fault)."""
        if not self.faults:
            return tuple(math.nan for _ in self.top_k)
        return tuple(float(v) for v in self.hits.mean(axis=0))

    def window(self, start: float = -math.inf, end: float = math.inf) -> RankingScore:
        """The faults with ``start <= ts < end``."""
        keep = (self.fault_ts >= start) & (self.fault_ts < end)
        return RankingScore(self.top_k, self.fault_ts[keep], self.hits[keep], self.on_down[keep])


def evaluate_ranking(
    history: FaultHistory,
    model_factory: RankerFactory,
    fractions: Sequence[float] = (0.05, 0.10),
    exclude_down: bool = True,
) -> RankingScore:
    """Replay ``history``; before each fault, rank the fleet with what the model knows so far.

    Faults at one instant are all scored before any of them is shown to the model. Nodes missing
    from a model's scores score 0. Top-k sizes are ``fractions`` of the whole fleet.
    """
    nodes = list(history.nodes)
    where = {n: i for i, n in enumerate(nodes)}
    top_k = tuple(max(1, round(f * len(nodes))) for f in fractions)
    k = np.asarray(top_k, dtype=np.float64)
    model, avail = model_factory(nodes), Availability()
    times: list[float] = []
    hits: list[FloatArray] = []
    on_down: list[bool] = []
    for ts, group in instants(history.events):
        starts = [e for e in group if e.kind == START]
        if starts:
            table = model.scores(ts)
            score = np.array([table.get(n, 0.0) for n in nodes])
            up = np.array([not avail.is_down(n) for n in nodes]) if exclude_down else np.ones(len(nodes), bool)
            for e in starts:
                times.append(ts)
                on_down.append(not up[where[e.node]])
                if on_down[-1]:
                    hits.append(np.zeros(len(k)))
                    continue
                mine = score[where[e.node]]
                above = np.count_nonzero(up & (score > mine))
                tied = np.count_nonzero(up & (score == mine))
                hits.append(np.clip(k - above, 0, tied) / tied)
        for e in group:
            model.observe(e)
            avail.observe(e)
    return RankingScore(top_k, np.array(times), np.array(hits).reshape(-1, len(k)), np.array(on_down, dtype=bool))


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """Hit rates of one ranker over one window of the history."""

    ranker: str
    window: str
    faults: int
    top_k: tuple[int, ...]
    rates: tuple[float, ...]


def compare_rankers(
    history: FaultHistory,
    rankers: Mapping[str, RankerFactory],
    split_ts: float | None = None,
    fractions: Sequence[float] = (0.05, 0.10),
    exclude_down: bool = True,
) -> list[ComparisonRow]:
    """Hit rates of each ranker on the first half, the second half (split at ``split_ts``, default
    the middle of the history's span) and the whole history."""
    first, last = history.span()
    split = (first + last) / 2 if split_ts is None else split_ts
    rows = []
    for name, factory in rankers.items():
        score = evaluate_ranking(history, factory, fractions, exclude_down)
        for label, part in (
            ("first half", score.window(end=split)),
            ("second half", score.window(start=split)),
            ("whole", score),
        ):
            rows.append(ComparisonRow(name, label, part.faults, part.top_k, part.rates()))
    return rows


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node's standing in the report."""

    node: str
    risk: float
    faults: int
    last_fault_ts: float | None
    down: bool
    components: tuple[tuple[str, int], ...]  # most frequent first


@dataclass(frozen=True, slots=True)
class DownStats:
    """How many nodes were down at once, weighted by time, and a timeline (max per bin)."""

    peak: int
    peak_ts: float
    mean: float
    p95: float
    p99: float
    timeline: tuple[int, ...]
    bin_seconds: float


@dataclass(frozen=True, slots=True)
class FleetReport:
    """Everything ``peerwatch fleet report`` shows."""

    source: str
    fleet_size: int
    start_ts: float
    at_ts: float
    faults: int
    nodes_faulted: int
    lemons: tuple[NodeRecord, ...]
    trusted: tuple[str, ...]
    trusted_days: float
    down: DownStats
    weekly_failing_fraction: tuple[float, ...]  # distinct nodes failing per week / fleet
    spares_p99: int
    spares_peak: int
    rule_of_thumb: tuple[int, int]  # 10% and 20% of the fleet
    rule_of_thumb_coverage: float  # share of time 10% spares would have covered every down node
    notes: tuple[str, ...] = field(default=())


def concurrent_down(history: FaultHistory) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """Step function of nodes down at once: ``counts[i]`` holds from ``times[i]`` to ``times[i+1]``."""
    avail = Availability()
    times, counts = [], []
    for ts, group in instants(history.events):
        for e in group:
            avail.observe(e)
        times.append(ts)
        counts.append(len(avail.down()))
    return np.array(times, dtype=np.float64), np.array(counts, dtype=np.int64)


def down_stats(times: FloatArray, counts: npt.NDArray[np.int64], end: float, bins: int = 60) -> DownStats:
    """Time-weighted distribution of the concurrent-down step function up to ``end``."""
    if not len(times) or end <= times[0]:
        return DownStats(int(counts.max(initial=0)), float(times[0]) if len(times) else end, 0.0, 0.0, 0.0, (), 0.0)
    span = np.diff(np.append(times, max(end, times[-1])))
    order = np.argsort(counts, kind="stable")
    cum = np.cumsum(span[order]) / span.sum()
    quantile = {q: float(counts[order][np.searchsorted(cum, q)]) for q in (0.95, 0.99)}
    edges = np.linspace(times[0], end, bins + 1)
    # max per bin: the level entering the bin and every level set inside it
    entering = counts[np.clip(np.searchsorted(times, edges[:-1], side="right") - 1, 0, None)]
    inside = np.searchsorted(edges, times, side="right") - 1
    peak_bin = entering.copy()
    np.maximum.at(peak_bin, np.clip(inside, 0, bins - 1), counts)
    i = int(np.argmax(counts))
    return DownStats(
        int(counts[i]),
        float(times[i]),
        float((counts * span).sum() / span.sum()),
        quantile[0.95],
        quantile[0.99],
        tuple(int(v) for v in peak_bin),
        float(edges[1] - edges[0]),
    )


def fleet_report(
    history: FaultHistory,
    params: RiskParams = DEFAULT_PARAMS,
    at_ts: float | None = None,
    lemons: int = 10,
    trusted_days: float = 90.0,
    bins: int = 60,
) -> FleetReport:
    """Lemons (highest risk at ``at_ts``), trusted pool, concurrent-down statistics and spare advice.

    ``at_ts`` defaults to the last event; events after it are ignored.
    """
    first, last = history.span()
    at = last if at_ts is None else at_ts
    events = [e for e in history.events if e.ts <= at]
    past = FaultHistory(tuple(events), history.nodes, history.source)
    model = RiskModel(params, history.nodes)
    for e in events:
        model.observe(e)
    starts = [e for e in events if e.kind == START]
    count = Counter(e.node for e in starts)
    last_fault = {e.node: e.ts for e in starts}
    parts: dict[str, Counter[str]] = {}
    for e in starts:
        parts.setdefault(e.node, Counter())[e.component or "?"] += 1
    records = [
        NodeRecord(n, s, count[n], last_fault.get(n), model.is_down(n), tuple(parts.get(n, Counter()).most_common()))
        for n, s in model.ranked(at, include_down=True)
    ]
    recent = at - trusted_days * DAY
    trusted = tuple(sorted(n for n in history.nodes if last_fault.get(n, -math.inf) < recent and not model.is_down(n)))
    times, counts = concurrent_down(past)
    down = down_stats(times, counts, at, bins)
    size = max(history.fleet_size, 1)
    notes = []
    if len(history.nodes) > len({e.node for e in history.events}):
        notes.append(f"{len(history.nodes) - len({e.node for e in history.events})} nodes have no recorded event")
    return FleetReport(
        history.source,
        history.fleet_size,
        first,
        at,
        len(starts),
        len(count),
        tuple(r for r in records[:lemons] if r.faults),
        trusted,
        trusted_days,
        down,
        _weekly_failing(starts, first, at, size),
        math.ceil(down.p99),
        down.peak,
        (math.ceil(0.10 * size), math.ceil(0.20 * size)),
        _coverage(times, counts, at, 0.10 * size),
        tuple(notes),
    )


def _weekly_failing(starts: Sequence[FaultEvent], first: float, end: float, size: int) -> tuple[float, ...]:
    """Distinct nodes with a fault in each whole week from ``first``, as a fraction of the fleet."""
    weeks = int((end - first) // WEEK)
    failing: list[set[str]] = [set() for _ in range(weeks)]
    for e in starts:
        w = int((e.ts - first) // WEEK)
        if w < weeks:
            failing[w].add(e.node)
    return tuple(len(s) / size for s in failing)


def _coverage(times: FloatArray, counts: npt.NDArray[np.int64], end: float, spares: float) -> float:
    if not len(times) or end <= times[0]:
        return 1.0
    span = np.diff(np.append(times, end))
    return float(span[counts <= spares].sum() / span.sum())
