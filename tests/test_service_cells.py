"""The live service's frames, read from its sample buffer step by step, against frames built from the whole run."""

from __future__ import annotations

import numpy as np

from peerwatch.catalog.load import Catalog
from peerwatch.engine import kind_by_catalog
from peerwatch.frames import FrameBuilder
from peerwatch.frames.buffer import SampleBuffer
from peerwatch.frames.cells import LiveCells
from peerwatch.frames.framer import Framer
from peerwatch.service.evaluation import Evaluator
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate


def test_frames_fed_step_by_step_equal_the_whole_runs_with_counters_as_rates_across_steps() -> None:
    faults = (FaultRequest("gpu_card_drop", node="gpu002", gpu=1, at=0.5),)
    sim = simulate(Scenario("chunks", default_spec(4), hours=0.5, seed=3, faults=faults))
    sets = list(sim.series())
    catalog = Catalog.default()
    kind_of = kind_by_catalog(catalog)
    whole = FrameBuilder(30.0, kind_of=kind_of, node_labels_for=catalog.node_labels, now=2e9)
    whole_frames = whole.add_all(sim.blocks(sets=sets)).build()
    buffer = SampleBuffer(1e9)
    buffer.add(sim.blocks(sets=sets))
    cells = LiveCells(30.0)
    framer = Framer(30.0, kind_of=kind_of, node_labels_for=catalog.node_labels)
    k0 = round(next(iter(whole_frames.values())).start / 30.0)
    columns: dict[str, list[tuple[int, np.ndarray]]] = {}
    for k in range(sim.grid.steps):
        chunk = framer.frames(k0 + k, 1, cells.cells(buffer, k0 + k, k0 + k, now=2e9))
        for name, f in chunk.items():
            assert f.steps == 1 and f.start == (k0 + k) * 30.0
            columns.setdefault(name, []).append((k, f.values[:, 0]))
    # One framer: the same families, kinds decided at the same step, values equal to the last bit.
    assert set(columns) == set(whole_frames)
    for name, frame in whole_frames.items():
        got = columns[name]
        first = got[0][0]
        assert [k for k, _ in got] == list(range(first, sim.grid.steps)), f"{name}: a step missing once shown"
        assert np.isnan(frame.values[:, :first]).all(), f"{name}: judged before its kind was known"
        rows = frame.values.shape[0]
        seen = np.stack([np.r_[col, np.full(rows - col.size, np.nan)] for _, col in got], axis=1)
        np.testing.assert_array_equal(seen, frame.values[:, first:], err_msg=name)
    assert any(f.kind == "rate" for f in whole_frames.values())


def test_a_step_without_samples_and_a_first_read_inside_one_step_are_no_error() -> None:
    sim = simulate(Scenario("empty", default_spec(4), hours=0.1, seed=3))
    sets = list(sim.series())
    buffer = SampleBuffer(1e9)
    # The first scrape round: samples inside step k0+1, which is not complete at its newest sample.
    buffer.add(sim.blocks(steps=slice(0, 1), sets=sets))
    evaluator = Evaluator(30.0, 3600.0, ())
    newest = buffer.newest
    assert newest is not None
    assert evaluator.evaluate(buffer, newest, newest) is None
    buffer.add(sim.blocks(steps=slice(1, 2), sets=sets))
    newest = buffer.newest
    assert newest is not None
    judged = evaluator.evaluate(buffer, newest, newest)
    assert judged is not None and judged.series > 0
    # A step the source has nothing for: every family known so far, all silent.
    k = round(judged.end / 30.0) + 5
    silent = evaluator.framer.frames(k, 1, evaluator.cells.cells(buffer, k, k, now=2e9))
    assert silent and all(np.isnan(f.values).all() for f in silent.values())
