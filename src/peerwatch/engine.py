"""The engine: sources -> frames -> detectors -> findings -> policy and diagnosers -> alarms.

Every detector is causal (a step is judged on data up to that step), so running over a whole
recording gives the alarms a live run would have raised at each step.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from peerwatch.catalog.classify import observed_kind
from peerwatch.catalog.load import Catalog
from peerwatch.detect.accumulation import AccumulationDetector
from peerwatch.detect.agent import AgentCheckDetector
from peerwatch.detect.cluster import ClusterDetector
from peerwatch.detect.context import Context, Series, prepare
from peerwatch.detect.counters import CounterDetector
from peerwatch.detect.failslow import FailSlowDetector
from peerwatch.detect.groups import GroupState, node_activity, workload_groups
from peerwatch.detect.peer import PeerDetector
from peerwatch.detect.policy import Policy, PolicyState
from peerwatch.detect.presence import PresenceDetector
from peerwatch.detect.settings import DetectionSettings
from peerwatch.detect.states import StateDetector
from peerwatch.detect.temporal import TemporalDetector
from peerwatch.detect.training import TrainingShapeDetector
from peerwatch.detect.transitions import TransitionState, held_nodes
from peerwatch.frames import Frame, FrameBuilder, Kind, declared_kind, infer_step
from peerwatch.model import Alarm, Finding, FloatArray, ProblemLog
from peerwatch.series_budget import SeriesBudget
from peerwatch.sources.inputs import read_inputs
from peerwatch.sources.tsdb_http import HttpOptions

STEP_SAMPLE = 5000  # series blocks read ahead to judge the scrape interval


class Detector(Protocol):
    """Scores one chunk of steps after the chunks its state has seen (detect/stream.py);
    ``detect`` is ``scan`` of a whole run."""

    name: str

    def detect(self, ctx: Context) -> list[Finding]: ...

    def scan(self, ctx: Context, state: Any) -> tuple[list[Finding], Any]: ...


def default_detectors(settings: DetectionSettings | None = None) -> list[Detector]:
    st = settings or DetectionSettings()
    return [
        PeerDetector(st.peer),
        CounterDetector(st.counters),
        StateDetector(st.states),
        PresenceDetector(st.presence),
        ClusterDetector(st.cluster),
        AgentCheckDetector(st.agent),
        TrainingShapeDetector(st.training),
        TemporalDetector(st.temporal),
        AccumulationDetector(st.accumulation),
        FailSlowDetector(st.failslow),
    ]


def kind_by_catalog(catalog: Catalog) -> Callable[[str, str | None, FloatArray], Kind]:
    """Counters become rates, unless their values say they already are one (a lying TYPE)."""

    def kind_of(name: str, declared: str | None, values: FloatArray) -> Kind:
        family = catalog.lookup(name)
        mtype = declared or (family.mtype if family is not None else None)
        if mtype is None:
            mtype = catalog.classify(name, frozenset(), None, values).mtype
        if mtype == "untyped" and observed_kind(values) == "counter":
            return "rate"  # node_exporter's vmstat and netstat fields: untyped, but counters
        kind = declared_kind(name, mtype)
        if kind == "rate" and observed_kind(values) == "gauge":
            return "gauge"
        return kind

    return kind_of


def context_of(
    frames: Mapping[str, Frame],
    catalog: Catalog,
    settings: DetectionSettings | None = None,
    *,
    recorded: bool = False,
) -> Context:
    """Frames prepared for detection, with workload groups (``recorded``: see Context)."""
    return replace(_context(frames, catalog, EngineState(), settings or DetectionSettings()), recorded=recorded)


def _context(frames: Mapping[str, Frame], catalog: Catalog, state: EngineState, settings: DetectionSettings) -> Context:
    """The next chunk's context; ``state``'s nodes, groups and preparations move on to it."""
    known = state.nodes if state.steps else None
    series, nodes = prepare(frames, catalog, known, state.prepared)
    any_frame = next(iter(frames.values()))
    steps = any_frame.steps
    activity = node_activity({s.frame.name: s for s in series}, len(nodes), steps, catalog.roles)
    groups, state.groups = workload_groups(
        activity, len(nodes), steps, state.groups, step=any_frame.step, settings=settings.groups
    )
    held, state.transitions = held_nodes(activity, groups, any_frame.step, state.transitions, settings.transitions)
    state.nodes = nodes
    return Context(
        series=tuple(series),
        nodes=nodes,
        start=any_frame.start,
        step=any_frame.step,
        steps=steps,
        groups=groups,
        held=held,
        roles=catalog.roles,
    )


@dataclass
class EngineState:
    """A streamed run so far (detect/stream.py): its nodes in order, the groups' and each detector's
    and the policy's state, and each frame's preparation."""

    steps: int = 0
    nodes: tuple[str, ...] = ()
    groups: GroupState | None = None
    transitions: TransitionState | None = None
    detectors: dict[str, Any] = field(default_factory=dict)
    policy: PolicyState | None = None
    prepared: dict[str, Series] = field(default_factory=dict)


@dataclass(frozen=True)
class Scan:
    """One chunk judged: its context, its findings, and the alarms open at its end or resolved in it."""

    ctx: Context
    findings: tuple[Finding, ...]
    alarms: tuple[Alarm, ...]


class Engine:
    """The whole engine, chunk after chunk with every stage's state carried: a run streamed step by
    step gives the alarms of one ``analyze`` over it."""

    def __init__(
        self,
        catalog: Catalog | None = None,
        detectors: Sequence[Detector] | None = None,
        policy: Policy | None = None,
        ignore: Callable[[Finding], bool] | None = None,
        settings: DetectionSettings | None = None,
    ) -> None:
        self.settings = settings or DetectionSettings()
        self.catalog = catalog or Catalog.default()
        self.detectors = list(detectors or default_detectors(self.settings))
        self.policy = policy or Policy(self.settings.policy)
        self.ignore = ignore  # findings the caller judges elsewhere
        self.state = EngineState()

    def scan(self, frames: Mapping[str, Frame]) -> Scan:
        """Judge the next chunk: ``frames`` on the steps after the last chunk's, rows as in stream.py."""
        st = self.state
        ctx = _context(frames, self.catalog, st, self.settings)
        findings: list[Finding] = []
        for d in self.detectors:
            found, st.detectors[d.name] = d.scan(ctx, st.detectors.get(d.name))
            findings.extend(found)
        if self.ignore is not None:
            findings = [f for f in findings if not self.ignore(f)]
        alarms, st.policy = self.policy.scan(ctx, findings, st.policy)
        st.steps += ctx.steps
        return Scan(ctx, tuple(findings), tuple(alarms))


