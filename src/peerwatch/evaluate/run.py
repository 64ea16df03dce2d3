"""Walk scenario folders, get each one's alarms (engine, an alarms file, the VM baseline), score them.

A scenario folder holds ``labels.json`` and its recording (``metrics.*``, else any ``*.jsonl`` /
``*.prom`` / ``*.txt`` file, gzipped or not, that is not an ``alarms*`` file). A folder without
``labels.json`` is searched below for scenario folders.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from peerwatch.evaluate.alarms import AlarmLike, read_alarms
from peerwatch.evaluate.baseline_vm import BaselineConfig, baseline_alarms, scenario_tag
from peerwatch.evaluate.labels import ScenarioLabels, load_labels
from peerwatch.evaluate.score import ScenarioScore, Summary, score, summarise
from peerwatch.model import ProblemLog

LABELS = "labels.json"
RECORDING_SUFFIXES = (".jsonl", ".prom", ".txt")
ENGINE = "peerwatch"
BASELINE = "vm outliers_mad"


class EvaluateError(ValueError):
    """Scenario folders or an alarms file that cannot be evaluated; names the path."""


class AnalyzeFn(Protocol):
    """The engine's offline entry (``peerwatch.engine.analyze``)."""

    def __call__(
        self,
        inputs: Sequence[str],
        *,
        step: float | None = None,
        now: float | None = None,
        problems: ProblemLog | None = None,
    ) -> Sequence[AlarmLike]: ...


def engine_analyze() -> AnalyzeFn:
    """The real engine, imported only when an evaluation needs it."""
    try:
        module = importlib.import_module("peerwatch.engine")
    except ModuleNotFoundError as exc:
        if exc.name != "peerwatch.engine":
            raise
        raise EvaluateError(
            "the detection engine (peerwatch.engine) is not installed; score a file with --alarms"
        ) from None
    return cast(AnalyzeFn, module.analyze)


@dataclass(frozen=True, slots=True)
class ScenarioDir:
    """A scenario: its folder, validated labels and recording files."""

    path: Path
    labels: ScenarioLabels
    metrics: tuple[Path, ...]

    @property
    def name(self) -> str:
        return self.labels.name


def _recording_files(folder: Path) -> tuple[Path, ...]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != LABELS)
    named = [p for p in files if p.name.startswith("metrics")]
    if named:
        return tuple(named)
    return tuple(
        p
        for p in files
        if not p.name.startswith(("alarms", "."))
        and any(p.name.removesuffix(".gz").endswith(s) for s in RECORDING_SUFFIXES)
    )


def find_scenarios(dirs: Sequence[Path]) -> list[ScenarioDir]:
    """Every scenario folder in ``dirs`` (a scenario folder itself, or a parent of several), in name order."""
    folders: list[Path] = []
    for d in dirs:
        if not d.is_dir():
            raise EvaluateError(f"{d}: not a folder")
        found = [d] if (d / LABELS).is_file() else sorted(p.parent for p in d.rglob(LABELS))
        if not found:
            raise EvaluateError(f"{d}: no {LABELS} in it or in any folder below it")
        folders += [f for f in found if f.resolve() not in {x.resolve() for x in folders}]
    out = []
    for folder in folders:
        metrics = _recording_files(folder)
        if not metrics:
            raise EvaluateError(f"{folder}: {LABELS} but no recording (metrics.jsonl, *.prom, ...) beside it")
        out.append(ScenarioDir(folder, load_labels(folder / LABELS), metrics))
    return out


@dataclass(frozen=True, slots=True)
class SystemResult:
    """One detector's scores over all scenarios, with the time each scenario took."""

    name: str
    scores: tuple[ScenarioScore, ...]
    seconds: tuple[float, ...]
    input_problems: int = 0

    @property
    def summary(self) -> Summary:
        return summarise(self.scores)

    def as_json(self) -> dict[str, object]:
        return {
            "system": self.name,
            "seconds": round(sum(self.seconds), 3),
            "input_problems": self.input_problems,
            **self.summary.as_json(),
            "scenarios": [
                s.as_json() | {"seconds": round(t, 3)} for s, t in zip(self.scores, self.seconds, strict=True)
            ],
        }


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Results of every system over the same scenarios."""

    scenarios: tuple[ScenarioDir, ...]
    systems: tuple[SystemResult, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "scenarios": [str(s.path) for s in self.scenarios],
            "systems": [s.as_json() for s in self.systems],
        }


def _alarms_file(sc: ScenarioDir, alarms: Path, count: int) -> Path:
    inside = sc.path / alarms
    if not alarms.is_absolute() and inside.is_file():
        return inside
    if alarms.is_file() and count == 1:
        return alarms
    if alarms.is_file():
        raise EvaluateError(
            f"{alarms}: one alarms file for {count} scenarios; put {alarms.name} in each scenario folder"
        )
    raise EvaluateError(f"{alarms}: no such alarms file (nor {inside})")


def evaluate_dirs(
    dirs: Sequence[Path],
    *,
    analyze: AnalyzeFn | None = None,
    alarms: Path | None = None,
    baseline_url: str | None = None,
    baseline: BaselineConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> Evaluation:
    """Score every scenario under ``dirs``.

    Alarms come from ``alarms`` (an ``analyze`` output: a path inside each scenario folder, or one
    file for a single scenario) when given, else from ``analyze`` (default: the real engine).
    With ``baseline_url`` the VictoriaMetrics ``outliers_mad`` baseline is scored as well.
    """
    scenarios = find_scenarios(dirs)
    say = progress or (lambda _msg: None)
    if alarms is None and analyze is None:
        analyze = engine_analyze()
    scores, seconds, problems_total = [], [], 0
    for sc in scenarios:
        t0 = time.perf_counter()
        if alarms is not None:
            got: Sequence[AlarmLike] = read_alarms(_alarms_file(sc, alarms, len(scenarios)))
        else:
            assert analyze is not None
            problems = ProblemLog()
            got = analyze([str(p) for p in sc.metrics], problems=problems)  # the grid as `analyze` picks it
            problems_total += len(problems)
        scores.append(score(got, sc.labels))
        seconds.append(time.perf_counter() - t0)
        say(f"{sc.name}: {len(got)} alarms in {seconds[-1]:.1f} s")
    systems = [SystemResult(ENGINE, tuple(scores), tuple(seconds), problems_total)]
    if baseline_url:
        b_scores, b_seconds = [], []
        for sc in scenarios:
            t0 = time.perf_counter()
            tag = scenario_tag(sc.name, sc.path / LABELS)
            b_alarms = baseline_alarms(baseline_url, sc.metrics, sc.labels, tag, baseline)
            b_scores.append(score(b_alarms, sc.labels))
            b_seconds.append(time.perf_counter() - t0)
            say(f"{sc.name}: baseline {len(b_alarms)} alarms in {b_seconds[-1]:.1f} s")
        systems.append(SystemResult(BASELINE, tuple(b_scores), tuple(b_seconds)))
    return Evaluation(tuple(scenarios), tuple(systems))
