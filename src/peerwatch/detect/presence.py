"""Presence: what stopped reporting, and what still does.

Every exporter of a node silent -> the node is unreachable. One exporter silent (or ``up`` 0)
while the node's others report -> that exporter is down, and the node is still watched through
the others. A GPU whose series vanish from every exporter while the node's other GPUs still
report -> the GPU fell off the bus. Only what was seen before can go missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from peerwatch.catalog.schema import Unit
from peerwatch.detect.context import Context, IntArray, Series
from peerwatch.detect.grouped import fold_into
from peerwatch.detect.stream import grow
from peerwatch.model import BoolArray, Evidence, Finding, FloatArray

REFERENCE_STEP = 30.0  # the step the per-step scores are written for


@dataclass(frozen=True)
class PresenceSettings:
    """Scores per consecutive silent 30 s (scaled to the grid's step): a missed scrape or two is
    normal, minutes of silence are not. A minute of silence is what makes a sure finding whatever
    the scrape interval, so a cluster scraped every 60 s is alarmed after one silent step."""

    memory: int = 120  # steps for which something seen is expected to go on reporting
    exporter_per_step: float = 1.5  # 4 silent steps (2 min) reach 6
    node_per_step: float = 7.5  # a node silent as a whole: the second silent step reaches 15
    gpu_per_step: float = 7.5  # the second silent step reaches 15: alarmed within 2 steps
    blind_share: float = 0.5  # this share of nodes silent at once: the monitoring, not the nodes


def _ints(n: int = 0) -> IntArray:
    return np.zeros(n, dtype=np.int64)


def run_length(flag: BoolArray, before: IntArray | None = None) -> IntArray:
    """How many consecutive steps, up to and including each one, ``flag`` has held.

    ``before``: each row's run at the step before the first (a run carried from an earlier chunk)."""
    steps = flag.shape[1]
    idx = np.arange(steps)
    start = -1 if before is None else -1 - before[:, None]
    last_false = np.maximum.accumulate(np.where(~flag, idx, start), axis=1)
    runs: IntArray = np.where(flag, idx - last_false, 0)
    return runs


def seen_recently(present: BoolArray, age: IntArray, memory: int) -> tuple[BoolArray, IntArray]:
    """Whether each row was present at some step in the ``memory`` steps before each one, and each
    row's age after the last step.

    An age is how many steps ago, counted from the step after, a row was last present (1: at the
    last step); ``memory + 1`` stands for "not within memory", so it never overflows."""
    idx = np.arange(present.shape[1])
    last = np.maximum.accumulate(np.where(present, idx, -age[:, None]), axis=1)  # last present, up to each step
    before = np.concatenate([-age[:, None], last[:, :-1]], axis=1)  # ...up to the step before
    seen: BoolArray = idx - before <= memory
    return seen, np.minimum(present.shape[1] - last[:, -1], memory + 1)


@dataclass
class Track:
    """Per entity (target, node or GPU): its age (see ``seen_recently``) and its current alarm run."""

    age: IntArray = field(default_factory=_ints)
    run: IntArray = field(default_factory=_ints)

    def seen(self, present: BoolArray, memory: int) -> BoolArray:
        """``seen_recently`` over this chunk; entities new in it were never seen before."""
        seen, self.age = seen_recently(present, grow(self.age, present.shape[0], memory + 1), memory)
        return seen

    def runs(self, flag: BoolArray) -> IntArray:
        """``run_length`` continuing the runs of the chunks before."""
        runs = run_length(flag, grow(self.run, flag.shape[0], 0))
        self.run = runs[:, -1].copy()
        return runs


@dataclass
class PresenceState:
    """The targets (node, instance) and GPUs (node, component) met so far with their tracks, each
    frame's rows mapped to them (one int per row and per GPU row)."""

    rows: dict[str, tuple[IntArray, IntArray]] = field(default_factory=dict)  # frame -> target, GPU (if any) by row
    targets: dict[tuple[int, str], int] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)  # of each target
    target_node: IntArray = field(default_factory=_ints)
    gpus: dict[tuple[int, str], int] = field(default_factory=dict)
    gpu_node: IntArray = field(default_factory=_ints)
    target: Track = field(default_factory=Track)
    node: Track = field(default_factory=Track)
    gpu: Track = field(default_factory=Track)

    def map_rows(self, s: Series) -> tuple[IntArray, IntArray]:
        """Target and GPU index (-1: none) of each row of ``s`` (GPU: empty unless a GPU family); only rows
        new since the last call are read."""
        target, gpu = self.rows.get(s.frame.name, (_ints(), _ints()))
        new = range(target.size, len(s.frame.keys))
        if not new:
            return target, gpu
        is_gpu = s.family.unit is Unit.gpu
        new_targets: list[int] = []
        new_gpus: list[int] = []
        nodes: list[int] = []
        gpu_nodes: list[int] = []
        for r in new:
            n = int(s.node_index[r])
            key = s.frame.keys[r]
            instance = key.get("instance") or ""
            t = g = -1
            if n >= 0:
                t = self.targets.setdefault((n, instance), len(self.targets))
                if t == len(self.jobs):  # a new target
                    self.jobs.append(key.get("job") or instance)
                    nodes.append(n)
                if is_gpu and s.components[r].startswith("gpu/"):
                    g = self.gpus.setdefault((n, s.components[r]), len(self.gpus))
                    if g == self.gpu_node.size + len(gpu_nodes):  # a new GPU
                        gpu_nodes.append(n)
            new_targets.append(t)
            new_gpus.append(g)
        self.target_node = np.concatenate([self.target_node, np.array(nodes, dtype=np.int64)])
        self.gpu_node = np.concatenate([self.gpu_node, np.array(gpu_nodes, dtype=np.int64)])
        target = np.concatenate([target, np.array(new_targets, dtype=np.int64)])
        if is_gpu:  # other families' rows have no GPU: no map
            gpu = np.concatenate([gpu, np.array(new_gpus, dtype=np.int64)])
        self.rows[s.frame.name] = (target, gpu)
        return target, gpu


