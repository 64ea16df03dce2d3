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

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from peerwatch.detect.context import IDENTITY_LABELS, Context, Series
from peerwatch.detect.stream import keep_tail, with_tail
from peerwatch.model import Evidence, Finding, FloatArray, Labels
from peerwatch.training import DEFAULT_THRESHOLDS, SeriesError, Shape, ShapeResult, Thresholds, classify_series

TRAINING_EXPORTER = "training"
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
    """A job-level throughput/MFU family: catalogued as such, or an unknown family named like one
    (the catalogue's ``training_throughput`` rule)."""
    return s.family.exporter == TRAINING_EXPORTER


def job_of(labels: Labels) -> Labels:
    """A series' job: its labels but identity and rank labels."""
    return tuple((k, v) for k, v in labels if k not in IDENTITY_LABELS and k not in RANK_LABELS)


def trailing_median(x: FloatArray, window: int) -> FloatArray:
    """Median over the ``window`` steps up to each one, where half of them are present (else NaN)."""
    padded = np.concatenate([np.full(window - 1, np.nan), x])
    view = np.lib.stride_tricks.sliding_window_view(padded, window)
    enough = np.sum(~np.isnan(view), axis=1) >= max(1, window // 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows
        med: FloatArray = np.where(enough, np.nanmedian(view, axis=1), np.nan)
    return med


def sustained_best(x: FloatArray, window: int) -> FloatArray:
    """Highest trailing median (over ``window`` steps, half of them present) reached up to each step."""
    best: FloatArray = np.fmax.accumulate(trailing_median(x, window))
    return best


def _rank_ids(s: Series, rows: list[int]) -> list[int]:
    """Global ranks from the rank label when every row has a distinct one, else row positions."""
    for label in RANK_LABELS[:3]:
        raw = [s.frame.keys[r].get(label) or "" for r in rows]
        if all(x.isdigit() for x in raw) and len(set(raw)) == len(raw):
            return [int(x) for x in raw]
    return list(range(len(rows)))


@dataclass
class Job:
    """One job across chunks: its rows and rank ids, the best sustained level it reached, the
    diagnoses of its last evaluations, and the findings of a verdict that holds past the chunk."""

    rows: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    best: float = np.nan
    agreed: list[str | None] = field(default_factory=list)  # the last ``confirm`` evaluations
    holding: list[Finding] = field(default_factory=list)  # one per node, stamped at each step held
    until: int = 0  # the verdict holds up to this step of the run (excluded)


@dataclass
class TrainingState:
    """Steps scanned; per training frame its last steps (as many as a job looks back: window,
    stride, best level; rows x steps) and its jobs; how many of its rows were read into jobs."""

    step: int = 0
    tails: dict[str, FloatArray] = field(default_factory=dict)
    jobs: dict[str, dict[Labels, Job]] = field(default_factory=dict)
    read: dict[str, int] = field(default_factory=dict)

    def jobs_of(self, s: Series) -> dict[Labels, Job]:
        """The jobs of ``s``; rows new since the last call join theirs (or make a new one)."""
        out = self.jobs.setdefault(s.frame.name, {})
        changed = set()
        for r in range(self.read.get(s.frame.name, 0), len(s.frame.keys)):
            labels = job_of(s.frame.keys[r].labels)
            out.setdefault(labels, Job()).rows.append(r)
            changed.add(labels)
        for labels in changed:
            out[labels].ids = _rank_ids(s, out[labels].rows)
        self.read[s.frame.name] = len(s.frame.keys)
        return out


class TrainingShapeDetector:
    """Scores non-healthy shapes of training throughput/MFU curves."""

    name = "training"

    def __init__(self, settings: TrainingSettings | None = None) -> None:
        self.settings = settings or TrainingSettings()

    def scan(self, ctx: Context, state: TrainingState | None) -> tuple[list[Finding], TrainingState]:
        st = state or TrainingState()
        look_back = self._steps(ctx)[0] - 1
        out: list[Finding] = []
        for s in ctx.series:
            if is_training(s):
                values = with_tail(st.tails.get(s.frame.name), s.values, np.nan)
                for labels, job in st.jobs_of(s).items():
                    out.extend(self._job(ctx, s, labels, job, values, st.step))
                st.tails[s.frame.name] = keep_tail(values, look_back)
        st.step += ctx.steps
        return out, st

    def _steps(self, ctx: Context) -> tuple[int, int, int, int, int]:
        """(look-back, window, stride, evaluations that must agree, best-level window) in steps."""
        st = self.settings
        window = max(st.thresholds.min_points, round(st.window_s / ctx.step))
        stride = max(1, round(st.stride_s / ctx.step))
        confirm = 1 + round(st.confirm_s / (stride * ctx.step))
        best = max(1, round(st.best_s / ctx.step))
        return max(window, stride, best), window, stride, confirm, best

    def _job(self, ctx: Context, s: Series, labels: Labels, job: Job, values: FloatArray, first: int) -> list[Finding]:
        """Findings of one job over the chunk: ``values`` are the frame's last steps then the chunk's,
        ``first`` the chunk's first step in the run."""
        st = self.settings
        _, window, stride, confirm, best_window = self._steps(ctx)
        # ``values`` start k steps before the chunk (e = k + c for its step c): enough for the window, the
        # stride and the best-level window, so every look-back below stays inside them.
        k = values.shape[1] - ctx.steps
        v = values[job.rows]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # steps no rank reported
            mean = np.nanmean(v, axis=0) if len(job.rows) > 1 else v[0]
        per_rank = v if len(job.rows) > 1 else None
        fixed = st.expected.get(s.frame.name)
        best = None
        if fixed is None:
            med = trailing_median(mean[max(0, k - best_window + 1) :], best_window)[-ctx.steps :]
            best = np.fmax.accumulate(np.concatenate([[job.best], med]))[1:]
            job.best = float(best[-1])
        present = np.cumsum(~np.isnan(mean))
        idx = np.maximum.accumulate(np.where(np.isnan(mean), -1, np.arange(mean.size)))
        # Latest value reported so far: an evaluation needs one within its stride, so it is in ``values``.
        last = np.where(idx >= 0, mean[np.maximum(idx, 0)], np.nan)
        times = ctx.start + ctx.step * np.arange(-k, ctx.steps, dtype=np.float64)
        # The verdict of the last chunk's last evaluation holds into this one.
        out = [
            replace(f, ts=float(times[k + c])) for f in job.holding for c in range(min(job.until - first, ctx.steps))
        ]
        for c in range((stride - 1 - first) % stride, ctx.steps, stride):  # every stride-th step of the run
            e = k + c
            job.agreed = [*job.agreed, None][-confirm:]
            lo = max(0, e - window + 1)
            recent = present[e] - (present[e - stride] if e >= stride else 0)
            if present[e] - (present[lo - 1] if lo else 0) < st.thresholds.min_points or recent == 0:
                continue  # too little data, or the job no longer reports
            expected = fixed if fixed is not None else (float(best[c]) if best is not None and best[c] > 0 else None)
            try:
                result = classify_series(
                    times[lo : e + 1],
                    mean[lo : e + 1],
                    expected,
                    per_rank[:, lo : e + 1] if per_rank is not None else None,
                    rank_ids=job.ids,
                    thresholds=st.thresholds,
                )
            except SeriesError:
                continue
            score = st.scale * result.confidence
            if result.shape is Shape.healthy or score < st.report:
                continue
            job.agreed[-1] = result.diagnosis
            if len(job.agreed) < confirm or len(set(job.agreed)) != 1:
                continue
            note = f"{result.shape.value} (confidence {result.confidence:.2f}): " + "; ".join(result.evidence[:2])
            evidence = Evidence(s.frame.name, labels, float(last[e]), expected, None, note[:300])
            held = [
                Finding(float(times[e]), node, "node", self.name, s.frame.name, score, evidence, hint=result.diagnosis)
                for node in self._nodes(ctx, s, job, result)
            ]
            out += [replace(f, ts=float(times[k + col])) for f in held for col in range(c, min(c + stride, ctx.steps))]
            job.holding, job.until = held, first + c + stride
        return out

    @staticmethod
    def _nodes(ctx: Context, s: Series, job: Job, result: ShapeResult) -> list[str]:
        """``cluster``, or the hosts of the straggler ranks where the series name them."""
        if result.shape is not Shape.straggler or not result.ranks:
            return ["cluster"]
        known = set(ctx.nodes)
        row_of = dict(zip(job.ids, job.rows, strict=True))
        hosts = {s.frame.nodes[row_of[rank]] for rank in result.ranks if rank in row_of}
        return sorted(h for h in hosts if h in known) or ["cluster"]
