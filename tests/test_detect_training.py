"""Training throughput/MFU shapes as findings: which series, which shape, causality, stragglers, end to end."""

from __future__ import annotations

import numpy as np
import pytest

from enginekit import alarms_of
from framekit import make_frame
from peerwatch.catalog.load import Catalog
from peerwatch.detect.training import TrainingSettings, TrainingShapeDetector, sustained_best
from peerwatch.engine import context_of
from peerwatch.frames import Frame
from peerwatch.model import Finding
from streamkit import assert_chunk_invariant, findings_after_rows_join

START, STEP, STEPS, ONSET = 1_764_460_800.0, 30.0, 480, 200  # 4 h at 30 s; a fault after 100 minutes
NAME = "training_tokens_per_second"


def frame(name: str, rows: list[dict[str, str]], values: np.ndarray) -> Frame:
    return make_frame(name, rows, values, START, STEP)


def job(values: np.ndarray, name: str = NAME) -> dict[str, Frame]:
    return {name: frame(name, [{"instance": "gpu00:9000", "job": "trainer", "run": "llama"}], values[None, :])}


def healthy(seed: int, noise: float = 0.03) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = 12_000 * (1 + rng.normal(0, noise, STEPS))
    v[rng.random(STEPS) < 0.05] = np.nan  # missed scrapes
    return v


def findings(frames: dict[str, Frame], settings: TrainingSettings | None = None) -> list[Finding]:
    return TrainingShapeDetector(settings).scan(context_of(frames, Catalog.default()), None)[0]


def onset_delay(out: list[Finding]) -> float:
    return (min(f.ts for f in out) - START) / STEP - ONSET


@pytest.mark.parametrize("seed", range(3))
def test_throughput_stuck_at_30_percent_is_gdr_misconfig_on_cluster(seed: int) -> None:
    v = healthy(seed)
    v[ONSET:] *= 0.3
    out = findings(job(v))
    assert out and {(f.node, f.component, f.hint, f.detector, f.signal) for f in out} == {
        ("cluster", "node", "gdr_misconfig", "training", NAME)
    }
    assert 0 <= onset_delay(out) <= 60 and max(f.score for f in out) >= 15
    assert out[-1].ts == START + (STEPS - 1) * STEP  # the verdict holds to the end
    assert out[0].evidence.peer_median == pytest.approx(12_000, rel=0.05)  # expected: the best level reached


@pytest.mark.parametrize("seed", range(4))
def test_healthy_job_gives_nothing(seed: int) -> None:
    v = healthy(seed, noise=0.05)
    for start in range(40, STEPS, 120):  # checkpoints: 3-minute dips to 40%
        v[start : start + 6] *= 0.4
    assert findings(job(v)) == []


@pytest.mark.parametrize(
    ("factor", "hint"), [(0.08, "fabric_failure"), (0.7, "ib_link")]
)  # fmt: skip
def test_level_shapes(factor: float, hint: str) -> None:
    v = healthy(7)
    v[ONSET:] *= factor
    assert {f.hint for f in findings(job(v))} == {hint}


def test_causal_findings_up_to_a_step_do_not_depend_on_later_data() -> None:
    v = healthy(1)
    v[ONSET:] *= 0.3
    whole = findings(job(v))
    cut = ONSET + 70
    part = findings({NAME: frame(NAME, [{"instance": "gpu00:9000", "job": "trainer", "run": "llama"}], v[None, :cut])})
    assert part and [repr(f) for f in part] == [repr(f) for f in whole if f.ts < START + cut * STEP]


def test_expected_from_settings_judges_a_job_slow_from_its_start() -> None:
    v = healthy(2) * 0.3
    assert findings(job(v)) == []  # never ran at full speed: nothing to compare with
    out = findings(job(v), TrainingSettings(expected={NAME: 12_000.0}))
    assert {f.hint for f in out} == {"gdr_misconfig"}


def test_uncatalogued_names_are_recognised_and_other_families_ignored() -> None:
    v = healthy(3)
    v[ONSET:] *= 0.08
    assert {f.hint for f in findings(job(v, "myjob_samples_per_sec"))} == {"fabric_failure"}
    assert findings(job(v, "node_load1")) == []  # a catalogued family of another exporter


