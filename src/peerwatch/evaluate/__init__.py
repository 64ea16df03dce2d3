"""Scoring detection against scenario ground truth, and the VictoriaMetrics baseline.

``score(alarms, load_labels(path))`` scores one scenario (GUIDE 3.2); ``summarise`` sums several;
``evaluate_dirs`` walks scenario folders, runs the engine (or reads an alarms file) and, with a
VictoriaMetrics URL, the ``outliers_mad`` baseline. Method: docs/evaluation.md.
"""

from peerwatch.evaluate.alarms import AlarmPoint, AlarmsError, read_alarms
from peerwatch.evaluate.baseline_vm import QUERIES, BaselineConfig, BaselineQuery, baseline_alarms, outlier_query
from peerwatch.evaluate.labels import FaultLabel, LabelsError, ScenarioLabels, load_labels, parse_labels
from peerwatch.evaluate.match import EARLY_S, LATE_S, FaultOutcome, localised, window
from peerwatch.evaluate.run import EvaluateError, Evaluation, ScenarioDir, SystemResult, evaluate_dirs, find_scenarios
from peerwatch.evaluate.score import AlarmTally, FaultTally, ScenarioScore, Summary, score, summarise

__all__ = [
    "EARLY_S",
    "LATE_S",
    "QUERIES",
    "AlarmPoint",
    "AlarmTally",
    "AlarmsError",
    "BaselineConfig",
    "BaselineQuery",
    "EvaluateError",
    "Evaluation",
    "FaultLabel",
    "FaultOutcome",
    "FaultTally",
    "LabelsError",
    "ScenarioDir",
    "ScenarioLabels",
    "ScenarioScore",
    "Summary",
    "SystemResult",
    "baseline_alarms",
    "evaluate_dirs",
    "find_scenarios",
    "load_labels",
    "localised",
    "outlier_query",
    "parse_labels",
    "read_alarms",
    "score",
    "summarise",
    "window",
]
