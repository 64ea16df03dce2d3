"""The shapes a training job's throughput/MFU curve takes, as a typed table, and the verdict type.

Each shape points to a different cause (a 70B run on 4,088 H100s found these the common ones).
The table holds everything that differs between shapes: which test scores it, its level band as
a fraction of the expected throughput, the score it needs, and what to tell the operator. The
numeric knobs of the tests live in :class:`Thresholds`; nothing in the scoring code is a magic number.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal


class Shape(StrEnum):
    healthy = "healthy"
    fabric_failure = "fabric_failure"
    gdr_misconfig = "gdr_misconfig"
    degraded_link = "degraded_link"
    gc_stall = "gc_stall"
    throttle = "throttle"
    straggler = "straggler"


Test = Literal["level", "trend", "periodic_dips", "rank_spread", "healthy"]


@dataclass(frozen=True, slots=True)
class ShapeDef:
    """One row: how a shape is recognised and what it means.

    ``band`` is the accepted range of the current level (fraction of expected); ``nominal`` the
    range the shape is known for (inside it the level adds no doubt). ``diagnosis`` is the alarm
    diagnosis the engine should use (new words extend GUIDE 3.1's list).
    """

    shape: Shape
    test: Test
    min_score: float
    diagnosis: str | None
    severity: Literal["warning", "critical"] | None
    likely_cause: str
    suggested_check: str
    band: tuple[float, float] | None = None
    nominal: tuple[float, float] | None = None


# Order is priority: the first row whose score reaches its min_score wins. The deep level bands
# first (nothing else explains them, and they matter most), then per-rank evidence, then shapes
# defined by their time course (a sinking or dipping curve also has a lower median), then the
# plain band.
SHAPES: tuple[ShapeDef, ...] = (
    ShapeDef(
        shape=Shape.fabric_failure,
        test="level",
        min_score=0.5,
        diagnosis="fabric_failure",
        severity="critical",
        likely_cause="a dead upper-tier InfiniBand switch (traffic squeezed through the remaining spine links)",
        suggested_check="check the spine/core switch status and port counters in the subnet manager (ibnetdiscover, "
        "ibdiagnet) and IB link-down counters on all hosts",
        band=(0.0, 0.18),
        nominal=(0.0, 0.12),
    ),
    ShapeDef(
        shape=Shape.gdr_misconfig,
        test="level",
        min_score=0.5,
        diagnosis="gdr_misconfig",
        severity="critical",
        likely_cause="one host with a broken GPUDirect RDMA set-up (nvidia-peermem not loaded, ACS/IOMMU on), "
        "so its traffic bounces through host memory",
        suggested_check="on every host: lsmod | grep nvidia_peermem, NCCL_DEBUG=INFO 'GDRDMA' lines, ACS settings "
        "(lspci -vvv | grep ACSCtl); the host without GDR is the one",
        band=(0.18, 0.45),
        nominal=(0.25, 0.38),
    ),
    ShapeDef(
        shape=Shape.straggler,
        test="rank_spread",
        min_score=0.5,
        diagnosis="performance_degradation",
        severity="warning",
        likely_cause="one rank is consistently slower than its peers and the whole synchronous job waits for it",
        suggested_check="compare that rank's GPU clocks, throttle reasons, PCIe/NVLink and IB counters with its peers; "
        "drain its host if it stays slow",
    ),
    ShapeDef(
        shape=Shape.gc_stall,
        test="trend",
        min_score=0.5,
        diagnosis="gc_stall",
        severity="warning",
        likely_cause="Python garbage collection running out of step across workers (each pause stalls every rank)",
        suggested_check="disable automatic GC (gc.disable / gc.freeze) and collect on all ranks at the same step; "
        "confirm with per-rank step-time spikes",
    ),
    ShapeDef(
        shape=Shape.throttle,
        test="periodic_dips",
        min_score=0.5,
        diagnosis="performance_degradation",
        severity="warning",
        likely_cause="thermal or power clock throttling on one or more GPUs",
        suggested_check="correlate the drops with DCGM_FI_DEV_SM_CLOCK and DCGM_FI_DEV_CLOCK_THROTTLE_REASONS "
        "(DCGM_FI_DEV_CLOCKS_EVENT_REASONS), GPU temperature and power draw against the limit",
    ),
    ShapeDef(
        shape=Shape.degraded_link,
        test="level",
        min_score=0.5,
        diagnosis="ib_link",
        severity="warning",
        likely_cause="a degrading or failing InfiniBand link (retransmits, lower width or speed)",
        suggested_check="check IB port counters (symbol errors, link downed, port_rcv_errors, xmit_wait) and the "
        "link width/speed on every host; look for the port that drifts from its peers",
        band=(0.45, 0.85),
        nominal=(0.58, 0.82),
    ),
    ShapeDef(
        shape=Shape.healthy,
        test="healthy",
        min_score=0.0,
        diagnosis=None,
        severity=None,
        likely_cause="the job runs near its expected throughput",
        suggested_check="nothing to do",
        band=(0.85, float("inf")),
    ),
)

SHAPE_DEFS: dict[Shape, ShapeDef] = {row.shape: row for row in SHAPES}


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Numeric knobs of the tests (fractions are of the expected throughput unless said)."""

    smooth_s: float = 120.0  # rolling-median window that removes short dips and noise
    expected_quantile: float = 0.95  # of the smoothed series, when no expected value is given
    down_level: float = 0.02  # below this the job is not running (restart, hang)
    break_gap_factor: float = 5.0  # a gap over this many sampling intervals splits segments
    break_min_s: float = 60.0  # ... and over this many seconds
    dip_min_depth: float = 0.12  # a dip goes at least this far below the local upper level
    dip_noise_k: float = 5.0  # ... and this many noise sigmas (the upper level sits ~1 sigma high)
    dip_deep_level: float = 0.45  # dips below this (of the upper level) are checkpoints/stalls
    dip_min_count: int = 6  # fewer dips are isolated events, not throttling
    dip_full_count: int = 10  # this many regular dips give full weight
    dip_max_period_s: float = 300.0  # throttling repeats within seconds to minutes
    dip_interval_tolerance: float = 0.25  # an interval is regular within this of k x period
    dip_regular_random: float = 0.45  # regularity of dips that noise makes at random ...
    dip_regular_full: float = 0.8  # ... and of throttling with jittered period
    dip_acf_full: float = 0.4  # indicator autocorrelation at the period giving full weight
    cycle_acf_full: float = 0.5  # autocorrelation of the detrended series at its period giving full weight
    cycle_min_depth: float = 0.08  # the folded cycle must dip at least this much
    throttle_upper_min: float = 0.85  # throttling runs at full speed between drops ...
    throttle_low_upper_weight: float = 0.4  # ... else its score is scaled by this (below min_score alone)
    trend_min_decline: float = 0.05  # decline over a segment below this is no trend
    trend_full_decline: float = 0.15  # a decline this large over a segment gives full weight
    trend_full_r2: float = 0.6  # R^2 of the linear fit giving full weight
    trend_min_segment_frac: float = 0.05  # segments shorter than this share of time are skipped
    recovery_min_gain: float = 0.08  # a restart that lifts the level this much is a recovery
    start_full_level: float = 0.85  # "starts at full speed"
    tail_frac: float = 1 / 3  # the current level is the median of the last third ...
    change_min_gain: float = 0.5  # ... or of the part after a level shift that explains this much
    straggler_min_gap: float = 0.03  # a straggler is at least this much slower than the median rank
    straggler_full_gap: float = 0.08  # a rank this much slower than the median rank gives full weight ...
    straggler_full_z: float = 5.0  # ... as does a robust z this far under the other ranks
    straggler_full_consistency: float = 0.9  # below the median of the others at 90% of steps (random: 50%)
    min_points: int = 20  # fewer active samples cannot be classified
    runner_up_score: float = 0.3  # shapes scoring this much are named in the evidence too


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True, slots=True)
class ShapeResult:
    """Verdict on one throughput/MFU series.

    ``evidence`` holds plain sentences with numbers; ``scores`` the score of every shape (0-1), so
    a caller can see how close the runner-up came. ``ranks`` names stragglers; ``dips`` the
    (start, end) epoch seconds of throttle dips, for correlation with DCGM clock series.
    """

    shape: Shape
    confidence: float
    evidence: tuple[str, ...]
    likely_cause: str
    suggested_check: str
    expected: float | None = None
    expected_estimated: bool = False
    level: float | None = None  # current level, fraction of expected
    scores: tuple[tuple[str, float], ...] = ()
    ranks: tuple[int, ...] = ()
    dips: tuple[tuple[float, float], ...] = ()
    diagnosis: str | None = None
    severity: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (dip windows left out: they can be long)."""
        return {
            "shape": self.shape.value,
            "confidence": round(self.confidence, 3),
            "evidence": list(self.evidence),
            "likely_cause": self.likely_cause,
            "suggested_check": self.suggested_check,
            "expected": self.expected,
            "expected_estimated": self.expected_estimated,
            "level": None if self.level is None else round(self.level, 4),
            "scores": {name: round(score, 3) for name, score in self.scores},
            "ranks": list(self.ranks),
            "dip_count": len(self.dips),
            "diagnosis": self.diagnosis,
            "severity": self.severity,
        }
