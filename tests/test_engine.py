"""The whole engine on a simulated recording: peerwatch analyze's contract and what it finds."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from peerwatch.cli import app
from peerwatch.engine import Engine, analyze_frames, load_frames
from peerwatch.evaluate import load_labels, score
from peerwatch.frames import Frame
from peerwatch.model import Alarm
from peerwatch.simulate import FaultRequest, Scenario, default_spec, simulate, write_recording

CONTRACT_KEYS = ["ts", "node", "component", "diagnosis", "severity", "score", "action", "evidence"]
EVIDENCE_KEYS = ["metric", "labels", "value", "peer_median", "robust_z", "note"]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("engine") / "two_faults"
    faults = (
        FaultRequest("nvlink_xid", node="gpu003", gpu=2, at=0.7),
        FaultRequest("gpu_card_drop", node="gpu006", gpu=5, at=0.6),
    )
    write_recording(simulate(Scenario("two_faults", default_spec(10), hours=1.5, seed=5, faults=faults)), out)
    return out


@pytest.fixture(scope="module")
def analyzed(scenario: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("alarms") / "alarms.jsonl"
    result = CliRunner().invoke(app, ["analyze", str(scenario), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_analyze_writes_the_guide_contract(analyzed: list[dict]) -> None:  # type: ignore[type-arg]
    assert analyzed
    for alarm in analyzed:
        assert list(alarm) in (CONTRACT_KEYS, [*CONTRACT_KEYS, "updates"])
        for update in alarm.get("updates", []):  # later changes of the same alarm, each at its own step
            assert list(update) == ["ts", "severity", "diagnosis", "action", "component"]
            assert update["ts"] > alarm["ts"]
        assert alarm["severity"] in ("warning", "critical") and alarm["action"] in ("watch", "drain", "swap")
        assert isinstance(alarm["ts"], float) and alarm["evidence"]
        for e in alarm["evidence"]:
            assert list(e) == EVIDENCE_KEYS and isinstance(e["labels"], dict)


def test_both_faults_found_named_and_placed_without_false_alarms(scenario: Path, analyzed: list[dict]) -> None:  # type: ignore[type-arg]
    result = score(analyzed, load_labels(scenario / "labels.json"))
    by_kind = {o.fault.kind: o for o in result.outcomes}
    assert all(o.detected for o in by_kind.values()), by_kind
    assert all(o.diagnosed and o.localised for o in by_kind.values()), by_kind
    assert result.node_alarms == result.node_alarms_matched, analyzed
    # The NVLink fault has a precursor (the agent's task count): it is caught before the XID.
    nvlink = by_kind["nvlink_xid"]
    assert nvlink.lead_s is not None and nvlink.lead_s > 60


def test_evaluate_command_runs_the_engine(scenario: Path) -> None:
    result = CliRunner().invoke(app, ["evaluate", str(scenario), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["systems"][0]["overall"]["recall"] == 1.0


def test_analyze_with_nothing_usable_exits_non_zero(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{broken\n")
    result = CliRunner().invoke(app, ["analyze", str(bad), "--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 1 and "nothing usable" in result.output and "bad.jsonl:1" in result.output


def test_streaming_the_run_step_by_step_raises_the_alarms_of_one_analysis(scenario: Path) -> None:
    """The live service's way (one step at a time, every stage's state carried) against analyze's."""
    frames = load_frames([str(scenario)])
    whole = analyze_frames(frames)
    assert whole
    steps = next(iter(frames.values())).steps
    engine = Engine()
    latest: dict[str, Alarm] = {}
    cuts = [0, 40, *range(41, 60), 100, steps]  # a warm-up chunk, then steps one by one, then chunks
    for a, b in itertools.pairwise(cuts):
        chunk = {n: replace(f, start=f.start + a * f.step, values=f.values[:, a:b]) for n, f in frames.items()}
        scanned = engine.scan(chunk)
        assert all(x.resolved_ts is None or x.resolved_ts >= chunk_start(chunk) for x in scanned.alarms)
        latest.update((x.id, x) for x in scanned.alarms)
    streamed = sorted(latest.values(), key=lambda x: (x.ts, x.node))
    assert [(x.id, x.node, x.component, x.diagnosis, x.severity, x.resolved_ts) for x in streamed] == [
        (x.id, x.node, x.component, x.diagnosis, x.severity, x.resolved_ts) for x in whole
    ]
    for x, y in zip(streamed, whole, strict=True):
        assert x.score == pytest.approx(y.score, rel=1e-6)
        assert [e.metric for e in x.evidence] == [e.metric for e in y.evidence]


def chunk_start(frames: dict[str, Frame]) -> float:
    return next(iter(frames.values())).start
