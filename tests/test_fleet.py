"""Fault history loaders, the time-ordered ranking evaluation and the fleet report."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from peerwatch.act.commands import fleet_app
from peerwatch.act.fleet import (
    BASELINES,
    CountRanker,
    RandomRanker,
    compare_rankers,
    concurrent_down,
    down_stats,
    evaluate_ranking,
    fleet_report,
    risk_ranker,
)
from peerwatch.act.history import (
    DAY,
    END,
    INVENTORY,
    START,
    FaultEvent,
    FaultHistory,
    HistoryError,
    load_history,
    make_history,
    write_history,
)

T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def trace(shared_data: Path) -> FaultHistory:
    return load_history(shared_data / "infinitehbd-trace" / "fault_trace.json")


def ev(day: float, node: str, kind: str, component: str = "") -> FaultEvent:
    return FaultEvent(T0 + day * DAY, node, kind, component)


# --- history -----------------------------------------------------------------------------------------


def test_infinitehbd_trace_loads_with_its_never_failed_servers(trace: FaultHistory) -> None:
    assert len(trace.events) == 1168 and len(trace.faults()) == 584
    assert trace.fleet_size == 400
    assert len({e.node for e in trace.events}) == 231
    assert sum(n.startswith("unseen-") for n in trace.nodes) == 169
    assert [e.ts for e in trace.events] == sorted(e.ts for e in trace.events)
    assert trace.events[0].component == "GPU" and "ECC" in trace.events[0].detail


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_history_round_trips(tmp_path: Path, suffix: str) -> None:
    events = [ev(0, "gpu01", INVENTORY), ev(1, "gpu02", START, "gpu/3"), ev(1.5, "gpu02", END, "gpu/3")]
    path = tmp_path / f"history{suffix}"
    write_history(path, events[:1], append=True)
    write_history(path, events[1:], append=True)
    loaded = load_history(path)
    assert loaded.events == tuple(events)
    assert loaded.nodes == ("gpu01", "gpu02")
    write_history(path, events[1:])
    assert load_history(path).events == tuple(events[1:])


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ('{"ts": 1, "node": "a", "kind": "fault_start"}\n{"ts": 2, "node": "a"}\n', ":2:", "missing field 'kind'"),
        ('{"ts": 1, "node": "a", "kind": "broken"}\n', ":1:", "kind 'broken'"),
        ('{"ts": "NaN", "node": "a", "kind": "fault_end"}\n', ":1:", "finite"),
        ('{"ts": 1, "node": "", "kind": "fault_end"}\n', ":1:", "node"),
        ('{"ts": 1, "node": "a", "kind": "fault_end"}\n{"ts": 2,\n', ":2:", ""),
        ("ts,node\n1,a\n", ":1:", "header lacks kind"),
        ("ts,node,kind\n1,a,fault_start\nyesterday,a,fault_end\n", ":3:", "neither epoch seconds nor ISO"),
        ('[{"node_id": "a", "event_time": 1.0}]', "event 0", "missing field 'event_type'"),
    ],
)
def test_bad_history_names_file_and_line(tmp_path: Path, text: str, where: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(HistoryError, match=r"bad\.txt") as info:
        load_history(path)
    assert where in str(info.value) and message in str(info.value)


def test_iso_timestamps_and_fleet_size(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("ts,node,kind\n2024-03-30T00:00:00Z,a,fault_start\n2024-03-30T06:00:00,a,fault_end\n")
    history = load_history(path, fleet_size=3)
    assert history.events[0].ts == 1711756800.0 and history.events[1].ts == 1711756800.0 + 6 * 3600
    assert history.nodes == ("a", "unseen-000", "unseen-001")
    with pytest.raises(HistoryError, match="fleet size 0"):
        load_history(path, fleet_size=0)


# --- ranking evaluation --------------------------------------------------------------------------------


def test_ties_count_as_fractional_hits() -> None:
    history = make_history([ev(1, "n0", START), ev(2, "n0", END)], fleet_size=10)
    score = evaluate_ranking(history, RandomRanker, fractions=(0.1, 0.3))
    assert score.top_k == (1, 3) and score.rates() == pytest.approx((0.1, 0.3))


def test_faults_at_one_instant_do_not_see_each_other_and_down_nodes_miss() -> None:
    events = [ev(0, "a", START), ev(0.5, "a", END), ev(3, "a", START), ev(3, "b", START), ev(3.5, "b", START)]
    history = make_history(events, fleet_size=20)
    score = evaluate_ranking(history, CountRanker, fractions=(0.10,))
    # at day 3 "a" (one fault so far) leads; "b" is tied with the 18 other clean nodes for the second slot
    assert score.hits[:, 0].tolist() == pytest.approx([2 / 20, 1.0, 1 / 19, 0.0])
    assert score.on_down.tolist() == [False, False, False, True]
    # ranking down nodes too: at day 3.5 "b" (one fault, down) is second behind "a" (two faults)
    assert evaluate_ranking(history, CountRanker, (0.10,), exclude_down=False).hits[3, 0] == 1.0


def test_no_peeking_hits_do_not_change_when_the_future_is_cut(trace: FaultHistory) -> None:
    full = evaluate_ranking(trace, risk_ranker())
    for cut in np.quantile(full.fault_ts, [0.25, 0.6]):
        past = FaultHistory(tuple(e for e in trace.events if e.ts <= cut), trace.nodes, trace.source)
        part = evaluate_ranking(past, risk_ranker())
        np.testing.assert_array_equal(part.hits, full.hits[: part.faults])


def test_risk_model_beats_baselines_on_the_real_trace(trace: FaultHistory) -> None:
    rows = {(r.ranker, r.window): r for r in compare_rankers(trace, {**BASELINES, "risk": risk_ranker()})}
    assert rows[("risk", "whole")].faults == 584
    assert rows[("risk", "first half")].faults + rows[("risk", "second half")].faults == 584
    for window in ("first half", "second half", "whole"):
        random, count, risk = (rows[(name, window)].rates for name in ("random", "fault count so far", "risk"))
        assert random == pytest.approx((0.05, 0.10), abs=0.006)  # a few nodes are down: k / up > k / fleet
        assert risk[0] > count[0] + 0.05 and risk[1] > count[1]
    # parameters were fitted on the first half: the second half is the honest figure
    assert rows[("risk", "second half")].rates[0] >= 0.30
    kept = {(r.ranker, r.window): r for r in compare_rankers(trace, BASELINES, exclude_down=False)}
    assert 0.13 < kept[("fault count so far", "whole")].rates[0] < 0.20  # the "about 16%"


# --- fleet report ------------------------------------------------------------------------------------------


def test_concurrent_down_matches_brute_force(trace: FaultHistory) -> None:
    times, counts = concurrent_down(trace)
    outages: dict[str, list[float]] = {}
    intervals = []
    for e in trace.events:
        if e.kind == START:
            outages.setdefault(e.node, []).append(e.ts)
        elif outages.get(e.node):
            intervals.append((outages[e.node].pop(0), e.ts, e.node))
    for probe in np.linspace(times[0], times[-1], 97)[1:-1]:
        down = {n for s, t, n in intervals if s <= probe < t}
        assert counts[np.searchsorted(times, probe, side="right") - 1] == len(down)
    assert counts.max() == 35


def test_down_stats_on_a_known_step_function() -> None:
    times = np.array([0.0, 10.0, 90.0, 99.0])
    counts = np.array([1, 0, 5, 2])
    stats = down_stats(times, counts, end=100.0, bins=10)
    assert (stats.peak, stats.peak_ts) == (5, 90.0)
    assert stats.mean == pytest.approx((10 * 1 + 80 * 0 + 9 * 5 + 1 * 2) / 100)
    assert (stats.p95, stats.p99) == (5.0, 5.0)
    assert stats.timeline == (1, 0, 0, 0, 0, 0, 0, 0, 0, 5)


def test_fleet_report_on_the_trace(trace: FaultHistory) -> None:
    report = fleet_report(trace, lemons=8, trusted_days=60)
    assert report.down.peak == 35 and report.spares_peak == 35
    assert report.down.p95 <= report.down.p99 <= report.down.peak
    assert report.spares_p99 == math.ceil(report.down.p99)
    assert report.rule_of_thumb == (40, 80)
    risks = [n.risk for n in report.lemons]
    assert len(risks) == 8 and risks == sorted(risks, reverse=True)
    lemons = {n.node for n in report.lemons}
    recent = {e.node for e in trace.faults() if e.ts >= report.at_ts - 60 * DAY}
    assert not recent & set(report.trusted) and not lemons & set(report.trusted)
    assert sum(n.startswith("unseen-") for n in report.trusted) == 169
    weekly = np.array(report.weekly_failing_fraction)
    assert len(weekly) == 49 and 0.01 < weekly.mean() < 0.05


def test_report_as_of_an_earlier_time_ignores_later_events(trace: FaultHistory) -> None:
    at = trace.span()[0] + 30 * DAY
    report = fleet_report(trace, at_ts=at)
    assert report.faults == sum(e.ts <= at for e in trace.faults())
    assert all(n.last_fault_ts is not None and n.last_fault_ts <= at for n in report.lemons)


# --- command line ---------------------------------------------------------------------------------------


def test_cli_report_and_evaluate_json(shared_data: Path, tmp_path: Path) -> None:
    path = str(shared_data / "infinitehbd-trace" / "fault_trace.json")
    runner = CliRunner()
    result = runner.invoke(fleet_app, ["report", path, "--json", "--lemons", "3"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.output)
    assert report["down"]["peak"] == 35 and len(report["lemons"]) == 3
    result = runner.invoke(fleet_app, ["evaluate", path, "--json"])
    assert result.exit_code == 0, result.output
    rows = orjson.loads(result.output)["rows"]
    assert {r["ranker"] for r in rows} == {"random", "fault count so far", "risk model"}
    assert runner.invoke(fleet_app, ["report", path]).exit_code == 0
    bad = tmp_path / "h.csv"
    bad.write_text("ts,node,kind\n1,a,fault_begin\n")
    result = runner.invoke(fleet_app, ["report", str(bad)])
    assert result.exit_code == 2 and "h.csv:2" in result.output
