"""Every detector's and the policy's thresholds in one typed table.

Each part is the detector's own frozen settings dataclass; its fields' comments are their
documentation (docs/settings.md is generated from them by :mod:`peerwatch.settings_doc`, and
a test fails when a field has none). ``peerwatch analyze --config`` and ``serve`` read the
``detection:`` section of a YAML file into this table (service/config.py validates it, unknown keys
rejected); the defaults are what runs without one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from peerwatch.decide.policy import PolicySettings
from peerwatch.detect.accumulation import AccumulationSettings
from peerwatch.detect.agent import AgentSettings
from peerwatch.detect.cluster import ClusterSettings
from peerwatch.detect.counters import CounterSettings
from peerwatch.detect.failslow import FailSlowSettings
from peerwatch.detect.groups import GroupSettings
from peerwatch.detect.peer import PeerSettings
from peerwatch.detect.presence import PresenceSettings
from peerwatch.detect.states import StateSettings
from peerwatch.detect.temporal import TemporalSettings
from peerwatch.detect.training import TrainingSettings
from peerwatch.detect.transitions import TransitionSettings


@dataclass(frozen=True)
class DetectionSettings:
    """Thresholds of peer grouping, every detector and the policy (the YAML ``detection:`` section)."""

    groups: GroupSettings = field(default_factory=GroupSettings)  # how nodes are put into peer groups
    transitions: TransitionSettings = field(default_factory=TransitionSettings)  # restarts, stalls: findings held
    peer: PeerSettings = field(default_factory=PeerSettings)  # an entity off its peers
    counters: CounterSettings = field(default_factory=CounterSettings)  # error and drop counters increasing
    states: StateSettings = field(default_factory=StateSettings)  # XIDs, link states, PCIe links, throttling
    presence: PresenceSettings = field(default_factory=PresenceSettings)  # nodes, GPUs and exporters gone silent
    cluster: ClusterSettings = field(default_factory=ClusterSettings)  # the NFS server slow for every client
    agent: AgentSettings = field(default_factory=AgentSettings)  # the node agent's health checks
    training: TrainingSettings = field(default_factory=TrainingSettings)  # throughput and MFU curve shapes
    temporal: TemporalSettings = field(default_factory=TemporalSettings)  # slow temperature drifts
    accumulation: AccumulationSettings = field(default_factory=AccumulationSettings)  # error counters growing for hours
    failslow: FailSlowSettings = field(default_factory=FailSlowSettings)  # a node slowly falling behind its job
    policy: PolicySettings = field(default_factory=PolicySettings)  # findings into incidents: continuity, closing
