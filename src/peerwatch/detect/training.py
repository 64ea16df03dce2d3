"""A training job's throughput or MFU curve, classified by shape (``peerwatch.training``) as findings.

Recognised series: the catalogue's exporter ``training`` and, for families the catalogue does not
know, names ending in ``_tokens_per_second``, ``_samples_per_second`` (also ``_per_sec``, and
steps, batches, sequences, iterations), ``_mfu``, ``model_flops_utilization`` or
``training_throughput``. Series with equal labels apart from identity and rank labels are one
job; several series of a job are its ranks (the job's curve is their mean). Every ``stride_s`` the
job's trailing window is classified on data up to that step only; a shape found by every
evaluation over ``confirm_s`` holds until the next evaluation. The expected level is the
settings' value for the metric, else the job's best sustained level so far: a job that never ran
at full speed cannot be judged. Findings are on node ``cluster``, except a straggler rank, which
is placed on its host.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from peerwatch.detect.context import IDENTITY_LABELS, Context, Series
from peerwatch.model import Evidence, Finding, FloatArray, Labels
from peerwatch.training import DEFAULT_THRESHOLDS, SeriesError, Shape, ShapeResult, Thresholds, classify_series

TRAINING_EXPORTER = "training"
TRAINING_NAMES = re.compile(
    r"(^|_)((tokens|samples|sequences|batches|steps|iterations)_per_(second|sec)"
    r"|mfu|model_flops_utili[sz]ation|training_throughput)$"
)
RANK_LABELS = ("rank", "global_rank", "rank_id", "local_rank")  # the first three name a global rank


@dataclass(frozen=True)
class TrainingSettings:
    window_s: float = 7200.0  # trailing window classified at each evaluation
    stride_s: float = 300.0  # evaluate this often; the verdict holds in between
    # A shape counts once every evaluation over this span found it: a checkpoint caught at the
    # window's end looks like a level drop for one evaluation, a fault stays.
    confirm_s: float = 600.0
    best_s: float = 600.0  # a level held this long (trailing median) counts as reached
    scale: float = 16.0  # score = scale x confidence: a sure shape scores like a hard fault
    report: float = 10.0  # confidence 0.6: at 0.5 a long checkpoint early in a run passes for a degraded link
    expected: Mapping[str, float] = field(default_factory=dict)  # metric name -> full speed, if known
    thresholds: Thresholds = DEFAULT_THRESHOLDS


def is_training(s: Series) -> bool:
    """A job-level throughput/MFU family: catalogued as such, or an unknown family named like one."""
    if s.family.exporter == TRAINING_EXPORTER:
        return True
    return not s.family.known and TRAINING_NAMES.search(s.frame.name) is not None


def jobs(s: Series) -> dict[Labels, list[int]]:
    """Rows of each job: series equal in every label but identity and rank labels."""
    out: dict[Labels, list[int]] = {}
    for r, key in enumerate(s.frame.keys):
        job = tuple((k, v) for k, v in key.labels if k not in IDENTITY_LABELS and k not in RANK_LABELS)
        out.setdefault(job, []).append(r)
    return out


def sustained_best(x: FloatArray, window: int) -> FloatArray:
    """Highest trailing median (over ``window`` steps, half of them present) reached up to each step."""
    padded = np.concatenate([np.full(window - 1, np.nan), x])
    view = np.lib.stride_tricks.sliding_window_view(padded, window)
    enough = np.sum(~np.isnan(view), axis=1) >= max(1, window // 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows
        med = np.where(enough, np.nanmedian(view, axis=1), np.nan)
    best: FloatArray = np.fmax.accumulate(med)
    return best


def _rank_ids(s: Series, rows: list[int]) -> list[int]:
    """Global ranks from the rank label when every row has a distinct one, else row positions."""
    for label in RANK_LABELS[:3]:
        raw = [s.frame.keys[r].get(label) or "" for r in rows]
        if all(x.isdigit() for x in raw) and len(set(raw)) == len(raw):
            return [int(x) for x in raw]
    return list(range(len(rows)))


class TrainingShapeDetector:
    """Scores non-healthy shapes of training throughput/MFU curves."""

    name = "training"

    def __init__(self, settings: TrainingSettings | None = None) -> None:
        self.settings = settings or TrainingSettings()

    def detect(self, ctx: Context) -> list[Finding]:
        out: list[Finding] = []
        for s in ctx.series:
            if is_training(s):
                for labels, rows in jobs(s).items():
                    out.extend(self._job(ctx, s, labels, rows))
        return out

    def _job(self, ctx: Context, s: Series, labels: Labels, rows: list[int]) -> list[Finding]:
        st = self.settings
        v = s.values[rows]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # steps no rank reported
            job = np.nanmean(v, axis=0) if len(rows) > 1 else v[0]
        per_rank = v if len(rows) > 1 else None
        ids = _rank_ids(s, rows)
        fixed = st.expected.get(s.frame.name)
        best = sustained_best(job, max(1, round(st.best_s / ctx.step))) if fixed is None else None
        window = max(st.thresholds.min_points, round(st.window_s / ctx.step))
        stride = max(1, round(st.stride_s / ctx.step))
        confirm = 1 + round(st.confirm_s / (stride * ctx.step))  # evaluations that must agree
        present = np.cumsum(~np.isnan(job))
        idx = np.maximum.accumulate(np.where(np.isnan(job), -1, np.arange(job.size)))
        last = np.where(idx >= 0, job[np.maximum(idx, 0)], np.nan)  # latest value reported so far
        times = ctx.timestamps
        out: list[Finding] = []
        agreed: list[str | None] = []  # diagnosis of each evaluation so far
        for c in range(stride - 1, ctx.steps, stride):
            agreed.append(None)
            lo = max(0, c - window + 1)
            recent = present[c] - (present[c - stride] if c >= stride else 0)
            if present[c] - (present[lo - 1] if lo else 0) < st.thresholds.min_points or recent == 0:
                continue  # too little data, or the job no longer reports
            expected = fixed if fixed is not None else (float(best[c]) if best is not None and best[c] > 0 else None)
            try:
                result = classify_series(
                    times[lo : c + 1],
                    job[lo : c + 1],
                    expected,
                    per_rank[:, lo : c + 1] if per_rank is not None else None,
                    rank_ids=ids,
                    thresholds=st.thresholds,
                )
            except SeriesError:
                continue
            score = st.scale * result.confidence
            if result.shape is Shape.healthy or score < st.report:
                continue
            agreed[-1] = result.diagnosis
            if len(agreed) < confirm or len(set(agreed[-confirm:])) != 1:
                continue
            note = f"{result.shape.value} (confidence {result.confidence:.2f}): " + "; ".join(result.evidence[:2])
            evidence = Evidence(s.frame.name, labels, float(last[c]), expected, None, note[:300])
            for node in self._nodes(ctx, s, rows, ids, result):
                for col in range(c, min(c + stride, ctx.steps)):
                    out.append(
                        Finding(float(times[col]), node, "node", self.name, s.frame.name, score, evidence,
                                hint=result.diagnosis)
                    )  # fmt: skip
        return out

    @staticmethod
    def _nodes(ctx: Context, s: Series, rows: list[int], ids: list[int], result: ShapeResult) -> list[str]:
        """``cluster``, or the hosts of the straggler ranks where the series name them."""
        if result.shape is not Shape.straggler or not result.ranks:
            return ["cluster"]
        known = set(ctx.nodes)
        row_of = dict(zip(ids, rows, strict=True))
        hosts = {s.frame.nodes[row_of[rank]] for rank in result.ranks if rank in row_of}
        return sorted(h for h in hosts if h in known) or ["cluster"]
