"""Deciding, apart from scoring: which findings become alarms, and when alarms end.

Per step: findings on one signal at many nodes of a group are a cluster-wide move (a checkpoint,
a restart, a stalled job) and are set aside; the rest are fused per node (the strongest finding
plus a share of the others, so several weak signals on one node add up). An incident opens when
the fused score holds for k of the last n steps (or at once for a sure, strong finding such as
a hardware XID), stays one alarm while it goes on (no repeats), and resolves after a quiet spell.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from peerwatch.detect.context import Context
from peerwatch.detect.groups import move_keys
from peerwatch.diagnose.actions import severity_and_action
from peerwatch.diagnose.rules import Diagnoser
from peerwatch.model import Alarm, Finding

SURE_DETECTORS = frozenset({"state", "presence", "agent"})
NFS_SIGNAL = re.compile(r"^node_(mountstats_nfs|nfs)_")  # their findings are never a shared workload move


@dataclass(frozen=True)
class PolicySettings:
    open_score: float = 6.0
    k: int = 6  # continuity: k of the last n steps (3 of 4 minutes, like Minder's 4-minute rule)
    n: int = 8
    immediate: float = 15.0  # a sure finding this strong opens an incident at once
    # Error counters already integrate recurrence over their window: two increases on one entity
    # within it (a score of 6) open at once, without a second continuity wait.
    counter_open: float = 6.0
    close_score: float = 4.0
    quiet: int = 20  # steps below close_score before an incident resolves
    quiet_sure: int = 60  # the same after a sure or strong failure: a failed node stays failed
    shared_share: float = 0.15  # findings on one signal at this share of a group's nodes are shared
    shared_min: int = 3
    others_weight: float = 0.25
    evidence: int = 8
    diagnose_within: int = 20  # steps after opening whose findings decide the diagnosis
    new_failure_after: int = 20  # steps: a sure finding of a new kind on an older incident is a new alarm
    storage_after: int = 20  # steps after the NFS server was last seen slow that clients' NFS findings are its


@dataclass
class _Incident:
    node: str
    opened: float
    findings: list[Finding] = field(default_factory=list)  # those the diagnosis can still use
    score: float = 0.0
    last_active: float = 0.0
    resolved: float | None = None
    hints: set[str] = field(default_factory=set)
    last_finding: float = 0.0
    early: bool = False  # findings holds early ones only (see Policy._add)


@dataclass
class PolicyState:
    """Where the policy is after the steps scanned so far: per node its recent fused scores, the open
    incidents, and the last step the NFS server was seen slow."""

    steps: int = 0
    history: dict[str, deque[float]] = field(default_factory=dict)
    open: dict[str, _Incident] = field(default_factory=dict)
    storage_seen: int = -(10**9)


def fuse(findings: Sequence[Finding], others_weight: float) -> float:
    """Strongest finding plus a share of the best of every other signal, at most twice the strongest."""
    best: dict[str, float] = {}
    for f in findings:
        best[f.signal] = max(best.get(f.signal, 0.0), f.score)
    scores = sorted(best.values(), reverse=True)
    if not scores:
        return 0.0
    return min(2 * scores[0], scores[0] + others_weight * sum(scores[1:]))


def shared_signals(
    findings: Sequence[Finding], groups_at: dict[str, int], group_sizes: dict[int, int], settings: PolicySettings
) -> set[tuple[int, str]]:
    """(group, signal) pairs seen at so many nodes of the group at one step that they are a shared move."""
    nodes: dict[tuple[int, str], set[str]] = defaultdict(set)
    for f in findings:
        if f.detector not in SURE_DETECTORS:
            nodes[(groups_at.get(f.node, -1), f.signal)].add(f.node)
    return {
        key
        for key, members in nodes.items()
        if len(members) >= max(settings.shared_min, settings.shared_share * group_sizes.get(key[0], 0))
    }


class Policy:
    """Turns per-step findings into alarms with a lifecycle."""

    def __init__(self, settings: PolicySettings | None = None, diagnoser: Diagnoser | None = None) -> None:
        self.settings = settings or PolicySettings()
        self.diagnoser = diagnoser or Diagnoser.default()

    def decide(self, ctx: Context, findings: Sequence[Finding]) -> list[Alarm]:
        """Alarms of a whole run."""
        return self.scan(ctx, findings, None)[0]

    def scan(
        self, ctx: Context, findings: Sequence[Finding], state: PolicyState | None
    ) -> tuple[list[Alarm], PolicyState]:
        """Alarms of the incidents open at the end of this chunk of steps or resolved in it, after the
        chunks ``state`` has seen (stream.py); the new state."""
        st = self.settings
        state = state or PolicyState()
        by_step: dict[int, list[Finding]] = defaultdict(list)
        for f in findings:
            by_step[round((f.ts - ctx.start) / ctx.step)].append(f)
        history, open_ = state.history, state.open
        done: list[_Incident] = []
        for col in range(ctx.steps):
            ts = float(ctx.start + col * ctx.step)
            step_findings = by_step.get(col, [])
            keys = move_keys(ctx.groups[:, col])
            groups_at = {ctx.nodes[i]: int(g) for i, g in enumerate(keys)}
            sizes = {int(g): int(c) for g, c in zip(*np.unique(keys, return_counts=True), strict=True)}
            shared = shared_signals(step_findings, groups_at, sizes, st)
            # While every client sees the NFS server slow, a client's own NFS trouble is that, not its
            # own; and for a while after, since client counters (timeouts) score over their window.
            now = state.steps + col
            if any(f.node == "cluster" and f.hint == "nfs_storage" for f in step_findings):
                state.storage_seen = now
            storage_down = now - state.storage_seen <= st.storage_after
            per_node: dict[str, list[Finding]] = defaultdict(list)
            for f in step_findings:
                if (groups_at.get(f.node, -1), f.signal) in shared:
                    continue
                if storage_down and f.node != "cluster" and NFS_SIGNAL.match(f.signal):
                    continue
                per_node[f.node].append(f)
            for node in set(per_node) | set(history) | set(open_):
                mine = per_node.get(node, [])
                score = fuse(mine, st.others_weight)
                recent = history.setdefault(node, deque(maxlen=st.n))
                recent.append(score)
                incident = open_.get(node)
                sure = [f for f in mine if f.detector in SURE_DETECTORS and f.score >= st.immediate]
                new_kind = {f.hint for f in sure if f.hint} - (incident.hints if incident else set())
                if incident is not None and new_kind and ts - incident.opened >= st.new_failure_after * ctx.step:
                    # A hard failure on a node already under suspicion for a while is news of its own.
                    incident.resolved = ts
                    done.append(open_.pop(node))
                    incident = None
                if incident is not None:
                    self._add(incident, mine, ctx.step)
                    incident.hints.update(f.hint for f in sure if f.hint)
                    incident.score = max(incident.score, score)
                    if score >= st.close_score:
                        incident.last_active = ts
                    elif ts - incident.last_active >= self._quiet(incident) * ctx.step:
                        incident.resolved = ts
                        done.append(open_.pop(node))
                    continue
                counting = any(f.detector == "counter" and f.score >= st.counter_open for f in mine)
                strong_steps = sum(s >= st.open_score for s in recent)
                if sure or counting or strong_steps >= st.k:
                    hints = {f.hint for f in sure if f.hint}
                    open_[node] = _Incident(node, ts, [], score, ts, hints=hints, last_finding=ts)
                    self._add(open_[node], mine, ctx.step)
                elif strong_steps == 0:
                    del history[node]  # nothing toward continuity: stop visiting the node every step
        state.steps += ctx.steps
        alarms = (self._alarm(i, ctx) for i in (*done, *open_.values()))
        return sorted(alarms, key=lambda a: (a.ts, a.node)), state

    def _early(self, incident: _Incident, f: Finding, step: float) -> bool:
        # The cause shows first; later on a failed node shows everything (idle GPUs, low PCIe gen).
        # Past the first minutes only sure hard findings (an XID, a vanished GPU) still count.
        horizon = incident.opened + self.settings.diagnose_within * step
        return f.ts <= horizon or (f.detector in SURE_DETECTORS and f.score >= self.settings.immediate)

    def _add(self, incident: _Incident, findings: Sequence[Finding], step: float) -> None:
        """Keep what the diagnosis uses: once an incident has early findings, only those (an incident
        open for days does not hold every finding since)."""
        if findings:
            incident.last_finding = max(incident.last_finding, max(f.ts for f in findings))
        early = [f for f in findings if self._early(incident, f, step)]
        if incident.early:
            incident.findings.extend(early)
        elif early:
            incident.findings = [f for f in (*incident.findings, *findings) if self._early(incident, f, step)]
            incident.early = True
        else:
            incident.findings.extend(findings)

    def _quiet(self, incident: _Incident) -> int:
        """Steps of quiet that end an incident: longer after a sure or strong failure, which stays failed."""
        strong = bool(incident.hints) or incident.score >= self.settings.immediate
        return self.settings.quiet_sure if strong else self.settings.quiet

    def _alarm(self, incident: _Incident, ctx: Context) -> Alarm:
        early = [f for f in incident.findings if self._early(incident, f, ctx.step)]
        d = self.diagnoser.diagnose(early or incident.findings)
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        evidence = []
        for f in (*d.cause, *d.symptoms):  # cause first, then where else it showed
            key = (f.evidence.metric, f.evidence.labels)
            if key not in seen:
                seen.add(key)
                evidence.append(f.evidence)
            if len(evidence) >= self.settings.evidence:
                break
        severity, action = severity_and_action(d.diagnosis, incident.score)
        ident = hashlib.sha1(f"{incident.node}|{incident.opened}".encode()).hexdigest()[:12]
        last = incident.last_finding
        return Alarm(
            id=ident,
            ts=incident.opened,
            node=incident.node,
            component=d.component,
            diagnosis=d.diagnosis,
            severity=severity,
            score=incident.score,
            action=action,
            evidence=tuple(evidence),
            updated_ts=last,
            resolved_ts=incident.resolved,
        )