def _or_into(out: BoolArray, index: IntArray, rows: BoolArray) -> None:
    """``out[index[r]] |= rows[r]`` for every row with an index."""
    ok = index >= 0
    if ok.all():
        fold_into(np.logical_or, out, index, rows)
    elif ok.any():
        fold_into(np.logical_or, out, index[ok], rows[ok])


class PresenceDetector:
    name = "presence"

    def __init__(self, settings: PresenceSettings | None = None) -> None:
        self.settings = settings or PresenceSettings()

    def scan(self, ctx: Context, state: PresenceState | None) -> tuple[list[Finding], PresenceState]:
        st = state or PresenceState()
        maps = [(s, *st.map_rows(s)) for s in ctx.series]
        present = np.zeros((len(st.targets), ctx.steps), dtype=bool)
        down = np.zeros_like(present)
        gpu_present = np.zeros((len(st.gpus), ctx.steps), dtype=bool)
        up = set(ctx.roles.families("scrape_up"))
        for s, target, gpu in maps:
            p = ~np.isnan(s.values)
            if s.frame.name in up:
                p &= np.nan_to_num(s.values, nan=0.0) > 0
                _or_into(down, target, s.values == 0)
            _or_into(present, target, p)
            if gpu.size:
                _or_into(gpu_present, gpu, p)
        # `up` (scrape_up) 0 overrides the target's other series for that step (they may be stale copies).
        present &= ~down
        node_present = np.zeros((len(ctx.nodes), ctx.steps), dtype=bool)
        fold_into(np.logical_or, node_present, st.target_node, present)
        times = ctx.timestamps
        out = self._targets(ctx, times, st, present, node_present)
        out += self._nodes(ctx, times, st, node_present)
        out += self._gpus(ctx, times, st, gpu_present)
        return out, st

    def _finding(
        self, ctx: Context, ts: float, node: int, component: str, signal: str, hint: str, note: str, run: int
    ) -> Finding:
        per_step = {
            "exporter_down": self.settings.exporter_per_step,
            "node_unreachable": self.settings.node_per_step,
            "gpu_fallen_off_bus": self.settings.gpu_per_step,
        }[hint]
        score = per_step * run * ctx.step / REFERENCE_STEP
        return Finding(
            ts=ts,
            node=ctx.nodes[node],
            component=component,
            detector=self.name,
            signal=signal,
            score=score,
            evidence=Evidence(signal, (), 0.0, 1.0, None, note),
            hint=hint,
        )

    def _targets(
        self, ctx: Context, times: FloatArray, st: PresenceState, present: BoolArray, node_present: BoolArray
    ) -> list[Finding]:
        seen = st.target.seen(present, self.settings.memory)
        silent = ~present & seen & node_present[st.target_node]
        runs = st.target.runs(silent)
        targets = list(st.targets)
        out = []
        for i, c in zip(*np.nonzero(silent), strict=True):
            node, instance = targets[i]
            job = st.jobs[i]
            note = f"{job} ({instance}) silent, the node's other exporters report"
            out.append(
                self._finding(ctx, float(times[c]), node, "node", f"absent:{job}", "exporter_down", note, runs[i, c])
            )
        return out

    def _nodes(self, ctx: Context, times: FloatArray, st: PresenceState, node_present: BoolArray) -> list[Finding]:
        seen = st.node.seen(node_present, self.settings.memory)
        gone = ~node_present & seen
        if ctx.recorded:  # a step of a recording where no node reports at all is a gap in the data
            gone &= node_present.any(axis=0)
        # Most of the cluster silent at once is peerwatch (or its source) not seeing, not N dead nodes:
        # no finding. The service judges its sight from the source itself (alarms/blind.py), the
        # one lifecycle of a ``monitoring_blind`` alarm.
        share = gone.sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
        blind = (share >= self.settings.blind_share) & (gone.sum(axis=0) >= 3)
        runs = st.node.runs(gone & ~blind[None, :])
        out = []
        for n, c in zip(*np.nonzero(gone & ~blind[None, :]), strict=True):
            note = "every exporter of the node is silent"
            out.append(
                self._finding(ctx, float(times[c]), int(n), "node", "absent:node", "node_unreachable", note, runs[n, c])
            )
        return out

    def _gpus(self, ctx: Context, times: FloatArray, st: PresenceState, present: BoolArray) -> list[Finding]:
        seen = st.gpu.seen(present, self.settings.memory)
        any_gpu = np.zeros((len(ctx.nodes), present.shape[1]), dtype=bool)
        fold_into(np.logical_or, any_gpu, st.gpu_node, present)
        vanished = ~present & seen & any_gpu[st.gpu_node]
        runs = st.gpu.runs(vanished)
        gpus = list(st.gpus)
        out = []
        for i, c in zip(*np.nonzero(vanished), strict=True):
            node, comp = gpus[i]
            note = f"{comp} vanished, the node's other GPUs report"
            out.append(
                self._finding(ctx, float(times[c]), node, comp, "absent:gpu", "gpu_fallen_off_bus", note, runs[i, c])
            )
        return out