def detect(ctx: Context, detectors: Sequence[Detector] | None = None) -> list[Finding]:
    out: list[Finding] = []
    for detector in detectors or default_detectors():
        out.extend(detector.detect(ctx))
    return out


def analyze_frames(
    frames: Mapping[str, Frame],
    *,
    catalog: Catalog | None = None,
    policy: Policy | None = None,
    settings: DetectionSettings | None = None,
) -> list[Alarm]:
    """Alarms over aligned frames."""
    if not frames:
        return []
    return analyze_context(frames, catalog=catalog, policy=policy, settings=settings)[1]


def analyze_context(
    frames: Mapping[str, Frame],
    *,
    catalog: Catalog | None = None,
    policy: Policy | None = None,
    settings: DetectionSettings | None = None,
    recorded: bool = False,
) -> tuple[Context, list[Alarm]]:
    """The context of aligned frames (its peer groups among it) and the alarms over it; ``settings``
    are the detectors', the groups' and (unless ``policy`` is given) the policy's thresholds."""
    st = settings or DetectionSettings()
    ctx = context_of(frames, catalog or Catalog.default(), st, recorded=recorded)
    return ctx, (policy or Policy(st.policy)).decide(ctx, detect(ctx, default_detectors(st)))


def read_frames(
    inputs: Sequence[str],
    *,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    now: float | None = None,
    problems: ProblemLog | None = None,
    catalog: Catalog | None = None,
    node: str | None = None,
    budget: SeriesBudget | None = None,
    http: HttpOptions | None = None,
) -> FrameBuilder:
    """Read INPUT arguments onto a grid with the catalogue's notion of counters and node identity.

    Without ``step``, the grid follows the data's scrape interval (at least 30 s), judged from the
    first series read: a cluster scraped every 60 s on a 30-s grid would miss every other step.
    ``node``: the node of recorded series that name none (sources/replay.py); ``budget``: series
    kept per family and in all (frame_store.py), its defaults unless given."""
    catalog = catalog or Catalog.default()
    problems = problems if problems is not None else ProblemLog()
    budget = budget or SeriesBudget()
    blocks = read_inputs(inputs, problems, start=start, end=end, node=node, budget=budget, http=http)
    if step is None:
        head = list(itertools.islice(blocks, STEP_SAMPLE))
        step = infer_step(head)
        blocks = itertools.chain(head, blocks)
    builder = FrameBuilder(
        step,
        problems=problems,
        kind_of=kind_by_catalog(catalog),
        node_labels_for=catalog.node_labels,
        budget=budget,
        now=now,
    )
    return builder.add_all(blocks)


def load_frames(
    inputs: Sequence[str],
    *,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    now: float | None = None,
    problems: ProblemLog | None = None,
    catalog: Catalog | None = None,
    http: HttpOptions | None = None,
) -> dict[str, Frame]:
    """Frames of the INPUT arguments' main stretch of data (``read_frames``; other stretches reported)."""
    return read_frames(
        inputs, step=step, start=start, end=end, now=now, problems=problems, catalog=catalog, http=http
    ).build()


def analyze_segments(
    builder: FrameBuilder,
    *,
    catalog: Catalog | None = None,
    policy: Policy | None = None,
    settings: DetectionSettings | None = None,
) -> Iterator[tuple[Context, list[Alarm]]]:
    """Each stretch of data judged apart, in time order (a gap is a gap, not an outage): its
    context and alarms. One stretch's frames at a time, so memory follows the largest."""
    catalog = catalog or Catalog.default()
    for span in builder.segments():
        frames = builder.frames(span)
        if not any(n for f in frames.values() for n in f.nodes):
            builder.problems.add("input", "no series names a node (node, hostname or instance label): give --node")
            continue
        yield analyze_context(frames, catalog=catalog, policy=policy, settings=settings, recorded=True)


def analyze(
    inputs: Sequence[str],
    *,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    now: float | None = None,
    problems: ProblemLog | None = None,
    settings: DetectionSettings | None = None,
) -> list[Alarm]:
    """``peerwatch analyze``: alarms over recorded files, a TSDB or exporters."""
    catalog = Catalog.default()
    builder = read_frames(inputs, step=step, start=start, end=end, now=now, problems=problems, catalog=catalog)
    return [a for _, alarms in analyze_segments(builder, catalog=catalog, settings=settings) for a in alarms]
