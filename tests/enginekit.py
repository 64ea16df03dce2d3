"""Small simulated recordings run through the whole engine, analysed whole and streamed step by step."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

from peerwatch.decide.policy import Policy
from peerwatch.detect.context import Context
from peerwatch.engine import Detector, Engine, analyze_frames, default_detectors, load_frames
from peerwatch.evaluate import load_labels, score
from peerwatch.evaluate.score import ScenarioScore
from peerwatch.frames import Frame
from peerwatch.model import Alarm
from peerwatch.simulate import Scenario, simulate, write_recording


def record(scenario: Scenario, out: Path) -> tuple[dict[str, Frame], Path]:
    """The scenario written to ``out`` and read back as frames, with its labels' path."""
    write_recording(simulate(scenario), out)
    return load_frames([str(out / "metrics.jsonl")]), out / "labels.json"


def analysed(frames: dict[str, Frame], labels: Path, policy: Policy | None = None) -> tuple[list[Alarm], ScenarioScore]:
    alarms = analyze_frames(frames, policy=policy)
    return alarms, score(alarms, load_labels(labels))


def streamed(frames: dict[str, Frame], warmup: int = 40, one_by_one: int = 30) -> list[Alarm]:
    """The alarms of the engine fed a warm-up chunk, then single steps, then the rest."""
    steps = next(iter(frames.values())).steps
    cuts = sorted({0, warmup, *range(warmup + 1, warmup + one_by_one), steps})
    engine = Engine()
    latest: dict[str, Alarm] = {}
    for a, b in itertools.pairwise(cuts):
        chunk = {n: replace(f, start=f.start + a * f.step, values=f.values[:, a:b]) for n, f in frames.items()}
        latest.update((x.id, x) for x in engine.scan(chunk).alarms)
    return sorted(latest.values(), key=lambda x: (x.ts, x.node))


def assert_same_alarms(streamed_alarms: list[Alarm], whole: list[Alarm]) -> None:
    """Streamed and whole-run alarms are the same to the last bit: identity, views, scores, evidence,
    escalations and resolution (repr: a float's shortest exact form; NaN alike)."""
    assert [a.as_json() for a in streamed_alarms] == [a.as_json() for a in whole]
    assert repr(streamed_alarms) == repr(whole)


def alarms_of(ctx: Context, detectors: list[Detector] | None = None) -> list[Alarm]:
    """The alarms of ``detectors`` (default: all) and the policy over ``ctx`` as one chunk."""
    found = [f for d in detectors or default_detectors() for f in d.scan(ctx, None)[0]]
    return Policy().decide(ctx, found)
