"""A scenario: which cluster, how long, which seed, which faults and benign events."""

from __future__ import annotations

from dataclasses import dataclass, field

from peerwatch.simulate.cluster import ClusterSpec
from peerwatch.simulate.events import Benign
from peerwatch.simulate.faults import FaultRequest
from peerwatch.simulate.targets import RESTART_PER_HOUR

START_TS = 1_764_460_800.0  # 2025-11-30T00:00:00Z, a step-aligned start


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything that determines a recording; equal scenarios give byte-identical output."""

    name: str
    spec: ClusterSpec = field(default_factory=ClusterSpec)
    hours: float = 6.0
    seed: int = 0
    faults: tuple[FaultRequest, ...] = ()
    benign: Benign = field(default_factory=Benign)
    random_faults: bool = False  # add faults drawn from the MTTF table
    description: str = ""
    start_ts: float = START_TS
    exporter_restarts_per_hour: float = RESTART_PER_HOUR

    def __post_init__(self) -> None:
        if not self.hours > 0:
            raise ValueError(f"hours must be positive, got {self.hours}")
        if self.seed < 0:
            raise ValueError(f"seed must be non-negative, got {self.seed}")
        if self.start_ts % self.spec.scrape_interval:
            raise ValueError(f"start_ts must be a multiple of the scrape interval ({self.spec.scrape_interval} s)")
