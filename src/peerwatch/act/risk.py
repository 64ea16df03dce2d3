"""Lemon risk: how likely each node is to fail next, from its fault history alone.

Faults concentrate on few machines and recur soon after repair. The model keeps, per node, its
repairs counted with exponential decay at several half-lives (an hour-scale count says "just came
back", a quarter-scale count says "keeps coming back") and scores

    risk = exp(sum_h w_h * log1p(decayed repairs_h))

a hazard relative to a node with no history (risk 1.0): risk 12 means twelve times as likely as a
clean node to be the next to fail. The weights are fitted by Cox partial likelihood: at each past
fault, the failing node against every node that was up. A node that is down cannot fail again until
it returns, so it is scored as if repaired now (its risk on return); rankings leave it out.

This is the model behind ``peerwatch_node_risk{node}``; :class:`RiskModel` is incremental
(``observe`` events as they happen, ``scores`` at any later time).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from peerwatch.act.history import DAY, END, START, Availability, FaultEvent, FaultHistory, instants
from peerwatch.model import FloatArray


@dataclass(frozen=True, slots=True)
class RiskParams:
    """Half-lives of the decayed repair counts (days; ``inf`` = all-time count) and their weights."""

    half_lives_days: tuple[float, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.half_lives_days) != len(self.weights) or not self.weights:
            raise ValueError("RiskParams needs one weight per half-life, and at least one")
        if any(not h > 0 for h in self.half_lives_days):
            raise ValueError(f"half-lives must be positive days, got {self.half_lives_days}")
        if any(not math.isfinite(w) for w in self.weights):
            raise ValueError(f"weights must be finite, got {self.weights}")


# Chosen by `select_risk_params` on the first half of the InfiniteHBD trace (days 3.9-176.4):
# half-life set and ridge by partial likelihood on that half's second quarter, weights refitted on
# the whole first half. Nothing from the second half was used. See docs/fleet.md.
DEFAULT_PARAMS = RiskParams(half_lives_days=(0.25, 7.0, 90.0, math.inf), weights=(4.5145, 1.6939, 2.5104, -2.0068))

CANDIDATE_HALF_LIVES: tuple[tuple[float, ...], ...] = (
    (0.25, 7.0, 90.0),
    (0.25, 7.0, 90.0, math.inf),
    (0.25, 2.0, 14.0, 90.0),
    (1 / 24, 0.25, 2.0, 14.0, 90.0),
    (1 / 24, 0.25, 2.0, 14.0, 90.0, math.inf),
    (1 / 24, 0.25, 1.0, 7.0, 30.0, 365.0),
)
CANDIDATE_RIDGES = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


class RiskModel:
    """Incremental lemon risk over a fleet; feed events in time order with :meth:`observe`."""

    def __init__(self, params: RiskParams = DEFAULT_PARAMS, nodes: Iterable[str] = ()) -> None:
        self.params = params
        self._rate: FloatArray = np.log(2.0) / (np.asarray(params.half_lives_days, dtype=np.float64) * DAY)
        self._weights: FloatArray = np.asarray(params.weights, dtype=np.float64)
        self._index: dict[str, int] = {}
        self._decayed: FloatArray = np.zeros((0, len(self._rate)))  # repairs, decayed to _updated
        self._updated: FloatArray = np.zeros(0)
        self._down = Availability()
        self._last_ts = -math.inf
        for node in nodes:
            self._slot(node)

    @property
    def nodes(self) -> list[str]:
        return list(self._index)

    def observe(self, event: FaultEvent) -> None:
        """Take one event; events must come in time order (equal times in any order)."""
        if event.ts < self._last_ts:
            raise ValueError(f"event at {event.ts} for {event.node} is older than one already observed")
        self._last_ts = event.ts
        k = self._slot(event.node)
        self._down.observe(event)
        if event.kind == END:
            self._decayed[k] = self._decayed[k] * self._decay(event.ts - self._updated[k]) + 1.0
            self._updated[k] = event.ts

    def is_down(self, node: str) -> bool:
        return self._down.is_down(node)

    def features(self, at_ts: float) -> FloatArray:
        """log1p of each node's decayed repair counts at ``at_ts``: shape (nodes, half-lives)."""
        n = len(self._index)
        age = np.maximum(at_ts - self._updated[:n], 0.0)
        counts: FloatArray = self._decayed[:n] * np.exp(-age[:, None] * self._rate)
        for node in self._down.down():  # scored as if repaired now: its risk on return
            counts[self._index[node]] += 1.0
        return np.log1p(counts)

    def risk(self, at_ts: float) -> FloatArray:
        """Relative hazard of every node (order of :attr:`nodes`)."""
        return np.exp(self.features(at_ts) @ self._weights)

    def scores(self, at_ts: float) -> dict[str, float]:
        """Risk of every node at ``at_ts`` (1.0 = a node with no history)."""
        return dict(zip(self._index, self.risk(at_ts).tolist(), strict=True))

    def ranked(self, at_ts: float, include_down: bool = False) -> list[tuple[str, float]]:
        """Nodes by falling risk (ties by name); down nodes only with ``include_down``."""
        pairs = [(n, s) for n, s in self.scores(at_ts).items() if include_down or not self._down.is_down(n)]
        return sorted(pairs, key=lambda p: (-p[1], p[0]))

    def _decay(self, age: float) -> FloatArray:
        return np.exp(-max(age, 0.0) * self._rate)

    def _slot(self, node: str) -> int:
        k = self._index.get(node)
        if k is None:
            k = self._index[node] = len(self._index)
            if k == len(self._updated):  # grow by doubling: adding a node stays cheap on big fleets
                self._decayed = np.vstack([self._decayed, np.zeros((max(k, 16), len(self._rate)))])
                self._updated = np.concatenate([self._updated, np.zeros(max(k, 16))])
        return k


