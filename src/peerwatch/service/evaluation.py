"""One evaluation: the buffer's window into frames, through the engine, into alarms and latest scores.

The same stages as ``peerwatch analyze`` (``engine.context_of``, ``engine.detect``, the policy),
kept apart only so that the findings of the newest step are at hand for ``/metrics``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from peerwatch.catalog.load import Catalog
from peerwatch.detect.policy import Policy
from peerwatch.engine import context_of, detect, kind_by_catalog
from peerwatch.frames import FrameBuilder
from peerwatch.model import Alarm, ProblemLog
from peerwatch.service.buffer import SampleBuffer
from peerwatch.service.workload import WorkloadGroup, groups_at_end

ScoreKey = tuple[str, str, str]  # node, component, metric


@dataclass(frozen=True)
class Evaluation:
    """The engine's view of one window."""

    start: float  # first step with data
    end: float  # last step
    nodes: tuple[str, ...]
    alarms: tuple[Alarm, ...]
    scores: dict[ScoreKey, float] = field(default_factory=dict)  # findings at the last step
    series: int = 0
    seconds: float = 0.0
    groups: dict[str, WorkloadGroup] = field(default_factory=dict)  # node -> workload group at the last step


class Evaluator:
    """Runs the engine over the buffer's window ending at a step."""

    def __init__(
        self, step: float, window: float, node_labels: tuple[str, ...], catalog: Catalog | None = None
    ) -> None:
        self.step, self.window, self.node_labels = step, window, node_labels
        self.catalog = catalog or Catalog.default()
        self.policy = Policy()

    @property
    def quiet(self) -> float:
        """Data seconds after which the policy would have resolved even a sure hard failure."""
        return self.policy.settings.quiet_sure * self.step

    def evaluate(self, buffer: SampleBuffer, end: float, now: float) -> Evaluation | None:
        """Alarms over ``(end - window, end]``; None when the buffer holds nothing there."""
        t0 = time.perf_counter()
        builder = FrameBuilder(
            self.step,
            problems=ProblemLog(limit=20),
            kind_of=kind_by_catalog(self.catalog),
            node_labels=self.node_labels,
            node_labels_for=self.catalog.node_labels,
            now=now,
        )
        builder.add_all(buffer.blocks(end - self.window, end))
        frames = builder.build()
        if not frames:
            return None
        ctx = context_of(frames, self.catalog)
        # The service judges its own sight (blind.py) from the source itself; the engine's reading
        # of "everything silent at once" in the data would be the same incident twice.
        findings = [f for f in detect(ctx) if f.hint != "monitoring_blind"]
        alarms = self.policy.decide(ctx, findings)
        last = ctx.start + (ctx.steps - 1) * ctx.step
        scores: dict[ScoreKey, float] = defaultdict(float)
        for f in findings:
            if f.ts >= last:
                key = (f.node, f.component, f.evidence.metric)
                scores[key] = max(scores[key], f.score)
        return Evaluation(
            start=ctx.start,
            end=last,
            nodes=tuple(ctx.nodes),
            alarms=tuple(alarms),
            scores=dict(scores),
            series=sum(len(f.keys) for f in frames.values()),
            seconds=time.perf_counter() - t0,
            groups=groups_at_end(ctx),
        )
