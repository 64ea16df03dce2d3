"""The engine: sources -> frames -> detectors -> findings -> policy and diagnosers -> alarms.

Every detector is causal (a step is judged on data up to that step), so running over a whole
recording gives the alarms a live run would have raised at each step.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peerwatch.catalog.classify import observed_kind
from peerwatch.catalog.load import Catalog
from peerwatch.decide.policy import Policy, PolicyState
from peerwatch.detect.accumulation import AccumulationDetector
from peerwatch.detect.agent import AgentCheckDetector
from peerwatch.detect.cluster import ClusterDetector
from peerwatch.detect.context import Context, IntArray, Series, prepare
from peerwatch.detect.counters import CounterDetector
from peerwatch.detect.failslow import FailSlowDetector
from peerwatch.detect.group_summary import tally
from peerwatch.detect.groups import GroupState, node_activity, workload_groups
from peerwatch.detect.peer import PeerDetector
from peerwatch.detect.presence import PresenceDetector
from peerwatch.detect.states import StateDetector
from peerwatch.detect.stream import Detector as Detector
from peerwatch.detect.stream import grow
from peerwatch.detect.temporal import TemporalDetector
from peerwatch.detect.training import TrainingShapeDetector
from peerwatch.detect.transitions import TransitionState, held_nodes
from peerwatch.frames import Frame, FrameBuilder, Kind, declared_kind, infer_step
from peerwatch.frames.frame_store import Span
from peerwatch.frames.framer import Framer
from peerwatch.frames.parts import file_parts, read_parts
from peerwatch.model import Alarm, Finding, FloatArray, ProblemLog, SeriesBlock
from peerwatch.offload import OFFLOADED, SplitDetector
from peerwatch.series_budget import SeriesBudget
from peerwatch.settings import DetectionSettings
from peerwatch.sources.inputs import read_inputs
from peerwatch.sources.tsdb_http import HttpOptions

STEP_SAMPLE = 5000  # series blocks read ahead to judge the scrape interval
CHUNK_STEPS = 120  # steps a recording is judged at a time: memory follows this, not the recording


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


def context_of(frames: Mapping[str, Frame], catalog: Catalog, settings: DetectionSettings | None = None) -> Context:
    """Frames prepared for detection as the engine's first chunk, with workload groups."""
    return _context(frames, catalog, EngineState(), settings or DetectionSettings())


def _context(
    frames: Mapping[str, Frame],
    catalog: Catalog,
    state: EngineState,
    settings: DetectionSettings,
    recorded: bool = False,
) -> Context:
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
        recorded=recorded,
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


@dataclass(frozen=True)
class Pending:
    """A chunk half judged (``Engine.begin``): its context and the findings of the in-process detectors."""

    ctx: Context
    found: dict[str, list[Finding]]


