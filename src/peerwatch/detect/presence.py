"""Presence: what stopped reporting, and what still does.

Every exporter of a node silent -> the node is unreachable. One exporter silent (or ``up`` 0)
while the node's others report -> that exporter is down, and the node is still watched through
the others. A GPU whose series vanish from every exporter while the node's other GPUs still
report -> the GPU fell off the bus. Only what was seen before can go missing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.catalog.schema import Unit
from peerwatch.detect.context import Context, IntArray
from peerwatch.model import BoolArray, Evidence, Finding

REFERENCE_STEP = 30.0  # the step the per-step scores are written for


@dataclass(frozen=True)
class PresenceSettings:
    """Scores per consecutive silent 30 s (scaled to the grid's step): a missed scrape or two is
    normal, minutes of silence are not. A minute of silence is what makes a sure finding whatever
    the scrape interval, so a cluster scraped every 60 s is alarmed after one silent step."""

    memory: int = 120  # steps for which something seen is expected to go on reporting
    exporter_per_step: float = 1.5  # 4 silent steps (2 min) reach 6
    node_per_step: float = 7.5
    gpu_per_step: float = 7.5  # the second silent step reaches 15: alarmed within 2 steps
    blind_share: float = 0.5  # this share of nodes silent at once: the monitoring, not the nodes


def run_length(flag: BoolArray) -> IntArray:
    """How many consecutive steps, up to and including each one, ``flag`` has held."""
    steps = flag.shape[1]
    idx = np.arange(steps)
    last_false = np.maximum.accumulate(np.where(~flag, idx, -1), axis=1)
    runs: IntArray = np.where(flag, idx - last_false, 0)
    return runs


def _group_presence(
    rows: list[tuple[tuple[int, str], BoolArray]],
    steps: int,
) -> tuple[list[tuple[int, str]], BoolArray]:
    """OR of presence rows sharing a key."""
    keys: dict[tuple[int, str], int] = {}
    for key, _ in rows:
        keys.setdefault(key, len(keys))
    out = np.zeros((len(keys), steps), dtype=bool)
    for key, present in rows:
        out[keys[key]] |= present
    return list(keys), out


def _seen_recently(present: BoolArray, memory: int) -> BoolArray:
    """Whether each row was present at some step in the ``memory`` steps before this one."""
    csum: IntArray = np.cumsum(present, axis=1)
    before = np.zeros_like(csum)
    before[:, 1:] = csum[:, :-1]
    lag = np.zeros_like(csum)
    lag[:, memory + 1 :] = csum[:, : -memory - 1]
    seen: BoolArray = (before - lag) > 0
    return seen


class PresenceDetector:
    name = "presence"

    def __init__(self, settings: PresenceSettings | None = None) -> None:
        self.settings = settings or PresenceSettings()

    def detect(self, ctx: Context) -> list[Finding]:
        steps = ctx.steps
        target_rows: list[tuple[tuple[int, str], BoolArray]] = []
        gpu_rows: list[tuple[tuple[int, str], BoolArray]] = []
        jobs: dict[tuple[int, str], str] = {}
        for s in ctx.series:
            present = ~np.isnan(s.values)
            if s.frame.name == "up":
                present = present & (np.nan_to_num(s.values, nan=0.0) > 0)
            for r, key in enumerate(s.frame.keys):
                n = int(s.node_index[r])
                if n < 0:
                    continue
                instance = key.get("instance") or ""
                target_rows.append(((n, instance), present[r]))
                jobs.setdefault((n, instance), key.get("job") or instance)
                if s.family.unit is Unit.gpu and s.components[r].startswith("gpu/"):
                    gpu_rows.append(((n, s.components[r]), present[r]))
        if not target_rows:
            return []
        # `up` 0 overrides the target's other series for that step (they may be stale copies).
        targets, present = _group_presence(target_rows, steps)
        up = ctx.by_name().get("up")
        if up is not None:
            where = {t: i for i, t in enumerate(targets)}
            for r, key in enumerate(up.frame.keys):
                i = where.get((int(up.node_index[r]), key.get("instance") or ""))
                if i is not None:
                    present[i] &= ~(np.nan_to_num(up.values[r], nan=1.0) == 0)
        node_of_target = np.array([n for n, _ in targets])
        node_present = np.zeros((len(ctx.nodes), steps), dtype=bool)
        np.logical_or.at(node_present, node_of_target, present)
        out = self._targets(ctx, targets, present, node_present, jobs)
        out += self._nodes(ctx, node_present)
        if gpu_rows:
            gpus, gpu_present = _group_presence(gpu_rows, steps)
            out += self._gpus(ctx, gpus, gpu_present)
        return out

    def _finding(
        self, ctx: Context, node: int, col: int, component: str, signal: str, hint: str, note: str, run: int
    ) -> Finding:
        per_step = {
            "exporter_down": self.settings.exporter_per_step,
            "node_unreachable": self.settings.node_per_step,
            "gpu_fallen_off_bus": self.settings.gpu_per_step,
            "monitoring_blind": self.settings.node_per_step,
        }[hint]
        score = per_step * run * ctx.step / REFERENCE_STEP
        return Finding(
            ts=float(ctx.timestamps[col]),
            node=ctx.nodes[node] if node >= 0 else "peerwatch",
            component=component,
            detector=self.name,
            signal=signal,
            score=score,
            evidence=Evidence(signal, (), 0.0, 1.0, None, note),
            hint=hint,
        )

    def _targets(
        self,
        ctx: Context,
        targets: list[tuple[int, str]],
        present: BoolArray,
        node_present: BoolArray,
        jobs: dict[tuple[int, str], str],
    ) -> list[Finding]:
        seen = _seen_recently(present, self.settings.memory)
        node_up = node_present[[n for n, _ in targets]]
        silent = ~present & seen & node_up
        runs = run_length(silent)
        out = []
        for i, c in zip(*np.nonzero(silent), strict=True):
            node, instance = targets[i]
            job = jobs[(node, instance)]
            note = f"{job} ({instance}) silent, the node's other exporters report"
            out.append(self._finding(ctx, node, int(c), "node", f"absent:{job}", "exporter_down", note, runs[i, c]))
        return out

    def _nodes(self, ctx: Context, node_present: BoolArray) -> list[Finding]:
        seen = _seen_recently(node_present, self.settings.memory)
        gone = ~node_present & seen
        # Most of the cluster silent at once is peerwatch (or its source) not seeing, not N dead nodes.
        share = gone.sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
        blind = (share >= self.settings.blind_share) & (gone.sum(axis=0) >= 3)
        runs = run_length(gone & ~blind[None, :])
        out = []
        for n, c in zip(*np.nonzero(gone & ~blind[None, :]), strict=True):
            note = "every exporter of the node is silent"
            out.append(self._finding(ctx, int(n), int(c), "node", "absent:node", "node_unreachable", note, runs[n, c]))
        blind_runs = run_length(blind[None, :])[0]
        for c in np.flatnonzero(blind):
            note = f"{int(gone[:, c].sum())} of {int(seen[:, c].sum())} nodes silent at once"
            run = int(blind_runs[c])
            out.append(self._finding(ctx, -1, int(c), "source", "absent:cluster", "monitoring_blind", note, run))
        return out

    def _gpus(self, ctx: Context, gpus: list[tuple[int, str]], present: BoolArray) -> list[Finding]:
        seen = _seen_recently(present, self.settings.memory)
        node_of = np.array([n for n, _ in gpus])
        any_gpu = np.zeros((len(ctx.nodes), present.shape[1]), dtype=bool)
        np.logical_or.at(any_gpu, node_of, present)
        vanished = ~present & seen & any_gpu[node_of]
        runs = run_length(vanished)
        out = []
        for i, c in zip(*np.nonzero(vanished), strict=True):
            node, comp = gpus[i]
            note = f"{comp} vanished, the node's other GPUs report"
            out.append(self._finding(ctx, node, int(c), comp, "absent:gpu", "gpu_fallen_off_bus", note, runs[i, c]))
        return out
