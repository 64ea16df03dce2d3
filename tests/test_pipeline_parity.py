"""One pipeline, two drivers: a recording fed to the live service step by step gives exactly the
alarms of ``peerwatch analyze`` on it (frames/framer.py, engine.analyze_segments, service/evaluation.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from peerwatch.engine import analyze, analyze_segments, read_frames
from peerwatch.frames import step_of
from peerwatch.frames.buffer import SampleBuffer
from peerwatch.model import Alarm, ProblemLog, SeriesBlock
from peerwatch.service.evaluation import Evaluator
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording
from peerwatch.simulate.faults import KINDS
from peerwatch.sources.inputs import read_inputs

STEP = 30.0
NOW = 2e9


def by_step(blocks: list[SeriesBlock]) -> dict[int, list[SeriesBlock]]:
    """The recording's samples as scrape rounds: per grid step, each series' samples in it."""
    out: dict[int, list[SeriesBlock]] = {}
    for b in blocks:
        k = step_of(b.timestamps, STEP)
        order = np.argsort(k, kind="stable")
        steps, first = np.unique(k[order], return_index=True)
        for s, lo, hi in zip(steps.tolist(), first.tolist(), [*first[1:].tolist(), k.size], strict=True):
            idx = order[lo:hi]
            out.setdefault(s, []).append(SeriesBlock(b.key, b.timestamps[idx], b.values[idx], b.mtype))
    return out


def live(path: Path) -> list[Alarm]:
    """The alarms the service raises fed the recording one step at a time (each alarm's last view)."""
    rounds = by_step(list(read_inputs([str(path)], ProblemLog())))
    buffer = SampleBuffer(1e9)
    evaluator = Evaluator(STEP, 3600.0, ("node", "hostname", "Hostname"))
    latest: dict[str, Alarm] = {}
    for k in range(min(rounds), max(rounds) + 1):
        buffer.add(rounds.get(k, []))
        judged = evaluator.evaluate(buffer, k * STEP, NOW)
        if judged is not None:
            assert judged.end == k * STEP
            latest.update((a.id, a) for a in judged.alarms)
            evaluator.committed()
    return sorted(latest.values(), key=lambda a: (a.ts, a.node))


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 nodes, 45 min, every fault kind once, on different nodes at different times."""
    nodes = 10
    kinds = list(KINDS)
    faults = tuple(
        FaultRequest(kind, node=f"gpu{i % (nodes - 2) + 1:03d}", at=0.15 + 0.75 * i / len(kinds))
        for i, kind in enumerate(kinds)
    )
    out = tmp_path_factory.mktemp("every_kind")
    write_recording(simulate(Scenario("every_kind", default_spec(nodes), hours=0.75, seed=5, faults=faults)), out)
    return out / "metrics.jsonl"


def test_every_fault_kind_streamed_step_by_step_gives_exactly_the_alarms_of_analyze(every_kind: Path) -> None:
    offline = analyze([str(every_kind)], now=NOW)
    streamed = live(every_kind)
    assert len(offline) >= 5, "too few alarms for the comparison to say much"
    # Equal, not close: identity, opening step, diagnosis, score, evidence values, escalations.
    assert [a.as_json() for a in streamed] == [a.as_json() for a in offline]
    # Every field to the last bit (repr: a float's shortest exact form; NaN, a missing value, alike).
    assert repr(streamed) == repr(offline)


def test_the_peer_detector_in_a_child_process_gives_exactly_the_alarms_of_one_process(every_kind: Path) -> None:
    # Short chunks, so that chunks are begun ahead of the child (offload.py) and its state carried.
    offline = analyze([str(every_kind)], now=NOW)
    builder = read_frames([str(every_kind)], now=NOW)
    judged = list(analyze_segments(builder, chunk=20, jobs=2))
    two = sorted((a for j in judged for a in j.alarms), key=lambda a: (a.ts, a.node))
    assert len(offline) >= 5
    assert repr(two) == repr(offline)