class Engine:
    """The whole engine, chunk after chunk with every stage's state carried: a run streamed step by
    step gives the alarms of one ``analyze`` over it. With ``jobs`` > 1 the heaviest detectors
    (offload.OFFLOADED) judge most of their families in a child process; close the engine (or use it
    in ``with``)."""

    def __init__(
        self,
        catalog: Catalog | None = None,
        detectors: Sequence[Detector] | None = None,
        policy: Policy | None = None,
        settings: DetectionSettings | None = None,
        *,
        recorded: bool = False,
        jobs: int = 1,
    ) -> None:
        self.settings = settings or DetectionSettings()
        self.catalog = catalog or Catalog.default()
        self.detectors = list(detectors or default_detectors(self.settings))
        self.policy = policy or Policy(self.settings.policy)
        self.recorded = recorded  # a recording's stretch: see Context
        self.state = EngineState()
        away = set(OFFLOADED[: max(0, jobs - 1)])
        self.remote = {d.name: SplitDetector(d) for d in self.detectors if d.name in away}

    def scan(self, frames: Mapping[str, Frame]) -> Scan:
        """Judge the next chunk: ``frames`` on the steps after the last chunk's, rows as in stream.py."""
        return self.finish(self.begin(frames))

    def begin(self, frames: Mapping[str, Frame]) -> Pending:
        """The next chunk's context, sent to the child processes, and the other detectors' findings.
        Chunks are finished in the order begun; one may be begun before the last is finished, so that
        the children always have a chunk to judge."""
        st = self.state
        ctx = _context(frames, self.catalog, st, self.settings, self.recorded)
        st.steps += ctx.steps
        found: dict[str, list[Finding]] = {}
        for name, split in self.remote.items():  # first, so that the children start at once
            found[name], st.detectors[name] = split.begin(ctx, st.detectors.get(name))
        for d in self.detectors:
            if d.name not in self.remote:
                found[d.name], st.detectors[d.name] = d.scan(ctx, st.detectors.get(d.name))
        return Pending(ctx, found)

    def finish(self, pending: Pending) -> Scan:
        """Every detector's findings, in the detectors' order, through the policy."""
        st = self.state
        findings: list[Finding] = []
        for d in self.detectors:
            split = self.remote.get(d.name)
            findings.extend(split.finish(pending.ctx, pending.found[d.name]) if split else pending.found[d.name])
        alarms, st.policy = self.policy.scan(pending.ctx, findings, st.policy)
        return Scan(pending.ctx, tuple(findings), tuple(alarms))

    def close(self) -> None:
        for remote in self.remote.values():
            remote.close()
        self.remote = {}

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def analyze_frames(
    frames: Mapping[str, Frame],
    *,
    catalog: Catalog | None = None,
    policy: Policy | None = None,
    settings: DetectionSettings | None = None,
) -> list[Alarm]:
    """Alarms over aligned frames: the engine fed them as one chunk."""
    if not frames:
        return []
    return sorted(Engine(catalog, policy=policy, settings=settings).scan(frames).alarms, key=lambda a: (a.ts, a.node))


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
    jobs: int = 1,
) -> FrameBuilder:
    """Read INPUT arguments onto a grid with the catalogue's notion of counters and node identity.

    Without ``step``, the grid follows the data's scrape interval (at least 30 s), judged from the
    first series read: a cluster scraped every 60 s on a 30-s grid would miss every other step.
    ``node``: the node of recorded series that name none (sources/replay.py); ``budget``: series
    kept per family and in all (frame_store.py), its defaults unless given; ``jobs`` > 1: one large
    export is read by that many processes (frames/parts.py), with the same result."""
    catalog = catalog or Catalog.default()
    problems = problems if problems is not None else ProblemLog()
    budget = budget or SeriesBudget()

    def builder_for(head: list[SeriesBlock]) -> FrameBuilder:
        return FrameBuilder(
            step or infer_step(head),
            problems=problems,
            kind_of=kind_by_catalog(catalog),
            node_labels_for=catalog.node_labels,
            budget=budget,
            now=now,
        )

    head = 0 if step else STEP_SAMPLE
    split = file_parts(inputs, jobs)
    if split is not None:
        return read_parts(*split, problems, budget, builder_for, node, head)
    blocks = read_inputs(inputs, problems, start=start, end=end, node=node, budget=budget, http=http)
    first = list(itertools.islice(blocks, head))
    return builder_for(first).add_all(itertools.chain(first, blocks))


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


@dataclass(frozen=True)
class Judged:
    """One stretch of a recording judged: its nodes, steps, steps per node in each peer group
    (detect/group_summary.py), alarms and last chunk."""

    nodes: tuple[str, ...]
    steps: int
    groups: IntArray
    alarms: list[Alarm]
    last: Scan


def analyze_segments(
    builder: FrameBuilder,
    *,
    catalog: Catalog | None = None,
    policy: Policy | None = None,
    settings: DetectionSettings | None = None,
    chunk: int = CHUNK_STEPS,
    jobs: int = 1,
) -> Iterator[Judged]:
    """Each stretch of data judged apart, in time order (a gap is a gap, not an outage), by the
    streamed engine fed ``chunk`` steps at a time through the framer the live service uses, so a
    recording streamed step by step gives these alarms. Memory follows a chunk, not the recording.
    With ``jobs`` > 1 the next chunk is framed and begun while a child judges this one (offload.py)."""
    catalog = catalog or Catalog.default()
    for span in builder.segments():
        framer = Framer(
            builder.step, kind_of=builder.kind_of, node_labels=builder.node_labels,
            node_labels_for=builder.node_labels_for,
        )  # fmt: skip
        parts = [Span(lo, min(lo + chunk - 1, span.hi), 0) for lo in range(span.lo, span.hi + 1, chunk)]
        alarms: dict[str, Alarm] = {}
        counts = tally(np.zeros((0, 0), dtype=np.int64))
        scan: Scan | None = None
        # One chunk has nothing to overlap, and starting a child costs more than a short stretch gains.
        several = jobs if len(parts) > 1 else 1
        with Engine(catalog, policy=policy, settings=settings, recorded=True, jobs=several) as engine:
            ahead = 1 if engine.remote else 0  # chunks begun and not finished: the children's queue
            pending: deque[Pending] = deque()
            for i, part in enumerate(parts):
                frames = framer.frames(part.lo, part.steps, builder.cells(part))
                if frames:
                    pending.append(engine.begin(frames))
                while pending and (len(pending) > ahead or i == len(parts) - 1):
                    scan = engine.finish(pending.popleft())
                    alarms.update((a.id, a) for a in scan.alarms)
                    counts = grow(counts, len(scan.ctx.nodes), 0) + tally(scan.ctx.groups)
        if scan is None or not scan.ctx.nodes:
            builder.problems.add("input", "no series names a node (node, hostname or instance label): give --node")
            continue
        ordered = sorted(alarms.values(), key=lambda a: (a.ts, a.node))
        yield Judged(scan.ctx.nodes, span.steps, counts, ordered, scan)


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
    return [a for judged in analyze_segments(builder, catalog=catalog, settings=settings) for a in judged.alarms]
