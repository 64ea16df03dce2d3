"""Deciding, apart from scoring: which findings become alarms, and when alarms end.

Per step: findings on one signal at many nodes of a group are a cluster-wide move (a checkpoint,
a restart, a stalled job) and are set aside; the rest are fused per node (the strongest finding
plus a share of the others, so several weak signals on one node add up). An incident opens when
the fused score holds for k of the last n steps (or at once for a sure, strong finding such as
a hardware XID), stays one alarm while it goes on (no repeats), and resolves after a quiet spell.
An alarm escalates in place: a new diagnosis, severity or action (an XID on a node already under
suspicion, warning to critical) is a change of the same alarm, dated at its step, never a new one.
While a node takes part in a cluster transition (a job restart, a stall, a checkpoint:
``Context.held``), its soft findings are held: they neither build nor break continuity.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from peerwatch.decide.actions import severity_and_action
from peerwatch.decide.rules import HARDWARE, Diagnoser
from peerwatch.detect.context import Context
from peerwatch.detect.groups import move_keys
from peerwatch.model import Alarm, AlarmChange, Finding

SURE_DETECTORS = frozenset({"state", "presence", "agent"})

# Detectors whose findings are hardware's own word (a counter of errors, a state): never held in a
# transition. Everything else (peer comparisons, drifts) is a soft signal that work changes move.
HARD_DETECTORS = SURE_DETECTORS | {"counter"}
# Sure findings that a cluster transition causes on many nodes (exporters restarted with the job's
# containers): treated as soft, so one counts only when it outlasts the transition and the others'.
TRANSITION_HINTS = frozenset({"exporter_down"})


def soft(f: Finding) -> bool:
    """Whether work changes can move this finding: shared and transitional moves set it aside."""
    return f.detector not in HARD_DETECTORS or f.hint in TRANSITION_HINTS


PRECURSOR_DETECTORS = frozenset({"accumulation"})  # slow growth: nothing has failed yet, so watch


@dataclass(frozen=True)
class PolicySettings:
    open_score: float = 6.0  # a step's fused score at least this counts towards continuity
    k: int = 6  # [steps] continuity: k of the last n steps (3 of 4 minutes, like Minder's 4-minute rule)
    n: int = 8  # [steps] ... the steps of the continuity window
    immediate: float = 15.0  # a sure finding this strong opens an incident at once
    # Error counters already integrate recurrence over their window: two increases on one entity
    # within it (a score of 6) open at once, without a second continuity wait.
    counter_open: float = 6.0
    close_score: float = 4.0  # a step's fused score under this is a quiet step
    quiet: int = 20  # steps below close_score before an incident resolves
    quiet_sure: int = 60  # [steps] the same after a sure or strong failure: a failed node stays failed
    shared_share: float = 0.15  # findings on one signal at this share of a group's nodes are shared
    shared_min: int = 3  # ... and at least this many nodes
    others_weight: float = 0.25  # share of a node's other findings' scores added to its best (at most doubling it)
    evidence: int = 8  # evidence items kept in an alarm
    diagnose_within: int = 20  # steps after opening whose findings decide the diagnosis
    storage_after: int = 20  # steps after the NFS server was last seen slow that clients' NFS findings are its
    nfs_signals: str = r"^node_(mountstats_nfs|nfs)_"  # (regex) the families of a client's NFS figures

    def __post_init__(self) -> None:
        try:
            re.compile(self.nfs_signals)
        except re.error as exc:
            raise ValueError(f"nfs_signals is not a regular expression: {exc}") from None


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
    changes: list[AlarmChange] = field(default_factory=list)  # the view it opened with, then each change
    evidence: tuple[Finding, ...] = ()  # cause first, then symptoms (of the latest diagnosis)
    late_keys: set[tuple[str, str, str]] = field(default_factory=set)  # sure findings kept after the early window
    precursor: bool = False  # the diagnosis rests on a slow accumulation alone (see Policy._precursor)


@dataclass
class PolicyState:
    """Where the policy is after the steps scanned so far: per node its recent fused scores, the open
    incidents, and the last step the NFS server was seen slow."""

    steps: int = 0
    history: dict[str, deque[float]] = field(default_factory=dict)
    recent: dict[str, deque[list[Finding]]] = field(default_factory=dict)  # findings behind ``history``
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
        if f.detector not in SURE_DETECTORS or f.hint in TRANSITION_HINTS:
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
        self.nfs_signal = re.compile(self.settings.nfs_signals)

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
            held = set() if ctx.held is None else {ctx.nodes[i] for i in np.flatnonzero(ctx.held[:, col])}
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
                if storage_down and f.node != "cluster" and self.nfs_signal.match(f.signal):
                    continue
                if f.node in held and soft(f):
                    continue
                per_node[f.node].append(f)
            for node in set(per_node) | set(history) | set(open_):
                mine = per_node.get(node, [])
                score = fuse(mine, st.others_weight)
                incident = open_.get(node)
                if node in held and incident is None and not mine:
                    continue  # held: the node's continuity neither grows nor breaks
                recent = history.setdefault(node, deque(maxlen=st.n))
                recent.append(score)
                behind = state.recent.setdefault(node, deque(maxlen=st.n))
                behind.append(mine)
                sure = [f for f in mine if f.detector in SURE_DETECTORS and f.score >= st.immediate]
                if incident is not None:
                    news = self._add(incident, mine, ctx.step)
                    incident.hints.update(f.hint for f in sure if f.hint)
                    incident.score = max(incident.score, score)
                    if score >= st.close_score:
                        incident.last_active = ts
                    elif ts - incident.last_active >= self._quiet(incident) * ctx.step:
                        incident.resolved = ts
                        done.append(open_.pop(node))
                        continue
                    self._review(incident, ts, news)
                    continue
                # Device error counters open at once; a node's symptom counters (TCP and RPC
                # retransmissions) and its NICs' errors (as often the storage path's trouble as the
                # NIC's) wait for continuity, so the cause has time to show.
                counting = any(
                    f.detector == "counter" and f.score >= st.counter_open and f.component.startswith(HARDWARE)
                    for f in mine
                )
                strong_steps = sum(s >= st.open_score for s in recent)
                if sure or counting or strong_steps >= st.k:
                    hints = {f.hint for f in sure if f.hint}
                    open_[node] = _Incident(node, ts, [], score, ts, hints=hints, last_finding=ts)
                    # The findings that built the continuity name the failure at opening too.
                    self._add(open_[node], [f for found in behind for f in found], ctx.step)
                    self._review(open_[node], ts, True)
                elif strong_steps == 0:
                    del history[node]  # nothing toward continuity: stop visiting the node every step
                    state.recent.pop(node, None)
        state.steps += ctx.steps
        alarms = (self._alarm(i) for i in (*done, *open_.values()))
        return sorted(alarms, key=lambda a: (a.ts, a.node)), state

    def _review(self, incident: _Incident, ts: float, diagnose: bool) -> None:
        """The incident's view at ``ts`` (diagnosis again when it has new findings); a change of
        diagnosis, component, severity or action is recorded, dated at this step."""
        if diagnose or not incident.changes:
            d = self.diagnoser.diagnose(incident.findings)
            component, diagnosis = d.component, d.diagnosis
            incident.evidence = (*d.cause, *d.symptoms)
            incident.precursor = self._precursor(d.cause)
        else:
            last = incident.changes[-1]
            component, diagnosis = last.component, last.diagnosis
        severity, action = severity_and_action(diagnosis, incident.score)
        if incident.precursor:
            severity, action = "warning", "watch"
        view = AlarmChange(ts, severity, diagnosis, action, component)
        if not incident.changes or replace(incident.changes[-1], ts=ts) != view:
            incident.changes.append(view)

    def _add(self, incident: _Incident, findings: Sequence[Finding], step: float) -> bool:
        """Keep what the diagnosis uses: the findings of the first minutes, and past them sure hard
        findings, one per detector, signal and component (an incident open for days does not hold
        every finding since; a later XID is still news). Whether anything was kept."""
        if not findings:
            return False
        incident.last_finding = max(incident.last_finding, max(f.ts for f in findings))
        # The cause shows first; later on a failed node shows everything (idle GPUs, low PCIe gen).
        horizon = incident.opened + self.settings.diagnose_within * step
        kept = []
        for f in findings:
            key = (f.detector, f.signal, f.component)
            if f.ts <= horizon:
                kept.append(f)
            elif f.detector in SURE_DETECTORS and f.score >= self.settings.immediate and key not in incident.late_keys:
                incident.late_keys.add(key)
                kept.append(f)
        incident.findings.extend(kept)
        return bool(kept)

    def _quiet(self, incident: _Incident) -> int:
        """Steps of quiet that end an incident: longer after a sure or strong failure, which stays failed."""
        strong = bool(incident.hints) or incident.score >= self.settings.immediate
        return self.settings.quiet_sure if strong else self.settings.quiet

    def _precursor(self, cause: Sequence[Finding]) -> bool:
        """The diagnosis rests on a slow accumulation alone (no other cause finding that would open an
        alarm by itself): nothing has failed yet, so the alarm is a warning to watch."""
        return (
            bool(cause)
            and cause[0].detector in PRECURSOR_DETECTORS
            and all(f.detector in PRECURSOR_DETECTORS or f.score < self.settings.open_score for f in cause)
        )

    def _alarm(self, incident: _Incident) -> Alarm:
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        evidence = []
        for f in incident.evidence:  # cause first, then where else it showed
            key = (f.evidence.metric, f.evidence.labels)
            if key not in seen:
                seen.add(key)
                evidence.append(f.evidence)
            if len(evidence) >= self.settings.evidence:
                break
        now = incident.changes[-1]
        ident = hashlib.sha1(f"{incident.node}|{incident.opened}".encode()).hexdigest()[:12]
        return Alarm(
            id=ident,
            ts=incident.opened,
            node=incident.node,
            component=now.component,
            diagnosis=now.diagnosis,
            severity=now.severity,
            score=incident.score,
            action=now.action,
            evidence=tuple(evidence),
            updated_ts=incident.last_finding,
            resolved_ts=incident.resolved,
            changes=tuple(incident.changes) if len(incident.changes) > 1 else (),
        )
