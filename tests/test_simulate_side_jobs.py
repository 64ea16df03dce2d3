"""Nodes on work of their own (simulate/side_jobs.py) are never compared as peers: a small recording
with several unsynchronised light jobs gives no false alarm on them (the level-based groups gave
four: two gpu_hang, a performance_degradation and an nfs_network)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from peerwatch.catalog.load import Catalog
from peerwatch.cli import app
from peerwatch.detect.groups import LONE, MAIN
from peerwatch.engine import Engine, analyze_frames, context_of, load_frames
from peerwatch.frames import Frame
from peerwatch.simulate import Scenario, simulate, write_recording
from peerwatch.simulate.cluster import ClusterSpec
from peerwatch.simulate.scenarios import variant_set


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("side") / "side_jobs"
    spec = ClusterSpec(nodes=20, spares=2, side_nodes=5)
    write_recording(simulate(Scenario("side_jobs", spec, hours=2.0, seed=11)), out)
    return out


@pytest.fixture(scope="module")
def frames(recording: Path) -> dict[str, Frame]:
    return load_frames([str(recording)])


def side_nodes(recording: Path) -> set[str]:
    events = json.loads((recording / "labels.json").read_text())["events"]
    return {e["node"] for e in events if e["kind"] in ("side_job", "light_job")}


def test_nodes_on_their_own_work_raise_no_alarm_and_are_not_peers(recording: Path, frames: dict[str, Frame]) -> None:
    side = side_nodes(recording)
    assert len(side) == 6  # five side nodes and the spare on the light job
    assert not [a for a in analyze_frames(frames) if a.node in side]
    ctx = context_of(frames, Catalog.default())
    rows = [ctx.nodes.index(n) for n in sorted(side)]
    busy = ctx.groups[rows] != 0
    assert np.mean(ctx.groups[rows][busy] == LONE) > 0.9
    assert np.mean(ctx.groups[: 20 - 2 - 5] == MAIN) > 0.98  # the main job's nodes stay peers


def test_streamed_step_by_step_the_groups_are_those_of_one_pass(frames: dict[str, Frame]) -> None:
    whole = context_of(frames, Catalog.default()).groups
    steps = whole.shape[1]
    engine, parts = Engine(), []
    for a, b in itertools.pairwise([0, 40, *range(41, 60), 150, steps]):
        chunk = {n: replace(f, start=f.start + a * f.step, values=f.values[:, a:b]) for n, f in frames.items()}
        parts.append(engine.scan(chunk).ctx.groups)
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), whole)


def test_analyze_logs_who_was_compared_with_whom(recording: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["analyze", str(recording), "--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("peer groups"))
    side = ", ".join(sorted(side_nodes(recording)))
    assert line == (
        "peer groups (most of the run): main job: 13 nodes; idle: 1 node (gpu020); "
        f"not compared (shares its work with no node): 6 nodes ({side})"
    )


def test_the_variant_set_draws_side_work_from_its_seed() -> None:
    a, b, c = variant_set(100), variant_set(100), variant_set(5)
    assert [s.spec for s in a] == [s.spec for s in b] and [s.spec for s in a] != [s.spec for s in c]
    assert all(1 <= s.spec.side_nodes <= 6 for s in a)
    assert any(4 <= s.spec.second_job_nodes <= 8 for s in a)
    assert all(s.spec.training >= 2 * (s.spec.nodes - s.spec.spares) // 3 for s in a)


def test_each_side_node_has_its_own_load_and_the_second_job_one_load() -> None:
    spec = ClusterSpec(nodes=16, spares=1, side_nodes=3, second_job_nodes=4)
    sim = simulate(Scenario("side", spec, hours=1.0, seed=2))
    util = sim.src.sig.arrays["util"].mean(axis=1)  # (nodes, steps)
    second, side = util[spec.training : spec.training + 4], util[spec.training + 4 : spec.training + 7]
    on = ~np.isnan(sim.src.act.load[spec.training])
    assert np.abs(second[:, on] - second[:, on].mean(axis=0)).mean() < 2.0  # one shared load
    levels = side.mean(axis=1)
    assert ((levels > 10) & (levels < 90)).all() and np.ptp(util[: spec.training].mean(axis=1)) < 3
    side_names = sim.layout.names[spec.training : -1]
    kinds = sorted({e.kind for e in sim.events if e.node in side_names} - {"exporter_restart"})
    assert kinds == ["second_job", "side_job"]