@dataclass(frozen=True, slots=True)
class RiskSets:
    """Fitting data: at each fault, every node's features, who was up, and who failed."""

    features: FloatArray  # (faults, nodes, half-lives)
    up: npt.NDArray[np.bool_]  # (faults, nodes)
    failed: npt.NDArray[np.intp]  # (faults,)
    ts: FloatArray  # (faults,)


def risk_sets(history: FaultHistory, half_lives_days: Sequence[float], until_ts: float = math.inf) -> RiskSets:
    """Replay ``history`` and collect the risk set of each fault before ``until_ts``.

    Faults at one instant are scored from the state before that instant (they do not see each
    other); faults on a node already down are left out (it was not at risk).
    """
    params = RiskParams(tuple(half_lives_days), (0.0,) * len(half_lives_days))
    model = RiskModel(params, history.nodes)
    where = {n: i for i, n in enumerate(model.nodes)}
    feats, ups, failed, times = [], [], [], []
    for ts, group in instants(history.events):
        if ts >= until_ts:
            break
        starts = [e for e in group if e.kind == START and not model.is_down(e.node)]
        if starts:
            x = model.features(ts)
            up = np.array([not model.is_down(n) for n in model.nodes])
            for e in starts:
                feats.append(x)
                ups.append(up)
                failed.append(where[e.node])
                times.append(ts)
        for e in group:
            model.observe(e)
    width = (len(history.nodes), len(half_lives_days))
    return RiskSets(
        np.array(feats).reshape(-1, *width),
        np.array(ups, dtype=bool).reshape(-1, width[0]),
        np.array(failed, dtype=np.intp),
        np.array(times, dtype=np.float64),
    )


def partial_log_likelihood(sets: RiskSets, weights: FloatArray) -> float:
    """Mean Cox partial log-likelihood per fault (higher is better)."""
    if not len(sets.failed):
        return 0.0
    z = np.where(sets.up, sets.features @ weights, -np.inf)
    top = z.max(axis=1)
    chosen = z[np.arange(len(sets.failed)), sets.failed]
    return float(np.mean(chosen - top - np.log(np.exp(z - top[:, None]).sum(axis=1))))


def fit_weights(sets: RiskSets, ridge: float) -> FloatArray:
    """Maximise partial likelihood minus ``ridge/2·|w|²`` by damped Newton steps."""
    x, n, dim = sets.features, len(sets.failed), sets.features.shape[2]
    w = np.zeros(dim)

    def objective(v: FloatArray) -> float:
        return partial_log_likelihood(sets, v) * n - 0.5 * ridge * float(v @ v)

    for _ in range(100):
        z = np.where(sets.up, x @ w, -np.inf)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        mean = np.einsum("en,enh->eh", p, x)
        grad = (x[np.arange(n), sets.failed] - mean).sum(axis=0) - ridge * w
        hess = np.einsum("en,eni,enj->ij", p, x, x) - mean.T @ mean + ridge * np.eye(dim)
        step, size, before = np.linalg.solve(hess, grad), 1.0, objective(w)
        while objective(w + size * step) < before and size > 1e-6:
            size /= 2
        w = w + size * step
        if float(np.abs(size * step).max()) < 1e-9:
            break
    return w


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate of the selection and its validation partial log-likelihood."""

    half_lives_days: tuple[float, ...]
    ridge: float
    validation_loglik: float


def select_risk_params(
    history: FaultHistory,
    until_ts: float,
    half_life_sets: Sequence[tuple[float, ...]] = CANDIDATE_HALF_LIVES,
    ridges: Sequence[float] = CANDIDATE_RIDGES,
) -> tuple[RiskParams, list[Candidate]]:
    """Choose half-lives and ridge using only events before ``until_ts``, then fit the weights.

    Each candidate is fitted on the first half of ``[start, until_ts)`` and judged by partial
    likelihood on the second half; the winner is refitted on the whole of ``[start, until_ts)``.
    """
    start = history.span()[0]
    middle = start + (until_ts - start) / 2
    union = sorted({h for hs in half_life_sets for h in hs})
    sets = risk_sets(history, union, until_ts)
    early, late = _window(sets, sets.ts < middle), _window(sets, sets.ts >= middle)
    if not len(early.failed) or not len(late.failed):
        raise ValueError("too few faults before until_ts to select risk parameters")
    table = []
    for hs in half_life_sets:
        cols = [union.index(h) for h in hs]
        for ridge in ridges:
            w = fit_weights(_columns(early, cols), ridge)
            table.append(Candidate(tuple(hs), ridge, partial_log_likelihood(_columns(late, cols), w)))
    best = max(table, key=lambda c: c.validation_loglik)
    w = fit_weights(_columns(sets, [union.index(h) for h in best.half_lives_days]), best.ridge)
    return RiskParams(best.half_lives_days, tuple(round(float(v), 4) for v in w)), table


def _window(sets: RiskSets, mask: npt.NDArray[np.bool_]) -> RiskSets:
    return RiskSets(sets.features[mask], sets.up[mask], sets.failed[mask], sets.ts[mask])


def _columns(sets: RiskSets, cols: list[int]) -> RiskSets:
    return RiskSets(sets.features[:, :, cols], sets.up, sets.failed, sets.ts)
