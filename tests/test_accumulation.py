"""Slow accumulation (detect/accumulation.py): counts against the peers' base rate.

Hand-made arrays first: 16 entities with one peer key (the same GPU index on 16 nodes), 30-s steps,
increases per step as ``increments`` gives them (NaN: unknown). Then a simulated recording of a slow
remap growth, and a healthy one.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from enginekit import alarms_of
from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.decide.policy import Policy
from peerwatch.detect.accumulation import (
    AccumulationDetector,
    AccumulationSettings,
    Events,
    Scores,
    accumulation_scores,
)
from peerwatch.detect.context import Context
from peerwatch.detect.groups import MAIN
from peerwatch.detect.poisson import poisson_surprise
from peerwatch.engine import Engine, analyze_frames, context_of, default_detectors, load_frames
from peerwatch.frames import Frame
from peerwatch.model import Alarm, Evidence, Finding, FloatArray
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording
from peerwatch.simulate.events import Benign
from peerwatch.simulate.scenarios import EVERY_BENIGN
from streamkit import assert_chunk_invariant, findings_after_rows_join

STEP, ROWS, HOUR = 30.0, 16, 120  # steps of an hour
START = 1_764_460_800.0
SETTINGS = AccumulationSettings()


def every(row: FloatArray, first: int, gap: int, amount: float = 1.0) -> None:
    row[first::gap] = amount


def scores(inc: FloatArray, cuts: tuple[int, ...] = ()) -> Scores:
    """Scores of ``inc`` scanned in chunks cut before ``cuts``, put back together."""
    keys = np.zeros(inc.shape[0], dtype=np.int64)
    parts, past, bounds = [], Events(), [0, *cuts, inc.shape[1]]
    for a, b in itertools.pairwise(bounds):
        sc, past = accumulation_scores(inc[:, a:b], keys, STEP, SETTINGS, past, a)
        parts.append(sc)
    return Scores(*(np.concatenate([getattr(p, f) for p in parts], axis=1) for f in Scores.__dataclass_fields__))


@pytest.mark.parametrize(("n", "mu"), [(2, 0.04), (3, 0.04), (5, 0.17), (10, 5.0), (3, 2.9), (40, 30.0)])
def test_poisson_tail_matches_the_sum_of_its_terms(n: int, mu: float) -> None:
    want = math.log10(sum(math.exp(-mu + k * math.log(mu) - math.lgamma(k + 1)) for k in range(n, n + 200)))
    assert -poisson_surprise(np.array([n]), np.array([mu]))[0] == pytest.approx(want, rel=1e-9)


def test_tiny_probabilities_keep_their_digits() -> None:
    # 1 - cdf would round this to log10(0); the tail's own terms do not.
    want = (-0.05 + 60 * math.log(0.05) - math.lgamma(61)) / math.log(10)  # the first term dominates
    assert -poisson_surprise(np.array([60]), np.array([0.05]))[0] == pytest.approx(want, abs=1e-3)


def test_a_steady_grower_opens_within_an_hour_of_growth_while_flat_peers_score_nothing() -> None:
    inc = np.zeros((ROWS, 4 * HOUR))
    every(inc[3], HOUR, 30)  # one increase every 15 minutes from the first hour on
    sc = scores(inc)
    assert sc.score[3, : HOUR + 60].max() < 6.0  # two or three increases: not yet
    assert sc.score[3, 2 * HOUR - 1] >= 6.0  # four within the hour
    # It holds: the policy's continuity (6 of 8 steps) is met by the window, not by luck.
    assert (sc.score[3, 2 * HOUR : 4 * HOUR] >= 6.0).all()
    assert np.delete(sc.score, 3, axis=0).max() == 0.0


def test_one_jump_however_large_is_one_event() -> None:
    inc = np.zeros((ROWS, 2 * HOUR))
    inc[5, 100] = 254.0  # a whole history of remaps appearing at once
    inc[6, 100:102] = 30.0  # one event caught by two scrapes
    sc = scores(inc)
    assert sc.score[5].max() == 0.0
    assert sc.score[6].max() < SETTINGS.report


def test_peers_ticking_at_a_base_rate_raise_what_counts() -> None:
    rng = np.random.default_rng(1)
    inc = (rng.random((ROWS, 4 * HOUR)) < 4 / HOUR).astype(float)  # every entity about 4 an hour
    sc = scores(inc)
    assert sc.score.max() < SETTINGS.report  # the same rate as everyone: nothing
    grower = inc.copy()
    grower[2, HOUR:] = (rng.random(3 * HOUR) < 20 / HOUR).astype(float)  # five times the peers' rate
    assert scores(grower).score[2, 3 * HOUR :].min() >= 6.0


def test_missed_scrapes_are_unknown_and_a_reset_is_a_restart_from_zero() -> None:
    raw = np.full((ROWS, 3 * HOUR), 200.0)  # months-old counts: a level, not news
    raw[4] = 200.0 + np.cumsum(np.arange(3 * HOUR) % 20 == 10)  # one more every 10 minutes
    raw[4, 150:] -= raw[4, 150] - 1.0  # a driver reload: the volatile count starts again
    holes = np.random.default_rng(2).random(raw.shape) < 0.1
    raw[holes] = np.nan
    raw[4, 200:215] = np.nan  # an exporter away for 7 minutes
    rows = [{"Hostname": f"gpu{n:02d}", "gpu": "0", "instance": f"gpu{n:02d}:9400"} for n in range(ROWS)]
    name = "peerwatch_agent_gpu_ecc_uncorrected_volatile"  # a gauge of raw counts
    ctx = context_of({name: make_frame(name, rows, raw, START, STEP)}, Catalog.default())
    found = AccumulationDetector().scan(ctx, None)[0]
    assert {f.node for f in found} == {"gpu04"}
    assert all(np.isfinite(f.score) and f.evidence.value <= 4 * 6 for f in found)
    assert max(f.score for f in found) >= 6.0
    assert_chunk_invariant(AccumulationDetector(), ctx, [1, 59, 150, 151, 209, 300])


def test_the_same_scores_however_the_run_is_cut() -> None:
    inc = np.zeros((ROWS, 3 * HOUR))
    every(inc[3], 40, 25)
    inc[7, 50] = np.nan
    inc[:, 200] = np.nan
    whole = scores(inc)
    for cuts in ((1, 2, 3), (119, 120, 121), tuple(range(5, 3 * HOUR, 7))):
        part = scores(inc, cuts)
        np.testing.assert_array_equal(part.score, whole.score)
        np.testing.assert_array_equal(part.count, whole.count)


def gpu_rows(nodes: int, gpus: int = 8) -> list[dict[str, str]]:
    return [
        {"Hostname": f"gpu{n:02d}", "gpu": str(g), "instance": f"gpu{n:02d}:9400"}
        for n in range(nodes)
        for g in range(gpus)
    ]


def remap_context(nodes: int = 12, steps: int = 3 * HOUR, warm: float = 3.0):  # type: ignore[no-untyped-def]
    """Remapped rows (a rate frame) on ``nodes`` x 8 GPUs, gpu03/3 growing 4 an hour from the first hour,
    with its HBM ``warm`` C warmer by the end; HBM temperatures with fixed offsets and noise."""
    rng = np.random.default_rng(5)
    rows = gpu_rows(nodes)
    culprit = next(i for i, r in enumerate(rows) if r["Hostname"] == "gpu03" and r["gpu"] == "3")
    rate = np.zeros((len(rows), steps))
    every(rate[culprit], HOUR + 7, 30, 1 / STEP)
    rate[rng.random(rate.shape) < 0.05] = np.nan
    temp = 50 + rng.normal(0, 0.4, rate.shape) + rng.normal(0, 2, (len(rows), 1))
    temp[culprit] += np.clip(np.arange(steps) - HOUR, 0, None) / (steps - HOUR) * warm
    remap, hbm = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_MEMORY_TEMP"
    frames = {
        remap: make_frame(remap, rows, rate, START, STEP, "rate"),
        hbm: make_frame(hbm, rows, np.rint(temp), START, STEP),
    }
    return context_of(frames, Catalog.default())


def test_a_warming_hbm_corroborates() -> None:
    warm = {f.ts: f for f in AccumulationDetector().scan(remap_context(warm=3.0), None)[0]}
    cool = {f.ts: f.score for f in AccumulationDetector().scan(remap_context(warm=0.0), None)[0]}
    assert set(cool) <= set(warm)
    raised = [ts for ts in cool if warm[ts].score >= min(cool[ts] + 1.0, SETTINGS.cap)]
    assert len(raised) > len(cool) / 2  # while the rise shows against the node's other GPUs
    assert "temperature +" in warm[raised[-1]].evidence.note


def test_streamed_in_chunks_and_with_rows_joining_later() -> None:
    ctx = remap_context()
    assert assert_chunk_invariant(AccumulationDetector(), ctx, [17, 119, 120, 121, 250, ctx.steps - 1]) > 0
    assert_chunk_invariant(AccumulationDetector(), ctx, range(200, ctx.steps))  # the live service
    whole = remap_context(nodes=14)  # two nodes join at step 150 (their rows last)
    keep = [i for i, k in enumerate(whole.by_name()["DCGM_FI_DEV_MEMORY_TEMP"].frame.nodes) if k < "gpu12"]
    partial = context_of(
        {
            s.frame.name: make_frame(
                s.frame.name,
                [dict(s.frame.keys[i].labels) for i in keep],
                s.values[keep],
                START,
                STEP,
                s.frame.kind,
            )
            for s in whole.series
        },
        Catalog.default(),
    )
    later, want = findings_after_rows_join(AccumulationDetector(), partial, whole, 150)
    assert later == want and later


# A simulated recording: 16 nodes for 4 h, remapped rows growing on one GPU from the first hour on
# (about 3 an hour for 2.2 h), with every other detector and the policy as they are.
SLOW = Scenario(
    "slow_remap",
    default_spec(16),
    hours=4.0,
    seed=11,
    faults=(FaultRequest("ecc_slow_remap", at=0.25),),
    benign=Benign(agent_restarts=1),
)


@pytest.fixture(scope="module")
def slow_remap(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Frame], dict[str, Any]]:
    out = tmp_path_factory.mktemp("accumulation") / SLOW.name
    write_recording(simulate(SLOW), out)
    labels = json.loads((out / "labels.json").read_text())
    return load_frames([str(out)]), labels["faults"][0]


def test_a_slow_remap_growth_is_a_watch_alarm_ecc_hbm_within_90_minutes(
    slow_remap: tuple[dict[str, Frame], dict[str, Any]],
) -> None:
    frames, fault = slow_remap
    assert fault["failure_ts"] is None and not fault.get("xid")
    alarms = analyze_frames(frames)
    assert [a.node for a in alarms] == [fault["node"]], alarms  # and nothing else
    alarm = alarms[0]
    assert fault["onset_ts"] - 60 <= alarm.ts <= fault["onset_ts"] + 90 * 60
    assert (alarm.diagnosis, alarm.component, alarm.severity, alarm.action) == (
        "ecc_hbm",
        fault["component"],
        "warning",
        "watch",
    )
    assert alarm.evidence[0].metric == "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
    # Without this detector the same growth goes unalarmed: each increase is an isolated tick.
    ctx = context_of(frames, Catalog.default())
    others = [d for d in default_detectors() if d.name != AccumulationDetector.name]
    assert not [a for a in alarms_of(ctx, others) if a.node == fault["node"]]


def test_streamed_step_by_step_the_engine_raises_the_same_alarm(
    slow_remap: tuple[dict[str, Frame], dict[str, Any]],
) -> None:
    frames = slow_remap[0]
    whole = analyze_frames(frames)
    opened = round((whole[0].ts - next(iter(frames.values())).start) / STEP)
    steps = next(iter(frames.values())).steps
    engine, latest = Engine(), dict[str, Alarm]()
    cuts = sorted({0, 90, *range(opened - 10, opened + 3), 400, steps})  # chunks; one step at a time at the opening
    for a, b in itertools.pairwise(cuts):
        chunk = {n: replace(f, start=f.start + a * f.step, values=f.values[:, a:b]) for n, f in frames.items()}
        latest.update((x.id, x) for x in engine.scan(chunk).alarms)
    streamed = sorted(latest.values(), key=lambda x: (x.ts, x.node))
    key = [(x.id, x.node, x.component, x.diagnosis, x.severity, x.action, x.resolved_ts) for x in streamed]
    assert key == [(x.id, x.node, x.component, x.diagnosis, x.severity, x.action, x.resolved_ts) for x in whole]


def test_a_healthy_run_with_every_benign_event_accumulates_nothing(tmp_path: Path) -> None:
    healthy = Scenario("healthy", default_spec(16), hours=4.0, seed=11, benign=EVERY_BENIGN)
    write_recording(simulate(healthy), tmp_path / "healthy")
    ctx = context_of(load_frames([str(tmp_path / "healthy")]), Catalog.default())
    assert AccumulationDetector().scan(ctx, None)[0] == []


def test_an_alarm_resting_on_an_accumulation_alone_is_a_warning_to_watch() -> None:
    nodes = ("n00", "n01")
    ctx = Context((), nodes, START, STEP, 60, np.full((2, 60), MAIN))
    remap = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"

    def found(col: int, score: float, detector: str, signal: str = remap, hint: str | None = None) -> Finding:
        return Finding(START + col * STEP, "n01", "gpu/3", detector, signal, score, Evidence(signal, (), 1.0), hint)

    slow = [found(c, 7.0, "accumulation") for c in range(10, 30)]
    warm = [found(c, 4.5, "temporal", "DCGM_FI_DEV_MEMORY_TEMP") for c in range(10, 30)]
    (alarm,) = Policy().decide(ctx, slow + warm)
    assert (alarm.diagnosis, alarm.component, alarm.severity, alarm.action) == ("ecc_hbm", "gpu/3", "warning", "watch")
    # A burst the counter detector would open on by itself, or a hardware XID: what actions.csv says.
    burst = [found(12, 6.0, "counter")]
    xid = [found(20, 20.0, "state", "xid:94", "ecc_hbm")]
    for more in (burst, xid):
        (alarm,) = Policy().decide(ctx, slow + more)
        assert (alarm.diagnosis, alarm.severity, alarm.action) == ("ecc_hbm", "critical", "swap")