def test_mfu_series() -> None:
    v = 0.42 * (1 + np.random.default_rng(4).normal(0, 0.02, STEPS))
    v[ONSET:] *= 0.7
    assert {f.hint for f in findings(job(v, "training_mfu"))} == {"ib_link"}


def test_straggler_rank_is_placed_on_its_host() -> None:
    rng = np.random.default_rng(5)
    ranks = 1_500 * (1 + rng.normal(0, 0.02, (8, STEPS)))
    ranks[5, ONSET:] *= 0.9
    rows = [{"instance": f"gpu{r:02d}:9000", "rank": str(r), "run": "llama"} for r in range(8)]
    out = findings({NAME: frame(NAME, rows, ranks)})
    assert out and {(f.node, f.hint) for f in out} == {("gpu05", "performance_degradation")}
    assert onset_delay(out) >= 0


def test_sustained_best_is_causal_and_ignores_spikes() -> None:
    x = np.array([1.0, 1, 1, 9, 1, 1, 2, 2, 2, np.nan, 2, 1, 1])
    best = sustained_best(x, 3)
    assert best[3] == 1 and best[-1] == 2 and np.all(np.diff(best[2:]) >= 0)
    assert np.array_equal(sustained_best(x[:8], 3), best[:8])


def test_end_to_end_gdr_alarm_opens_on_cluster() -> None:
    v = healthy(0)
    v[ONSET:] *= 0.3
    ctx = context_of(job(v), Catalog.default())
    alarms = alarms_of(ctx, [TrainingShapeDetector()])
    assert [(a.node, a.component, a.diagnosis) for a in alarms] == [("cluster", "node", "gdr_misconfig")]
    assert 0 <= (alarms[0].ts - START) / STEP - ONSET <= 70
    assert "gdr_misconfig" in alarms[0].evidence[0].note


def two_jobs(appear: int = 0) -> dict[str, Frame]:
    """One frame: llama's 8 ranks (rank 5 a straggler from onset), then gpt's single series (falls to
    30%), then llama's rank 7; the last two rows report only from step ``appear`` on."""
    rng = np.random.default_rng(5)
    llama = 1_500 * (1 + rng.normal(0, 0.02, (8, STEPS)))
    llama[5, ONSET:] *= 0.9
    gpt = healthy(1)
    gpt[ONSET + 50 :] *= 0.3
    rows = [{"instance": f"gpu{r:02d}:9000", "rank": str(r), "run": "llama"} for r in range(7)]
    rows += [{"instance": "gpu07:9000", "run": "gpt"}, {"instance": "gpu08:9000", "rank": "7", "run": "llama"}]
    values = np.vstack([llama[:7], gpt, llama[7:]])
    values[-2:, :appear] = np.nan
    return {NAME: frame(NAME, rows, values)}


def test_scanning_in_chunks_finds_what_one_scan_finds() -> None:
    ctx = context_of(two_jobs(), Catalog.default())
    detector = TrainingShapeDetector()
    assert {(f.node, f.hint) for f in detector.scan(ctx, None)[0]} == {
        ("gpu05", "performance_degradation"),
        ("cluster", "gdr_misconfig"),
    }
    assert assert_chunk_invariant(detector, ctx, [9, 10, 11, 205, 253, 254, 300, STEPS - 1]) > 0
    assert_chunk_invariant(detector, ctx, range(1, STEPS))  # the live service: one step at a time


@pytest.mark.parametrize("cut", [1, 150])
def test_a_job_and_a_rank_appearing_later_are_judged_from_then_on(cut: int) -> None:
    """The first chunk lacks gpt and llama's rank 7 (on a node of its own); both report from ``cut`` on."""
    whole = two_jobs(appear=cut)[NAME]
    partial = frame(NAME, [k.label_dict() for k in whole.keys[:-2]], whole.values[:-2])
    first, ctx = context_of({NAME: partial}, Catalog.default()), context_of({NAME: whole}, Catalog.default())
    assert first.nodes == ctx.nodes[:-2]
    later, want = findings_after_rows_join(TrainingShapeDetector(), first, ctx, cut)
    assert later == want and {f.hint for f in want} == {
        "performance_degradation",
        "gdr_misconfig",
    }
