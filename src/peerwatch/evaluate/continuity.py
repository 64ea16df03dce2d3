"""The baseline's deciding rule: outlier points per step become alarms only when they persist.

A user's vmalert rule would say ``for: 1m``; here, for one node and component, an alarm is
raised at the first step where at least ``need`` of the last ``span`` steps had an outlier point.
Outlier points closer than ``quiet`` steps apart belong to one episode, which raises at most one
alarm, so a flapping series is one incident rather than dozens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Rule:
    """``need`` outlier steps within the last ``span``; episodes end after ``quiet`` clean steps."""

    need: int = 2
    span: int = 3
    quiet: int = 10

    def __post_init__(self) -> None:
        if not 1 <= self.need <= self.span:
            raise ValueError(f"need 1 <= need <= span, got need={self.need}, span={self.span}")
        if self.quiet < self.span:
            raise ValueError(f"quiet ({self.quiet}) must be at least span ({self.span}) so episodes do not overlap")


DEFAULT_RULE = Rule()


@dataclass(frozen=True, slots=True)
class Episode:
    """A run of outlier steps that raised an alarm at step ``raised``."""

    raised: int
    first: int
    last: int
    points: int


def episodes(outlier: BoolArray, rule: Rule = DEFAULT_RULE) -> list[Episode]:
    """Episodes of one entity's per-step outlier flags (1-D) that satisfy ``rule``."""
    flags = np.asarray(outlier, dtype=bool)
    idx = np.flatnonzero(flags)
    if idx.size == 0:
        return []
    # outliers among the last `span` steps, at every step (window ends at the step itself)
    recent = np.convolve(flags.astype(np.int64), np.ones(rule.span, dtype=np.int64))[: flags.size]
    active = recent >= rule.need
    breaks = np.flatnonzero(np.diff(idx) > rule.quiet)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [idx.size - 1]))
    out = []
    for s, e in zip(starts, ends, strict=True):
        first, last = int(idx[s]), int(idx[e])
        # a step after `last` sees a subset of what `last` sees: the episode's own span suffices
        cand = np.flatnonzero(active[first : last + 1])
        if cand.size:
            out.append(Episode(first + int(cand[0]), first, last, int(e - s + 1)))
    return out
