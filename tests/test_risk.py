"""Risk model: incremental state against a direct computation, ranking rules, fitting honesty."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from peerwatch.act.history import DAY, END, START, FaultEvent, FaultHistory, load_history, make_history
from peerwatch.act.risk import (
    DEFAULT_PARAMS,
    RiskModel,
    RiskParams,
    fit_weights,
    partial_log_likelihood,
    risk_sets,
    select_risk_params,
)

T0 = 1_700_000_000.0
PARAMS = RiskParams((0.25, 7.0, math.inf), (2.0, 1.0, 0.5))


def trace(shared_data: Path) -> FaultHistory:
    return load_history(shared_data / "infinitehbd-trace" / "fault_trace.json")


def outage(node: str, start_day: float, days: float = 0.5) -> list[FaultEvent]:
    return [FaultEvent(T0 + start_day * DAY, node, START), FaultEvent(T0 + (start_day + days) * DAY, node, END)]


def random_history(seed: int, nodes: int = 12, faults: int = 40) -> FaultHistory:
    rng = np.random.default_rng(seed)
    events: list[FaultEvent] = []
    busy_until: dict[str, float] = {}
    for day in np.sort(rng.uniform(0, 200, faults)):
        node = f"n{int(rng.integers(nodes)):02d}"
        if busy_until.get(node, -1.0) < day:
            length = float(rng.exponential(2.0))
            events += outage(node, float(day), length)
            busy_until[node] = day + length
    return make_history(events, nodes)


def direct_counts(events: list[FaultEvent], nodes: tuple[str, ...], at: float) -> dict[str, np.ndarray]:
    """Decayed repair counts straight from the definition (a down node counts as repaired at ``at``)."""
    half_lives = np.array(PARAMS.half_lives_days) * DAY
    out = {n: np.zeros(len(half_lives)) for n in nodes}
    open_faults = dict.fromkeys(nodes, 0)
    for e in events:
        open_faults[e.node] += 1 if e.kind == START else -1
        if e.kind == END:
            out[e.node] += np.exp2(-(at - e.ts) / half_lives)
    for n in nodes:
        out[n] += open_faults[n] > 0
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_state_matches_definition_on_every_prefix(seed: int) -> None:
    history = random_history(seed)
    model = RiskModel(PARAMS, history.nodes)
    for i, event in enumerate(history.events):
        model.observe(event)
        at = event.ts + 0.3 * DAY
        counts = direct_counts(list(history.events[: i + 1]), history.nodes, at)
        expected = {n: math.exp(float(np.log1p(counts[n]) @ np.array(PARAMS.weights))) for n in history.nodes}
        got = model.scores(at)
        assert got.keys() == expected.keys()
        assert all(got[n] == pytest.approx(expected[n], rel=1e-9) for n in got), f"after event {i}"


def test_clean_node_scores_one_and_recent_repair_scores_higher() -> None:
    model = RiskModel(DEFAULT_PARAMS, ["clean", "old", "recent"])
    for e in sorted(outage("old", 0) + outage("recent", 100), key=lambda e: e.ts):
        model.observe(e)
    scores = model.scores(T0 + 101 * DAY)
    assert scores["clean"] == 1.0
    assert scores["recent"] > scores["old"]
    assert model.ranked(T0 + 101 * DAY)[0][0] == "recent"


def test_down_node_is_scored_as_on_return_and_left_out_of_ranking() -> None:
    model = RiskModel(PARAMS, ["a", "b"])
    for e in outage("a", 0):
        model.observe(e)
    before = model.scores(T0 + 10 * DAY)["a"]
    model.observe(FaultEvent(T0 + 10 * DAY, "a", START))
    assert model.is_down("a")
    assert model.scores(T0 + 10 * DAY)["a"] > before
    assert [n for n, _ in model.ranked(T0 + 10 * DAY)] == ["b"]
    assert [n for n, _ in model.ranked(T0 + 10 * DAY, include_down=True)] == ["a", "b"]


def test_unknown_nodes_join_and_events_must_be_in_time_order() -> None:
    model = RiskModel(PARAMS)
    for i in range(40):  # past the first growth of the arrays
        model.observe(FaultEvent(T0 + i, f"n{i}", START))
    assert len(model.nodes) == 40 and all(model.is_down(f"n{i}") for i in range(40))
    with pytest.raises(ValueError, match="older"):
        model.observe(FaultEvent(T0, "n1", END))


@pytest.mark.parametrize(
    ("half_lives", "weights", "match"),
    [
        ((1.0,), (1.0, 2.0), "one weight"),
        ((0.0,), (1.0,), "positive"),
        ((1.0,), (math.nan,), "finite"),
        ((), (), "at least one"),
    ],
)
def test_bad_params_are_rejected(half_lives: tuple[float, ...], weights: tuple[float, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RiskParams(half_lives, weights)


def test_fit_finds_recurrence_in_a_simulated_fleet() -> None:
    """Nodes repaired in the last day fail 30x as often: the fit must give the short half-life the weight."""
    rng = np.random.default_rng(5)
    nodes = [f"n{i:02d}" for i in range(50)]
    last_end = dict.fromkeys(nodes, -1e9)
    events: list[FaultEvent] = []
    for day in np.arange(0, 400, 0.05):
        hazard = np.array([0.03 if day - last_end[n] < 1 else 0.001 for n in nodes]) * 0.05
        for i in np.flatnonzero(rng.random(len(nodes)) < hazard):
            if day - last_end[nodes[i]] > 0.01:
                events += outage(nodes[i], float(day), 0.01)
                last_end[nodes[i]] = day + 0.01
    sets = risk_sets(make_history(events, len(nodes)), (0.5, 60.0))
    weights = fit_weights(sets, ridge=0.1)
    assert weights[0] > 1.0 and weights[0] > abs(weights[1])
    assert partial_log_likelihood(sets, weights) > partial_log_likelihood(sets, np.zeros(2))


def test_shipped_parameters_come_from_the_first_half_only(shared_data: Path) -> None:
    """Refitting on the first half gives DEFAULT_PARAMS, and dropping every later event changes nothing."""
    full = trace(shared_data)
    first, last = full.span()
    middle = (first + last) / 2
    params, table = select_risk_params(full, middle)
    assert params.half_lives_days == DEFAULT_PARAMS.half_lives_days
    assert params.weights == pytest.approx(DEFAULT_PARAMS.weights, abs=2e-4)
    assert max(table, key=lambda c: c.validation_loglik).ridge >= 0
    cut = FaultHistory(tuple(e for e in full.events if e.ts < middle), full.nodes, full.source)
    assert select_risk_params(cut, middle)[0] == params


def test_risk_sets_leave_out_faults_on_nodes_already_down(shared_data: Path) -> None:
    sets = risk_sets(trace(shared_data), (1.0,))
    assert len(sets.failed) == 582  # 584 faults, two recorded while their node was already down
    assert sets.up[np.arange(len(sets.failed)), sets.failed].all()
    assert np.all(np.diff(sets.ts) >= 0)
